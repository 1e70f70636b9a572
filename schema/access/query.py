"""The access part of the Query root: the caller, roles, API tokens, the audit log."""

from __future__ import annotations

from typing import Annotated

import strawberry

from core.access.roles import RoleView
from db.records import AuditWhere
from resolvers.access import roles_tokens as access
from resolvers.common import audit
from schema.access.audit import AuditEvent, AuditFilter
from schema.access.types import ApiToken, Org, RoleDefinition, Viewer
from schema.common.info import GraphInfo
from schema.common.relay import Connection
from schema.engine.arguments import After, First


@strawberry.type
class AccessQuery:
    @strawberry.field(description="Who is calling: org, role and policies.")
    def viewer(self, info: GraphInfo) -> Viewer:
        caller = info.context.caller
        custom = caller.custom_role
        return Viewer(
            org=Org(id=strawberry.ID(caller.org_id), name=caller.org_name),
            role=caller.role,  # core's Role is the contract's (schema.common.enums)
            custom_role=None
            if custom is None
            else RoleDefinition.from_domain(
                RoleView(custom.id, custom.name, False, custom.policies)
            ),
            subject=caller.subject,
            credential_kind=caller.credential_kind,
            permissions=list(caller.permissions),
        )

    @strawberry.field(
        description="The system roles, then the org's custom roles, oldest first. "
        "Needs role:manage."
    )
    async def roles(self, info: GraphInfo) -> list[RoleDefinition]:
        return [RoleDefinition.from_domain(r) for r in await access.list_roles(info.context)]

    @strawberry.field(
        description="The org's audit log, oldest first: every mutation call, allowed or "
        "refused, kept SPACEDOCK_AUDIT_RETENTION_DAYS days. Needs audit:view."
    )
    async def audit_events(
        self,
        info: GraphInfo,
        first: First = None,
        after: After = None,
        filter: Annotated[
            AuditFilter | None,
            strawberry.argument(description="Which events; null: all of them."),
        ] = None,
    ) -> Connection[AuditEvent]:
        where = (
            AuditWhere()
            if filter is None
            else AuditWhere(
                filter.actor,
                filter.action,
                filter.target_id,
                filter.since,
                filter.actor_token_id,
                None if filter.via is None else filter.via.value,
            )
        )
        return Connection.of(await audit.events_page(info.context, where, first, after), AuditEvent)

    @strawberry.field(
        description="The org's API tokens, oldest first; revoked ones only with "
        "includeRevoked. Needs token:manage."
    )
    async def api_tokens(
        self,
        info: GraphInfo,
        first: First = None,
        after: After = None,
        include_revoked: Annotated[
            bool | None,
            strawberry.argument(description="true: revoked tokens too (default false)."),
        ] = None,
    ) -> Connection[ApiToken]:
        page = await access.tokens_page(info.context, first, after, bool(include_revoked))
        return Connection.of(page, ApiToken)
