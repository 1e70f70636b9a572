"""The audit log: every mutation call, allowed or refused, with who, what, on which ids,
the outcome, and the input with every secret redacted.

An allowed call's event is written in the same transaction as its effect; a refused
call (or one that failed after a first step) gets its event, or its final outcome, in
a transaction of its own, within a per-credential budget (core.common.refused_calls). Events
older than SPACEDOCK_AUDIT_RETENTION_DAYS are pruned.

Nothing a caller sends is stored as sent: the actor (a token's name, an OIDC subject) is
sanitised, since names need not be unique and a subject may hold anything; the token's
id says who it was. Target ids are the ids that could name an object, at most
MAX_TARGETS; the input is bounded (MAX_INPUT_BYTES) with long strings and lists cut where
they are long, saying how much was left out.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from core.common import request_scope
from core.common.ids import kind_of, new_id
from core.common.rbac import CredentialKind, Viewer
from core.common.refused_calls import SUMMARY_ACTION, Refusal, Summary
from core.common.services import Services, Unit, utcnow
from db import audit as repo
from db.access_tables import AuditEvent

REDACTED = "[redacted]"
# Where a URL's authority (and so its userinfo) ends.
AUTHORITY_END = re.compile(r"[/?#\s]")


def without_userinfo(text: str) -> str:
    """`text` with the userinfo of every `scheme://userinfo@host` in it redacted.

    One pass, linear in the text's length whatever it holds: the backtracking pattern
    this replaces took seconds of the event loop on a 64 KiB input value."""
    parts: list[str] = []
    kept_from = 0
    found = text.find("://")
    while found != -1:
        authority = found + 3
        stop = AUTHORITY_END.search(text, authority)
        end = len(text) if stop is None else stop.start()
        at = text.rfind("@", authority, end)
        if at != -1:
            parts += [text[kept_from:authority], REDACTED]
            kept_from = at
        # The next "://" may begin on the character that ended this authority (":").
        found = text.find("://", max(authority, end - 1))
    parts.append(text[kept_from:])
    return "".join(parts)


OK = "OK"
VIEW = "audit:view"


class Via(StrEnum):
    """Where a call came from: the API, or an operator's `spacedock` command."""

    API = "API"
    CLI = "CLI"


# An actor longer than this is cut, and keeps a digest of the whole so that two subjects
# alike in their first part stay apart.
MAX_ACTOR_CHARS = 256
ACTOR_KEPT = 200
MAX_TARGETS = 100
# The input as stored: strings past MAX_STRING_CHARS keep their first STRING_KEPT
# characters, lists and objects their first MAX_ITEMS entries, and an input still past
# MAX_INPUT_BYTES is replaced by its size (a refused call used to store 900 KB).
MAX_STRING_CHARS = 1024
STRING_KEPT = 256
MAX_ITEMS = 100
MAX_DEPTH = 8
MAX_INPUT_BYTES = 16 * 1024
# Escaped in an actor: controls, format characters (bidi overrides such as U+202E,
# zero-width ones), line and paragraph separators, surrogates, unassigned code points.
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _escaped(character: str) -> str:
    if character == "\\":
        return "\\\\"
    if unicodedata.category(character) in ESCAPED_CATEGORIES:
        point = ord(character)
        if point < 0x100:
            return f"\\x{point:02x}"
        return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"
    return character


def sanitised(text: str) -> str:
    """`text` as an auditor can read it: every invisible or direction-changing character
    written as an escape (and a backslash as two), at most MAX_ACTOR_CHARS characters.
    One name is always shown the same way, and two names never the same way."""
    shown = "".join(_escaped(character) for character in text)
    if len(shown) <= MAX_ACTOR_CHARS:
        return shown
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{shown[:ACTOR_KEPT]}…[{len(text)} characters, sha256 {digest}]"


