"""Namespaces: listed live on a space's cluster, and created there by a mutation."""

from __future__ import annotations

from core import namespaces
from db.tables import Space
from resolvers.context import Context
from resolvers.mutations import Outcome, run


async def of_space(context: Context, space: Space) -> list[namespaces.Namespace]:
    return await namespaces.list_namespaces(context.services, context.caller, space)


async def create(context: Context, space_id: str, name: str) -> Outcome[namespaces.Namespace]:
    services = context.services
    return await run(
        context,
        lambda unit, viewer: namespaces.create_namespace(unit, services, viewer, space_id, name),
    )
