"""Any object by id (node, nodes and each domain's one-object fields): the view policy of
its kind, then the request's loaders; foreign and unknown ids are both None."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from strawberry.dataloader import DataLoader

from core.common.errors import ApiError
from core.common.ids import event_number, kind_of, probe_event_parts
from resolvers.common.context import Context

VIEW_POLICY = {
    "Org": "space:view",
    "CloudAccount": "cloudaccount:view",
    "Space": "space:view",
    "Environment": "environment:view",
    "CloudSpace": "cloudspace:view",
    "VCluster": "cloudspace:view",
    "SpaceStatusEvent": "space:view",
    "ProbeEvent": "space:view",
    "ApiToken": "token:manage",
    "RoleDefinition": "role:manage",
    "AuditEvent": "audit:view",
    "AdvisorFinding": "advice:view",
    "App": "app:view",
    "AppRevision": "app:view",
}


async def node(context: Context, object_id: str) -> tuple[str, Any] | None:
    """(kind, row) for any id the caller's org owns; foreign and unknown ids are both None."""
    kind = kind_of(object_id)
    if kind not in VIEW_POLICY:
        return None
    context.caller.require_to_read(VIEW_POLICY[kind])
    loaders = context.loaders
    by_kind: dict[str, DataLoader[str, Any]] = {
        "Org": loaders.org,
        "CloudAccount": loaders.cloud_account,
        "Space": loaders.space,
        "Environment": loaders.environment,
        "CloudSpace": loaders.cloud_space,
        "VCluster": loaders.vcluster,
        "ApiToken": loaders.api_token,
        "RoleDefinition": loaders.custom_role,
        "AuditEvent": loaders.audit_event,
        "AdvisorFinding": loaders.advisor_finding,
        "App": loaders.app,
        "AppRevision": loaders.app_revision,
    }
    if kind == "SpaceStatusEvent":
        number = event_number(object_id)
        row = None if number is None else await loaders.status_event.load(number)
    elif kind == "ProbeEvent":
        row = await _probed_space(context, object_id)
    else:
        row = await by_kind[kind].load(object_id)
    if row is None or (kind == "Org" and object_id != context.caller.org_id):
        return None
    return kind, row


async def _probed_space(context: Context, object_id: str) -> Any:
    """The space whose last probe a probe event's id names; None once a newer probe
    replaced it (only a space's last probe result is kept)."""
    parts = probe_event_parts(object_id)
    if parts is None:
        return None
    space_id, at = parts
    row = await context.loaders.space.load(space_id)
    return row if row is not None and row.last_probe_at == at else None


MAX_NODES = 100


async def nodes(context: Context, object_ids: Sequence[str]) -> list[tuple[str, Any] | None]:
    """Each id's (kind, row) in the order asked, None for unknown or foreign ids and for
    kinds the caller may not view; the loaders batch them into one query per kind."""
    if len(object_ids) > MAX_NODES:
        raise ApiError(
            "BAD_USER_INPUT", f"ids may name at most {MAX_NODES} objects, got {len(object_ids)}"
        )
    viewable = [
        object_id
        if (kind := kind_of(object_id)) in VIEW_POLICY and context.caller.can(VIEW_POLICY[kind])
        else None
        for object_id in object_ids
    ]
    return list(
        await asyncio.gather(
            *(node(context, object_id) if object_id else _nothing() for object_id in viewable)
        )
    )


async def _nothing() -> None:
    return None


async def one(context: Context, kind: str, object_id: str) -> Any:
    found = await node(context, object_id)
    return found[1] if found is not None and found[0] == kind else None
