"""What a resolver is handed (GraphInfo), and how a field reaches a type of a domain above
its own: by name, from the assembled schema, since that domain's module imports this
one's (link fields such as Space.cloudSpaces point up the domain order)."""

from __future__ import annotations

from typing import Any

from strawberry.types import Info

from resolvers.common.context import Context

GraphInfo = Info[Context, None]


def type_named(info: GraphInfo, name: str) -> Any:
    """The class of the object type called `name` in the schema being executed."""
    definition = info.schema.get_type_by_name(name)
    origin = getattr(definition, "origin", None)
    if origin is None:
        raise LookupError(f"the schema has no object type {name}")
    return origin
