"""The audit log in the schema: which input fields are secret, the extension that audits
every Mutation field, and the AuditEvent type and filter.

One rule redacts: an input field declared with `metadata=SECRET` is recorded as
"[redacted]", however deep it sits; and credentials written into any URL
(`https://user:password@host`, refused as input but recorded as sent) lose their
userinfo. Ids in the input (fields of type ID) become the
event's target ids, with the id of whatever the call created.
"""

from __future__ import annotations

import enum
import inspect
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import strawberry
from graphql import (
    GraphQLID,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLResolveInfo,
)
from graphql.execution.values import get_argument_values
from strawberry.extensions import FieldExtension
from strawberry.scalars import JSON
from strawberry.types import Info
from strawberry.types.base import get_object_definition

from core.access.audit import REDACTED, AuditCall, Via, without_userinfo
from db import access_tables
from resolvers.common import audit
from resolvers.common.context import Context
from schema.common.enums import CredentialKind, contract_enum
from schema.common.relay import Node
from schema.engine.lookahead import variables_of


def _is_secret(field: Any) -> bool:
    definition = (field.extensions or {}).get("strawberry-definition")
    return bool(getattr(definition, "metadata", {}).get("secret"))


def redacted(value: Any, kind: GraphQLInputType, ids: list[str]) -> Any:
    """The input as JSON with secrets replaced; ID values are collected into `ids`."""
    if isinstance(kind, GraphQLNonNull):
        kind = kind.of_type
    if value is None:
        return None
    if isinstance(kind, GraphQLList):
        items = value if isinstance(value, list) else [value]
        return [redacted(item, kind.of_type, ids) for item in items]
    if isinstance(kind, GraphQLInputObjectType):
        fields = kind.fields
        return {
            name: REDACTED if _is_secret(fields[name]) else redacted(item, fields[name].type, ids)
            for name, item in _items(value, kind)
        }
    if kind is GraphQLID and isinstance(value, str):
        ids.append(value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        return without_userinfo(value)
    return value


def _items(value: Any, kind: GraphQLInputObjectType) -> list[tuple[str, Any]]:
    """An input object's (GraphQL name, value) pairs, from a dict or a strawberry input."""
    if isinstance(value, dict):
        return [(name, item) for name, item in value.items() if name in kind.fields]
    definition = kind.extensions.get("strawberry-definition")
    pairs = []
    for field in getattr(definition, "fields", []):
        item = getattr(value, field.python_name, None)
        if item is not strawberry.UNSET:
            pairs.append((field.graphql_name or field.python_name, item))
    return [(name, item) for name, item in pairs if name in kind.fields]


def call_of(info: GraphQLResolveInfo[Context], arguments: dict[str, Any]) -> AuditCall:
    definition = info.parent_type.fields[info.field_name]
    ids: list[str] = []
    recorded = {
        name: redacted(value, definition.args[name].type, ids)
        for name, value in arguments.items()
        if name in definition.args
    }
    values = list(recorded.values())
    return AuditCall(
        action=info.field_name,
        input=values[0] if len(values) == 1 else recorded,
        target_ids=list(dict.fromkeys(ids)),
        request_id=info.context.request_id,
    )


def codes_of(payload: object) -> list[str]:
    errors = getattr(payload, "user_errors", None) or []
    return [error.code.value for error in errors]


class AuditedMutation(FieldExtension):
    """Audits one Mutation field. `audit_every_mutation` puts it on each of them, outermost,
    so refusals by the other extensions (InputText) are audited too. A field extension
    rather than a schema-wide resolve hook: such a hook would run for every field of every
    query (issue 12)."""

    def resolve(self, next_: Callable[..., Any], source: Any, info: Info, **kwargs: Any) -> Any:
        return self._audited(next_, source, info, kwargs)

    async def resolve_async(
        self, next_: Callable[..., Any], source: Any, info: Info, **kwargs: Any
    ) -> Any:
        return await self._audited(next_, source, info, kwargs)

    async def _audited(
        self, next_: Callable[..., Any], source: Any, info: Info, kwargs: dict[str, Any]
    ) -> Any:
        raw: GraphQLResolveInfo[Context] = info._raw_info
        context: Context = raw.context
        # The arguments as GraphQL names them, as the call was sent (kwargs are converted).
        variables = variables_of(raw)
        field = raw.parent_type.fields[raw.field_name]
        sent = get_argument_values(field, raw.field_nodes[0], variables)
        call = call_of(raw, sent)
        with audit.auditing(call):
            try:
                payload = next_(source, info, **kwargs)
                if inspect.isawaitable(payload):
                    payload = await payload
            except Exception:
                await audit.finish(context, call, ["ERROR"])
                raise
        await audit.finish(context, call, codes_of(payload))
        return payload


def audit_every_mutation(mutation: type) -> None:
    """Puts AuditedMutation on every field of the Mutation root, whoever wrote it; call
    after the other extensions are in place (the last one is the outermost)."""
    for field in get_object_definition(mutation, strict=True).fields:
        field.extensions.append(AuditedMutation())


contract_enum(
    Via,
    "Where an audited call came from.",
    {
        "API": "The GraphQL API, with an API token or an OIDC JWT.",
        "CLI": "An operator's `spacedock` command on the server's database; the actor is "
        "the OS user who ran it.",
    },
    name="AuditVia",
)


@strawberry.type(
    description="One mutation call, allowed or refused, or an operator command that does "
    "what a mutation does. Inputs are recorded without secrets."
)
class AuditEvent(Node):
    row: strawberry.Private[access_tables.AuditEvent]
    id: strawberry.ID = strawberry.field(description="The event's id; ids grow with time.")
    at: datetime = strawberry.field(description="When the call was made.")
    actor: str = strawberry.field(
        description="The API token's name, the OIDC subject, or the OS user of an operator "
        "command, as an auditor can read it: "
        "invisible and direction-changing characters (and backslashes) written as escapes "
        "(\\x0a, \\u202e, \\\\), more than 256 characters cut and followed by a digest of "
        "the whole. Names need not be unique: actorTokenId says which token it was."
    )
    actor_kind: CredentialKind = strawberry.field(
        description="How the actor authenticated (OS_USER: an operator command)."
    )
    via: Via = strawberry.field(
        description="API, or CLI for an operator's `spacedock` command (token create, token "
        "revoke, space import-kubeconfig, secrets reseal), whose action is the mutation that "
        "does the same (createApiToken, revokeApiToken, registerSpace; resealSecrets)."
    )
    actor_token_id: strawberry.ID | None = strawberry.field(
        description="The API token that made the call (unique, unlike its name); null for "
        "OIDC callers, whose subject is the actor, and for operator commands."
    )
    action: str = strawberry.field(description="The mutation's name, e.g. registerSpace.")
    target_ids: list[strawberry.ID] = strawberry.field(description="Ids the call named or created.")
    outcome: str = strawberry.field(
        description='OK, or the userErrors\' codes (e.g. "FORBIDDEN"; several joined by commas).'
    )
    request_id: str | None = strawberry.field(
        description="The HTTP request's X-Request-Id (a new id when the client sent none), or "
        "the WebSocket connection's; null for calls made outside a request."
    )
    calls: int = strawberry.field(
        description="How many calls the event stands for: 1, or for action "
        "refusedCallsOverLimit, the refused calls of one credential past "
        "SPACEDOCK_AUDIT_REFUSED_PER_MINUTE within a minute (their mutations and outcomes "
        "counted in `input`)."
    )

    @classmethod
    def from_row(cls, row: access_tables.AuditEvent) -> AuditEvent:
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            at=row.at,
            actor=row.actor,
            actor_kind=CredentialKind(row.actor_kind),
            via=Via(row.via),
            action=row.action,
            target_ids=[strawberry.ID(i) for i in json.loads(row.target_ids_json)],
            outcome=row.outcome,
            request_id=row.request_id,
            actor_token_id=None
            if row.actor_token_id is None
            else strawberry.ID(row.actor_token_id),
            calls=row.calls,
        )

    @strawberry.field(
        description='The input, with every secret replaced by "[redacted]"; null without one. '
        "Strings over 1,024 characters keep their first 256, lists and objects their first "
        '100 entries, each saying how much was left out ("…[N characters]"); an input still '
        "over 16 KiB is replaced by its size."
    )
    def input(self) -> JSON | None:
        recorded: JSON | None = audit.input_of(self.row)
        return recorded


@strawberry.input(description="Which audit events; every field given must hold.")
class AuditFilter:
    actor: str | None = strawberry.field(
        default=None,
        description="Only calls by this actor (token name or OIDC subject), as `actor` shows it.",
    )
    actor_token_id: strawberry.ID | None = strawberry.field(
        default=None, description="Only calls made with this API token."
    )
    action: str | None = strawberry.field(
        default=None, description="Only calls of this mutation, e.g. registerSpace."
    )
    target_id: strawberry.ID | None = strawberry.field(
        default=None, description="Only calls that named or created this id."
    )
    since: datetime | None = strawberry.field(
        default=None, description="Only calls at or after this time."
    )
    via: Via | None = strawberry.field(
        default=None, description="Only calls from the API, or only operator commands (CLI)."
    )
