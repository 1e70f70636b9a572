"""The executor: graphql-core's, with the generic steps skipped where a page's data is at hand.

graphql-core runs every field the same way: a Path, a ResolveInfo, Strawberry's resolver
(for a field without one, a wrapper around getattr), then value completion through
several generic steps, again for every object of a list. For a page of 100 spaces that
machinery was most of a read's CPU (issue 12). This executor plans each selection set
once per operation and then, per field:

- a plain field (an attribute: no resolver, arguments or field extensions) of scalar or
  enum type is read and coerced in place;
- a plain field holding objects (a connection's `nodes`, an edge's `node`) is read, and
  its objects are completed directly;
- a field whose answer was read ahead for its object (`prepared`, by field and
  arguments: see schema.engine.lookahead and prepare_spaces) is completed from that answer,
  without calling its resolver, once its view policies (`Needs`, its only extensions
  allowed here besides the text rule on arguments that hold no text) pass for the
  operation's caller; a field with other extensions, or one the caller may not view,
  goes graphql-core's way, whose extensions refuse it;
- anything else goes graphql-core's way, and so does any value that is missing, null
  where the schema forbids it, not coercible or of an unexpected type: errors, their
  paths and the null rules stay graphql-core's own (tests/test_executor.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Hashable
from typing import Any
from weakref import WeakKeyDictionary

from graphql import (
    FieldNode,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    Undefined,
)
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.execution.executor import to_nodes
from graphql.execution.values import get_argument_values
from graphql.pyutils import AwaitableOrValue, Path
from graphql.pyutils.gather_with_cancel import gather_with_cancel
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from schema.engine.field_plans import (
    NO_INFO,
    PREPARED,
    FieldKind,
    FieldPlan,
    field_kind,
    prepared_key,
)
from schema.engine.policies import Needs

_MISSING: Any = object()  # no value at hand: graphql-core's path it is


_COMPLETED = (dict, list, type(None))  # what a completed field is when it is not awaitable


# Per schema: each (type, field)'s kind, worked out on first use.
_kinds: WeakKeyDictionary[GraphQLSchema, dict[tuple[str, str], FieldKind | None]] = (
    WeakKeyDictionary()
)


class Executor(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's executor with planned selection sets (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # By the grouped field set's id, with the set itself: held, its id is not reused.
        self._plans: dict[int, tuple[GroupedFieldSet, list[FieldPlan]]] = {}
        # A field node's prepared-answer key: its arguments are fixed for the operation.
        self._keys: dict[int, tuple[FieldNode, Hashable | None]] = {}
        # Each view policy's verdict: the caller is fixed for the operation.
        self._permitted: dict[str, bool] = {}

    def build_per_event_executor(self, payload: Any) -> Executor:
        """graphql-core's per-event copy is shallow, so it shares the memos of the
        subscription's executor, which lives as long as the subscription: memos keyed by
        the id of field lists made anew for each event kept every event's plans alive
        (issue 19; bench/subscription_memo.py shows it in plain graphql-core 3.3.2). Each
        event's copy gets memos of its own, freed with it."""
        executor = super().build_per_event_executor(payload)
        assert isinstance(executor, Executor)
        executor._relevant_sub_fields = {}
        executor._stream_usages = type(self._stream_usages)()
        executor._plans = {}
        return executor

    def _plan(
        self, parent_type: GraphQLObjectType, grouped_field_set: GroupedFieldSet
    ) -> list[FieldPlan]:
        cached = self._plans.get(id(grouped_field_set))
        if cached is not None and cached[0] is grouped_field_set:
            return cached[1]
        kinds = _kinds.setdefault(self.schema, {})
        plan = []
        for response_name, details in grouped_field_set.items():
            name = details[0].node.name.value
            field = parent_type.fields.get(name)
            if (parent_type.name, name) not in kinds:
                kinds[parent_type.name, name] = (
                    None if field is None else field_kind(parent_type, field)
                )
            plan.append(FieldPlan(response_name, details, field, kinds[parent_type.name, name]))
        self._plans[id(grouped_field_set)] = (grouped_field_set, plan)
        return plan

    def _prepared_key(self, field: GraphQLField, details: FieldDetailsList) -> Hashable | None:
        node = details[0].node
        cached = self._keys.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        arguments = get_argument_values(
            field,
            node,
            self.variable_values,
            details[0].fragment_variable_values,
            self.hide_suggestions,
        )
        key = prepared_key(node.name.value, arguments)
        self._keys[id(node)] = (node, key)
        return key

    def _prepared(self, plan: FieldPlan, source: Any) -> Any:
        """The field's answer read ahead for this object, else _MISSING."""
        if plan.kind is None or not plan.kind.preparable or plan.field is None:
            return _MISSING
        answers = getattr(source, PREPARED, None)
        if not answers:
            return _MISSING
        for policy in plan.kind.needs:
            if not self._permits(policy):
                return _MISSING  # the field's own extension refuses it, as graphql-core's would
        key = self._prepared_key(plan.field, plan.details)
        return _MISSING if key is None else answers.get(key, _MISSING)

    def _permits(self, policy: Needs) -> bool:
        permitted = self._permitted.get(policy.policy)
        if permitted is None:
            permitted = self._permitted[policy.policy] = policy.permits(self.context_value)
        return permitted

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        results: dict[str, Any] = {}
        pending: list[str] = []
        is_awaitable = self.is_awaitable
        try:
            for plan in self._plan(parent_type, grouped_field_set):
                name = plan.response_name
                kind = plan.kind
                if kind is not None and kind.attribute is not None:
                    try:
                        value = getattr(source_value, kind.attribute, _MISSING)
                    except Exception:  # graphql-core's path reads it again and reports it
                        value = _MISSING  # at the field, not the object
                else:
                    value = self._prepared(plan, source_value)
                coerce = None if kind is None else kind.coerce
                if coerce is not None and value is not _MISSING:
                    if value is None:
                        if kind.nullable:  # type: ignore[union-attr]
                            results[name] = None
                            continue
                    else:
                        try:
                            coerced = coerce(value)
                        except Exception:  # graphql-core's path reports it
                            coerced = None
                        if coerced is not None and coerced is not Undefined:
                            results[name] = coerced
                            continue
                    value = _MISSING
                field_path = Path(path, name, parent_type.name)
                if value is _MISSING:
                    result = self.execute_field(
                        parent_type, source_value, plan.details, field_path, position_context
                    )
                else:
                    result = self._complete_field(
                        parent_type, plan, field_path, value, position_context
                    )
                if result is not Undefined:
                    results[name] = result
                    if type(result) not in _COMPLETED and is_awaitable(result):
                        pending.append(name)
        except Exception:
            if pending:  # settle the other fields' awaitables: they may fail too
                self.settle_in_background([results[name] for name in pending])
            raise
        if not pending:
            return results
        return self._gather(results, pending)

    def _complete_field(
        self,
        parent_type: GraphQLObjectType,
        plan: FieldPlan,
        path: Path,
        value: Any,
        position_context: Any,
    ) -> AwaitableOrValue[Any]:
        """What execute_field does once a resolver has returned `value`."""
        assert plan.field is not None
        return_type = plan.field.type
        try:
            completed = _MISSING
            if position_context is None and value is not None:
                completed = self._complete_objects(return_type, plan.details, path, value)
            if completed is _MISSING:
                info = self.build_resolve_info(
                    plan.field, to_nodes(plan.details), parent_type, path
                )
                completed = self.complete_value(
                    return_type, plan.details, info, path, value, position_context
                )
        except Exception as raw_error:
            self.handle_field_error(raw_error, return_type, plan.details, path)
            return None
        if self.is_awaitable(completed):
            return self._await_completed(completed, return_type, plan.details, path)
        return completed

    def _complete_objects(
        self,
        return_type: GraphQLOutputType,
        details: FieldDetailsList,
        path: Path,
        value: Any,
    ) -> Any:
        """An object, or a list of objects, completed by running its selection set on each
        directly; _MISSING for any other type or value (nulls, wrong types, @defer). No
        ResolveInfo is built: Strawberry's type checks (is_type_of) do not read it, and the
        schema defines no others (schema.build asserts it)."""
        named = return_type.of_type if isinstance(return_type, GraphQLNonNull) else return_type
        if isinstance(named, GraphQLObjectType):
            object_type, items, item_type = named, [value], named
        elif isinstance(named, GraphQLList) and isinstance(value, list):
            item_type = named.of_type
            inner = item_type.of_type if isinstance(item_type, GraphQLNonNull) else item_type
            if not isinstance(inner, GraphQLObjectType) or details[0].node.directives:
                return _MISSING  # lists of lists, of leaves, of interfaces; @stream
            object_type, items = inner, value
        else:
            return _MISSING
        is_type_of = object_type.is_type_of
        for item in items:
            if item is None or (is_type_of is not None and is_type_of(item, NO_INFO) is not True):
                return _MISSING
        collected = self.collect_subfields(object_type, details)
        if collected.new_defer_usages:
            return _MISSING
        fields = collected.grouped_field_set
        if items is not value:  # one object
            return self.execute_fields(object_type, value, path, fields, None)
        completed: list[Any] = []
        pending: list[int] = []
        for index, item in enumerate(items):
            item_path = path.add_key(index, None)
            try:
                result = self.execute_fields(object_type, item, item_path, fields, None)
            except Exception as raw_error:
                self.handle_field_error(raw_error, item_type, details, item_path)
                result = None
            if type(result) is not dict and self.is_awaitable(result):
                pending.append(index)
                result = self._await_completed(result, item_type, details, item_path)
            completed.append(result)
        if not pending:
            return completed
        return self._gather_items(completed, pending)

    async def _await_completed(
        self,
        completed: Awaitable[Any],
        return_type: GraphQLOutputType,
        details: FieldDetailsList,
        path: Path,
    ) -> Any:
        try:
            return await completed
        except Exception as raw_error:
            self.handle_field_error(raw_error, return_type, details, path)
            return None

    @staticmethod
    async def _gather(results: dict[str, Any], pending: list[str]) -> dict[str, Any]:
        if len(pending) == 1:
            results[pending[0]] = await results[pending[0]]
        else:
            values = await gather_with_cancel(*(results[name] for name in pending))
            results.update(zip(pending, values, strict=True))
        return results

    @staticmethod
    async def _gather_items(completed: list[Any], pending: list[int]) -> list[Any]:
        values = await gather_with_cancel(*(completed[index] for index in pending))
        for index, value in zip(pending, values, strict=True):
            completed[index] = value
        return completed
