"""A page of spaces read ahead for what the query selects (issue 12): which links it
selects, and each space's prepared answers (schema.engine.execution completes those
fields from them without calling their resolvers)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from core.common.services import utcnow
from db.records import CloudAccountRow, SpaceWhere
from resolvers.common.context import Context
from resolvers.spaces import reads
from schema.common.enums import (
    SpaceStatus,
    StatusReasonCode,
)
from schema.common.info import GraphInfo
from schema.engine.field_plans import prepared_key
from schema.engine.lookahead import selected
from schema.engine.policies import viewable
from schema.spaces.events import SpaceStatusEvent
from schema.spaces.inputs import SpaceFilter
from schema.spaces.types import Environment, Space


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
    raw = info._raw_info
    wanted = {
        name: arguments
        for name, arguments in selected(raw, [("nodes",), ("edges", "node")], "Space").items()
        if viewable(raw, "Space", name)  # what the caller may not view is not read ahead
    }
    links = reads.SpaceLinksWanted(
        cloud_account="cloudAccount" in wanted,
        environments="environments" in wanted,
        events=tuple(
            (prepared_key("statusEvents", args), args.get("first"))
            for args in wanted.get("statusEvents", [])
        ),
    )
    return links, bool(STATUS_FIELDS.intersection(wanted))


# The Space fields whose answers one health reading gives.
STATUS_FIELDS = frozenset({"status", "statusReason", "statusReasonCode", "reason", "reasonCode"})


def prepare_spaces(
    context: Context,
    spaces: Sequence[Space],
    links: dict[str, reads.SpaceLinks],
    status: bool,
    account_of: Callable[[CloudAccountRow], Any],
) -> None:
    """Each space's answers read ahead for a page (schema.engine.execution answers those fields
    from them without calling their resolvers); with `status`, its health as well.
    `account_of` wraps an account row (CloudAccount.from_row: a domain above this one)."""
    accounts: dict[str, Any] = {}
    health = context.services.health
    stale_before = health.stale_before(utcnow())
    for space in spaces:
        link = links[space.row.id]
        answers: dict[Hashable, Any] = {}
        if link.cloud_account_loaded:
            row = link.cloud_account
            if row is not None and row.id not in accounts:
                accounts[row.id] = account_of(row)
            answers["cloudAccount"] = None if row is None else accounts[row.id]
        if link.environments is not None:
            answers["environments"] = [Environment.from_row(e) for e in link.environments]
        for key, events in link.events.items():
            answers[key] = [SpaceStatusEvent.from_row(event) for event in events]
        if status:
            shown, reason = health.shown_if_stale_before(space.row, stale_before)
            answers["status"] = SpaceStatus[shown]
            words = None if reason is None else reason.words
            code = None if reason is None else StatusReasonCode[reason.code]
            answers["statusReason"] = answers["reason"] = words
            answers["statusReasonCode"] = answers["reasonCode"] = code
        space.prepared = answers
