"""Which fields a query selects below the field resolving now, so a list can load its items'
links in one batch before graphql-core reaches them (issue 12): the items then carry those
answers (`prepared`, by field and arguments) and the executor (schema.engine.execution) completes
them without calling their resolvers. Reading ahead only saves work; the fields still
resolve alone for items that were not prepared this way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from graphql import (
    FieldNode,
    FragmentSpreadNode,
    GraphQLIncludeDirective,
    GraphQLObjectType,
    GraphQLResolveInfo,
    GraphQLSkipDirective,
    InlineFragmentNode,
    SelectionSetNode,
)
from graphql.execution.values import VariableValues, get_argument_values, get_directive_values


def variables_of(info: GraphQLResolveInfo[Any]) -> VariableValues:
    """The operation's variables as graphql-core's argument coercion takes them (strawberry
    hands resolvers the plain dict of coerced values)."""
    values: Any = info.variable_values
    if isinstance(values, VariableValues):
        return values
    return VariableValues(sources={}, coerced=values)


def _included(node: Any, variables: VariableValues) -> bool:
    skip = get_directive_values(GraphQLSkipDirective, node, variables)
    if skip is not None and skip.get("if") is True:
        return False
    include = get_directive_values(GraphQLIncludeDirective, node, variables)
    return not (include is not None and include.get("if") is False)


def _fields(
    selections: SelectionSetNode | None, info: GraphQLResolveInfo[Any], variables: VariableValues
) -> Iterator[FieldNode]:
    """The field nodes of a selection set, through fragments, as @skip and @include leave them."""
    for selection in selections.selections if selections is not None else ():
        if not _included(selection, variables):
            continue
        if isinstance(selection, FieldNode):
            yield selection
        elif isinstance(selection, InlineFragmentNode):
            yield from _fields(selection.selection_set, info, variables)
        elif isinstance(selection, FragmentSpreadNode):
            fragment = info.fragments.get(selection.name.value)
            if fragment is not None:
                yield from _fields(fragment.selection_set, info, variables)


def selected(
    info: GraphQLResolveInfo[Any], paths: Sequence[Sequence[str]], type_name: str
) -> dict[str, list[dict[str, Any]]]:
    """For the objects of type `type_name` at each of `paths` below this field (e.g.
    ("nodes",) and ("edges", "node") of a connection): each field selected on them, by
    GraphQL name, with the arguments of every selection of it."""
    variables = variables_of(info)
    object_type = info.schema.get_type(type_name)
    assert isinstance(object_type, GraphQLObjectType)
    found: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        level = list(info.field_nodes)
        for name in path:
            level = [
                field
                for node in level
                for field in _fields(node.selection_set, info, variables)
                if field.name.value == name
            ]
        for node in level:
            for field in _fields(node.selection_set, info, variables):
                definition = object_type.fields.get(field.name.value)
                if definition is not None:
                    arguments = get_argument_values(definition, field, variables)
                    found.setdefault(field.name.value, []).append(arguments)
    return found
