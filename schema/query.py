"""The Query root."""

from __future__ import annotations

from typing import Annotated, Any

import strawberry

from core.roles import RoleView
from db.audit import AuditWhere
from db.spaces import SpaceWhere
from resolvers import access, audit, cloudspaces, reads
from schema.arguments import After, First, ObjectId
from schema.audit import AuditEvent, AuditFilter
from schema.enums import CredentialKind, Role
from schema.execution import prepared_key
from schema.inputs import SpaceFilter, SpaceOrder
from schema.lookahead import selected
from schema.types import (
    STATUS_FIELDS,
    ApiToken,
    CloudAccount,
    CloudSpace,
    Connection,
    Environment,
    GraphInfo,
    Node,
    Org,
    RoleDefinition,
    Space,
    SpaceCounts,
    SpaceStatusEvent,
    Viewer,
    prepare_spaces,
)


def space_where(filter: SpaceFilter | None) -> SpaceWhere:
    if filter is None:
        return SpaceWhere()
    return SpaceWhere(
        statuses=None if filter.status is None else [s.name for s in filter.status],
        provider=None if filter.provider is None else filter.provider.name,
        providers=None if filter.providers is None else [p.name for p in filter.providers],
        cloud_account_ids=filter.cloud_account_ids,
        held=filter.held,
        search=filter.search,
        scalable=filter.scalable,
        include_deregistered=bool(filter.include_deregistered),
    )


def space_links_wanted(info: GraphInfo) -> tuple[reads.SpaceLinksWanted, bool]:
    """What a connection of spaces selects on its spaces, to load for the whole page, and
    whether it asks for their status."""
    wanted = selected(info._raw_info, [("nodes",), ("edges", "node")], "Space")
    links = reads.SpaceLinksWanted(
        cloud_account="cloudAccount" in wanted,
        environments="environments" in wanted,
        events=tuple(
            (prepared_key("statusEvents", args), args.get("first"))
            for args in wanted.get("statusEvents", [])
        ),
    )
    return links, bool(STATUS_FIELDS.intersection(wanted))


NODE_TYPES: dict[str, type] = {
    "Org": Org,
    "CloudAccount": CloudAccount,
    "Space": Space,
    "Environment": Environment,
    "CloudSpace": CloudSpace,
    "SpaceStatusEvent": SpaceStatusEvent,
    "ApiToken": ApiToken,
    "RoleDefinition": RoleDefinition,
    "AuditEvent": AuditEvent,
}


def as_node(kind: str, row: Any) -> Node:
    return NODE_TYPES[kind].from_row(row)  # type: ignore[attr-defined, no-any-return]


