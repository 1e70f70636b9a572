"""Query limits that cost time linear in the document, checked before any other rule.

strawberry's QueryDepthLimiter and MaxAliasesLimiter expand every fragment spread
anew, so a chain of fragments that each spread the next one twice took time doubling
per level (K=21: 8.6 s with the event loop blocked). Here each fragment's depth,
aliases and field count are computed once and reused wherever it is spread, so the
work is one pass over the document whatever the fragments expand to. The token
limit runs earlier still, in the parser (`MaxTokensLimiter`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    Visitor,
    visit,
)
from strawberry.extensions import SchemaExtension

MAX_DEPTH = 10
MAX_ALIASES = 15
MAX_TOKENS = 2000
# Fields as executed, fragments expanded: a generous read of 15 aliased lists stays
# far below it, while a fragment fan-out exceeds it within a few levels.
MAX_FIELDS = 5000
# Fields and fragment spreads nested in one another; past it nothing is walked further,
# so no document can make the walk recurse deeply.
MAX_NESTING = 64
# graphql-core's OverlappingFieldsCanBeMerged compares fields of one response name
# pairwise, recursively: 450 copies of `org { id }` (1,350 tokens) held the event loop
# for seconds. Its work is estimated over the merged selection tree, a pair of fields with
# selections of their own costing about 40 pairs of leaves (measured: 15 µs against 0.4 µs);
# 50,000 leaf pairs take about 20 ms on a busy 2-core machine.
SUBSELECTION_PAIR_COST = 40
MAX_OVERLAPS = 50_000
# An integer literal has at most as many digits as a 64-bit integer (GraphQL's Int has 32
# bits; a JSON scalar's numbers need no more). graphql-core converts a literal with int(),
# which refuses more than 4,300 digits with a ValueError (INTERNAL_SERVER_ERROR before).
MAX_INT_DIGITS = 19
LONG_DIGITS = re.compile(rf"[0-9]{{{MAX_INT_DIGITS + 1},}}")


@dataclass(frozen=True)
class Cost:
    """What a selection set expands to. Depth counts from 0 at the root field, as
    graphql-depth-limit and strawberry's QueryDepthLimiter count it."""

    depth: int = -1  # -1: no field at all
    aliases: int = 0
    fields: int = 0

    def beside(self, other: Cost) -> Cost:
        """Two selections of one set: the deeper one counts, the rest adds up."""
        return Cost(
            max(self.depth, other.depth),
            _capped(self.aliases + other.aliases),
            _capped(self.fields + other.fields),
        )


def _capped(count: int) -> int:
    # Past the limit the exact figure no longer matters; capping keeps the sums small.
    return min(count, MAX_FIELDS + 1)


class Refused(Exception):
    """A shape no operation may have, whatever it selects; the message says which."""


class DocumentCost:
    """The cost of each operation of one document; fragments are costed once."""

    def __init__(self, document: DocumentNode) -> None:
        self.fragments = {
            definition.name.value: definition
            for definition in document.definitions
            if isinstance(definition, FragmentDefinitionNode)
        }
        self.costed: dict[str, Cost] = {}
        self.in_progress: set[str] = set()

    def of_operation(self, operation: OperationDefinitionNode) -> Cost:
        self.in_progress.clear()  # left over when the previous operation was refused midway
        return self.of_selections(operation.selection_set, 0)

    def of_selections(self, selections: SelectionSetNode | None, nesting: int) -> Cost:
        if selections is None:
            return Cost()
        if nesting > MAX_NESTING:
            raise Refused(f"nests fields and fragments deeper than {MAX_NESTING} levels")
        total = Cost()
        for selection in selections.selections:
            if isinstance(selection, FieldNode):
                inner = self.of_selections(selection.selection_set, nesting + 1)
                # Introspection (`__schema`, `__type`) is as deep as the schema's type
                # wrappers, not the data: like graphql-depth-limit, it counts no depth,
                # while its fields and aliases still count.
                introspection = selection.name.value.startswith("__")
                total = total.beside(
                    Cost(
                        0 if introspection else inner.depth + 1,
                        inner.aliases + (selection.alias is not None),
                        inner.fields + 1,
                    )
                )
            elif isinstance(selection, InlineFragmentNode):
                total = total.beside(self.of_selections(selection.selection_set, nesting + 1))
            elif isinstance(selection, FragmentSpreadNode):
                total = total.beside(self.of_fragment(selection.name.value, nesting + 1))
        return total

    def overlaps(self, operation: OperationDefinitionNode) -> int:
        """The cost of comparing same-named fields in the operation's merged selection tree,
        counted up to just past MAX_OVERLAPS. Only called once the expanded field count is
        within MAX_FIELDS, which bounds this walk too."""
        found = 0
        pending: list[list[SelectionSetNode]] = [[operation.selection_set]]
        while pending and found <= MAX_OVERLAPS:
            by_name: dict[str, list[SelectionSetNode | None]] = {}
            for selections in pending.pop():
                for selected in self.fields_in(selections):
                    name = (selected.alias or selected.name).value
                    by_name.setdefault(name, []).append(selected.selection_set)
            for merged in by_name.values():
                inner = [selections for selections in merged if selections is not None]
                pairs = len(merged) * (len(merged) - 1) // 2
                found += pairs * (SUBSELECTION_PAIR_COST if inner else 1)
                if inner:
                    pending.append(inner)
        return found

    def fields_in(self, selections: SelectionSetNode) -> Iterator[FieldNode]:
        """The fields of a set, inline fragments and fragment spreads expanded."""
        stack = [selections]
        while stack:
            for selection in stack.pop().selections:
                if isinstance(selection, FieldNode):
                    yield selection
                elif isinstance(selection, InlineFragmentNode):
                    stack.append(selection.selection_set)
                elif isinstance(selection, FragmentSpreadNode):
                    definition = self.fragments.get(selection.name.value)
                    if definition is not None:
                        stack.append(definition.selection_set)

    def of_fragment(self, name: str, nesting: int) -> Cost:
        if name in self.costed:
            return self.costed[name]
        definition = self.fragments.get(name)
        if definition is None:
            return Cost()  # graphql-core's own rules report the unknown fragment
        if name in self.in_progress:
            raise Refused(f"spreads fragment {name!r} inside itself")
        self.in_progress.add(name)
        cost = self.of_selections(definition.selection_set, nesting)
        self.in_progress.discard(name)
        self.costed[name] = cost
        return cost