def bounded(value: Any, depth: int = 0) -> Any:
    """The recorded input with every long part cut, saying how much was left out."""
    if depth > MAX_DEPTH:
        return "…[nested deeper]"
    if isinstance(value, str):
        if len(value) <= MAX_STRING_CHARS:
            return value
        return f"{value[:STRING_KEPT]}…[{len(value)} characters]"
    if isinstance(value, list):
        kept = [bounded(item, depth + 1) for item in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            kept.append(f"…[{len(value) - MAX_ITEMS} more items]")
        return kept
    if isinstance(value, dict):
        items = list(value.items())
        found = {bounded(str(k), depth + 1): bounded(v, depth + 1) for k, v in items[:MAX_ITEMS]}
        if len(items) > MAX_ITEMS:
            found["…"] = f"[{len(items) - MAX_ITEMS} more keys]"
        return found
    return value


def stored_input(value: Any) -> str | None:
    if value is None:
        return None
    text = json.dumps(bounded(value))
    if len(text) > MAX_INPUT_BYTES:
        text = json.dumps({"…": f"[{len(text)} bytes of input, over {MAX_INPUT_BYTES}]"})
    return text


def stored_targets(ids: list[str]) -> str:
    """The ids that could name an object, once each, at most MAX_TARGETS."""
    possible = [object_id for object_id in dict.fromkeys(ids) if kind_of(object_id)]
    return json.dumps(possible[:MAX_TARGETS])


def credential_of(viewer: Viewer) -> str:
    """Who a budget of refused calls belongs to: the token, or the OIDC subject."""
    if viewer.token_id is not None:
        return viewer.token_id
    return f"{viewer.credential_kind.value}:{viewer.org_id}:{viewer.subject}"


@dataclass
class AuditCall:
    """One mutation call being audited; `input` is already redacted."""

    action: str
    input: Any
    target_ids: list[str]
    request_id: str | None = None
    id: str = field(default_factory=lambda: new_id("aud"))
    # Set once an event for this call is committed.
    written: bool = False
    outcome: str | None = None


def outcome_of(codes: list[str]) -> str:
    """OK, or the userErrors' codes in order, once each (e.g. "FORBIDDEN")."""
    return ",".join(dict.fromkeys(codes)) if codes else OK


async def record(
    unit: Unit, viewer: Viewer, call: AuditCall, outcome: str, created_id: str | None = None
) -> None:
    targets = list(call.target_ids)
    if created_id is not None and created_id not in targets:
        targets.append(created_id)
    call.target_ids = targets
    await repo.save(
        unit.session,
        AuditEvent(
            id=call.id,
            org_id=viewer.org_id,
            at=unit.now,
            actor=sanitised(viewer.subject),
            actor_kind=viewer.credential_kind.value,
            actor_token_id=viewer.token_id,
            action=call.action,
            target_ids_json=stored_targets(targets),
            outcome=outcome,
            input_json=stored_input(call.input),
            request_id=call.request_id,
            via=via_of(viewer),
        ),
    )


def via_of(viewer: Viewer) -> Via:
    return Via.CLI if viewer.credential_kind is CredentialKind.OS_USER else Via.API


async def record_operator_call(
    unit: Unit,
    operator: Viewer,
    action: str,
    input: Any,
    target_ids: list[str],
    outcome: str = OK,
) -> None:
    """An operator command's event (`via` CLI), named after the mutation that does the same
    (createApiToken, revokeApiToken, registerSpace) so one filter finds both; `input`
    holds no secret (the caller leaves them out or redacts them)."""
    call = AuditCall(action, input, target_ids, request_id=request_scope.current_id())
    await record(unit, operator, call, outcome)


async def record_refused(services: Services, viewer: Viewer, call: AuditCall, outcome: str) -> None:
    """A refused call's event, within its credential's budget; past it, the call is counted
    in the window's summary, written now when it is new (later by the housekeeping loop).
    A call only counted opens no transaction (on SQLite that would take the write lock)."""
    summary = services.refused_calls.admit(
        Refusal(
            credential=credential_of(viewer),
            org_id=viewer.org_id,
            actor=sanitised(viewer.subject),
            actor_kind=viewer.credential_kind.value,
            actor_token_id=viewer.token_id,
            action=call.action,
            outcome=outcome,
            at=utcnow(),
            request_id=call.request_id,
        )
    )
    if summary is not None and summary.written > 0:
        return
    async with services.unit() as unit:
        if summary is None:
            await record(unit, viewer, call, outcome)
        else:
            await write_summary(unit, summary)


async def write_summary(unit: Unit, summary: Summary) -> None:
    counted = summary.calls
    await repo.save(
        unit.session,
        AuditEvent(
            id=summary.id,
            org_id=summary.org_id,
            at=summary.first_at,
            actor=summary.actor,
            actor_kind=summary.actor_kind,
            actor_token_id=summary.actor_token_id,
            action=SUMMARY_ACTION,
            target_ids_json="[]",
            outcome=summary.outcome,
            input_json=stored_input(summary.input),
            request_id=summary.request_id,
            calls=counted,
        ),
    )
    summary.written = counted


async def write_summaries(services: Services) -> int:
    """Brings every summary's event up to the calls it counts; how many were written."""
    pending = services.refused_calls.unwritten()
    if pending:
        async with services.unit() as unit:
            for summary in pending:
                await write_summary(unit, summary)
    return len(pending)


async def prune(unit: Unit, retention_days: float) -> int:
    """Deletes events older than the retention; how many went."""
    return await repo.prune(unit.session, unit.now - timedelta(days=retention_days))