@strawberry.type(
    description="Reads. Every list is a connection; every object is the caller's org's."
)
class Query:
    @strawberry.field(
        description="Any object by id; null when it is unknown or belongs to another org."
    )
    async def node(self, info: GraphInfo, id: ObjectId) -> Node | None:
        found = await reads.node(info.context, id)
        return None if found is None else as_node(*found)

    @strawberry.field(
        description="In the order asked; null for ids that are unknown or not visible. "
        "At most 100 ids."
    )
    async def nodes(
        self,
        info: GraphInfo,
        ids: Annotated[
            list[strawberry.ID],
            strawberry.argument(description="Up to 100 ids of any kind; more is BAD_USER_INPUT."),
        ],
    ) -> list[Node | None]:
        found = await reads.nodes(info.context, ids)
        return [None if hit is None else as_node(*hit) for hit in found]

    @strawberry.field(description="Who is calling: org, role and policies.")
    def viewer(self, info: GraphInfo) -> Viewer:
        caller = info.context.caller
        custom = caller.custom_role
        return Viewer(
            org=Org(id=strawberry.ID(caller.org_id), name=caller.org_name),
            role=Role(caller.role.value),
            custom_role=None
            if custom is None
            else RoleDefinition.from_domain(
                RoleView(custom.id, custom.name, False, custom.policies)
            ),
            subject=caller.subject,
            credential_kind=CredentialKind(caller.credential_kind.value),
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
            else AuditWhere(filter.actor, filter.action, filter.target_id, filter.since)
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

    @strawberry.field(description="The org's cloud accounts, oldest first.")
    async def cloud_accounts(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[CloudAccount]:
        return Connection.of(
            await reads.cloud_accounts_page(info.context, first, after), CloudAccount
        )

    @strawberry.field(description="One cloud account; null when unknown or another org's.")
    async def cloud_account(self, info: GraphInfo, id: ObjectId) -> CloudAccount | None:
        row = await reads.one(info.context, "CloudAccount", id)
        return None if row is None else CloudAccount.from_row(row)

    @strawberry.field(
        description="The org's spaces (registered ones unless the filter says otherwise), "
        "in id order (oldest first) unless orderBy says otherwise. Page forward with "
        "first/after or back with last/before."
    )
    async def spaces(
        self,
        info: GraphInfo,
        first: First = None,
        after: After = None,
        last: Annotated[
            int | None,
            strawberry.argument(
                description="How many items to return from the end (or just before `before`): "
                "1 to 100 (default 50 when `before` is given)."
            ),
        ] = None,
        before: Annotated[
            str | None,
            strawberry.argument(
                description="Return the items before this cursor (pageInfo.startCursor)."
            ),
        ] = None,
        filter: Annotated[
            SpaceFilter | None,
            strawberry.argument(description="Which spaces; null: every registered space."),
        ] = None,
        order_by: Annotated[
            SpaceOrder | None,
            strawberry.argument(
                description="Sort order, ties broken by id; cursors are valid only under the "
                "order they came from. Null: id order."
            ),
        ] = None,
    ) -> Connection[Space]:
        order = None if order_by is None else order_by.label
        wanted, status = space_links_wanted(info)
        page = await reads.spaces_page(
            info.context,
            space_where(filter),
            order,
            first,
            after,
            last,
            before,
            with_accounts=wanted.cloud_account,
        )
        connection = Connection.of(page, Space)
        links = await reads.space_links(info.context, page.items, wanted)
        prepare_spaces(info.context, connection.nodes, links, status)
        return connection

    @strawberry.field(description="How many spaces match the filter, in one request.")
    async def space_counts(
        self,
        info: GraphInfo,
        filter: Annotated[
            SpaceFilter | None,
            strawberry.argument(description="Which spaces; null: every registered space."),
        ] = None,
    ) -> SpaceCounts:
        return SpaceCounts(**await reads.space_counts(info.context, space_where(filter)))

    @strawberry.field(
        description="The org's status events, oldest first: a client that reconnects catches up "
        "from the last event id it saw (resubscribe first, then read from that id)."
    )
    async def status_events(
        self,
        info: GraphInfo,
        first: First = None,
        after: Annotated[
            str | None,
            strawberry.argument(
                description="Return the events after this cursor; an event's id is a cursor too."
            ),
        ] = None,
        space_ids: Annotated[
            list[strawberry.ID] | None,
            strawberry.argument(
                description="Only these spaces' events (at most 100); null: every space's."
            ),
        ] = None,
    ) -> Connection[SpaceStatusEvent]:
        page = await reads.status_events_page(info.context, first, after, space_ids)
        return Connection.of(page, SpaceStatusEvent)

    @strawberry.field(
        description="One space, deregistered ones included; null when unknown or another org's."
    )
    async def space(self, info: GraphInfo, id: ObjectId) -> Space | None:
        row = await reads.one(info.context, "Space", id)
        return None if row is None else Space.from_row(row)

    @strawberry.field(description="The org's environments, oldest first.")
    async def environments(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[Environment]:
        return Connection.of(await reads.environments_page(info.context, first, after), Environment)

    @strawberry.field(description="The org's CloudSpaces, oldest first.")
    async def cloud_spaces(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[CloudSpace]:
        return Connection.of(await cloudspaces.page(info.context, first, after), CloudSpace)

    @strawberry.field(description="One of the org's CloudSpaces; null for unknown or foreign ids.")
    async def cloud_space(self, info: GraphInfo, id: ObjectId) -> CloudSpace | None:
        row = await reads.one(info.context, "CloudSpace", id)
        return None if row is None else CloudSpace.from_row(row)