class LongIntegers(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[IntValueNode] = []

    def enter_int_value(self, node: IntValueNode, *_: object) -> None:
        if len(node.value.lstrip("-")) > MAX_INT_DIGITS:
            self.found.append(node)


def literal_errors(document: DocumentNode) -> list[GraphQLError]:
    """Integer literals too long to convert, found before anything converts them. Only a
    text with such a run of digits is walked (most have none)."""
    if document.loc is None or not LONG_DIGITS.search(document.loc.source.body):
        return []
    visitor = LongIntegers()
    visit(document, visitor)
    return [
        GraphQLError(
            f"An integer literal has at most {MAX_INT_DIGITS} digits; this one has "
            f"{len(node.value.lstrip('-'))}.",
            node,
        )
        for node in visitor.found[:1]
    ]


def limit_errors(document: DocumentNode) -> list[GraphQLError]:
    """Every limit the document's operations exceed; empty when it may be validated further."""
    cost = DocumentCost(document)
    errors: list[GraphQLError] = literal_errors(document)
    for definition in document.definitions:
        if not isinstance(definition, OperationDefinitionNode):
            continue
        name = definition.name.value if definition.name else "anonymous"
        try:
            found = cost.of_operation(definition)
        except Refused as refused:
            errors.append(GraphQLError(f"'{name}' {refused}.", definition))
            continue
        if found.depth > MAX_DEPTH:
            errors.append(
                GraphQLError(f"'{name}' exceeds maximum operation depth of {MAX_DEPTH}", definition)
            )
        if found.aliases > MAX_ALIASES:
            errors.append(
                GraphQLError(
                    f"{found.aliases if found.aliases <= MAX_FIELDS else 'More'} aliases "
                    f"found in '{name}'; at most {MAX_ALIASES} are allowed.",
                    definition,
                )
            )
        if found.fields > MAX_FIELDS:
            errors.append(
                GraphQLError(
                    f"'{name}' selects more than {MAX_FIELDS} fields once its fragments are "
                    "expanded.",
                    definition,
                )
            )
        elif cost.overlaps(definition) > MAX_OVERLAPS:
            errors.append(
                GraphQLError(
                    f"'{name}' selects the same fields too many times over; select each "
                    "field once.",
                    definition,
                )
            )
    return errors


def operation_choice_errors(
    document: DocumentNode, operation_name: str | None
) -> list[GraphQLError]:
    """The GraphQL spec's request error for several operations and no operationName."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if len(operations) > 1 and operation_name is None:
        message = "The document has several operations: send operationName to pick one."
        return [GraphQLError(message, extensions={"code": "BAD_REQUEST"})]
    return []


class DocumentLimits(SchemaExtension):
    """Refuses a document over a limit, or one whose operation cannot be chosen, before
    graphql-core's validation rules run."""

    def on_validate(self) -> Iterator[None]:
        execution = self.execution_context
        if execution.graphql_document is not None and execution.pre_execution_errors is None:
            document = execution.graphql_document
            # `operation_name` falls back to the first operation's; the spec wants an error.
            asked = execution._provided_operation_name
            errors = operation_choice_errors(document, asked) or limit_errors(document)
            if errors:
                # Set before validation runs, this skips it (strawberry's _run_validation).
                execution.pre_execution_errors = errors
        yield
