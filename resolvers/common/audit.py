"""Auditing every mutation from one place, and reading the log.

`schema.access.audit.AuditedMutation` opens an AuditCall around each Mutation field. `run`
(resolvers.common.mutations), through which every mutation writes, records the call's event
in the unit of its effect; `finish` then records a refused call, or corrects the
outcome of one that failed after a first step, in a unit of its own. A mutation that
never reaches `run` is still recorded by `finish`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from datetime import UTC
from typing import Any

from core.access import audit
from core.access.audit import AuditCall
from core.common.services import Unit
from db import audit as repo
from db.access_tables import AuditEvent
from db.pages import Page
from db.records import AuditWhere
from resolvers.common.context import Context
from resolvers.common.pagination import window

_current: ContextVar[AuditCall | None] = ContextVar("spacedock_audit_call", default=None)


@contextmanager
def auditing(call: AuditCall) -> Iterator[AuditCall]:
    token = _current.set(call)
    try:
        yield call
    finally:
        _current.reset(token)


def created_id_of(result: object) -> str | None:
    if isinstance(result, str):
        return result
    found = getattr(result, "id", None)
    if found is None:
        found = getattr(getattr(result, "row", None), "id", None)
    return found if isinstance(found, str) else None


async def in_effect(unit: Unit, context: Context, result: object) -> AuditCall | None:
    """Records the current call as allowed, inside the unit of its effect."""
    call = _current.get()
    if call is None:
        return None
    await audit.record(unit, context.caller, call, audit.OK, created_id_of(result))
    return call


def committed(call: AuditCall | None) -> None:
    if call is not None:
        call.written, call.outcome = True, audit.OK


async def finish(context: Context, call: AuditCall, codes: list[str]) -> None:
    """After the field resolved: the final outcome, written unless already right."""
    outcome = audit.outcome_of(codes)
    if call.written and call.outcome == outcome:
        return
    if not call.written and outcome != audit.OK:
        await audit.record_refused(context.services, context.caller, call, outcome)
    else:
        async with context.services.unit() as unit:
            await audit.record(unit, context.caller, call, outcome)
    call.written, call.outcome = True, outcome


async def events_page(
    context: Context, where: AuditWhere, first: int | None, after: str | None
) -> Page[AuditEvent]:
    context.caller.require_to_read(audit.VIEW)
    first, after = window(first, after, "AuditEvent")
    if where.since is not None and where.since.tzinfo is None:
        where = replace(where, since=where.since.replace(tzinfo=UTC))
    async with context.services.read() as session:
        return await repo.events_page(session, context.caller.org_id, where, first, after)


def input_of(row: AuditEvent) -> Any:
    return None if row.input_json is None else json.loads(row.input_json)
