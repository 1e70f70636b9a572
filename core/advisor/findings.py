"""Findings as the graph keeps them: a run's findings merged into the stored ones, and
what people do with them (dismiss, restore, exempt a rule).

A run's merge, per fingerprint: a finding not stored yet is NEW; one stored and resolved
is REOPENED (it keeps its id, first-seen time and dismissal); one whose content changed
is CHANGED; one stored and open that the run no longer finds is RESOLVED, but only
after a run that read every list whole (a list cut at its bound proves nothing gone).
A dismissed finding stays dismissed whatever runs find; `restoreFinding` lifts that.
Every batch of changes is one `AdviceEvent` row, published after commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from core.access.audit import sanitised
from core.advisor.analysis import Found
from core.advisor.model import SEVERITY_ORDER, Finding
from core.advisor.rules import BY_ID
from core.common.errors import Problems, UserErrors
from core.common.events import ADVICE_CHANGED
from core.common.ids import new_id
from core.common.names import text_problem
from core.common.rbac import Viewer
from core.common.services import Unit
from db import advisor as advice_rows
from db import owned
from db.advisor_tables import AdvisorExemption, AdvisorFinding
from db.cloudspace_tables import CloudSpace

MANAGE = "advice:manage"
VIEW = "advice:view"
RESOLVED_KEPT = timedelta(days=7)
CHANGES_KEPT = timedelta(days=1)
MAX_REASON_CHARS = 1000


class Change(StrEnum):
    NEW = "NEW"
    CHANGED = "CHANGED"
    RESOLVED = "RESOLVED"
    REOPENED = "REOPENED"
    DISMISSED = "DISMISSED"
    RESTORED = "RESTORED"
    EXPLAINED = "EXPLAINED"


def _content(finding: Finding) -> dict[str, Any]:
    severity = finding.effective_severity
    return {
        "severity": severity.value,
        "severity_order": str(SEVERITY_ORDER.index(severity)),
        "title": finding.title,
        "evidence_json": json.dumps([[e.text, e.shared] for e in finding.evidence]),
        "suggestion": finding.suggestion,
        "patch": finding.patch,
        "names_json": json.dumps(
            {"names": sorted(finding.names - finding.images), "images": sorted(finding.images)}
        ),
        "content_digest": finding.content_digest,
    }


def evidence_of(row: AdvisorFinding) -> list[tuple[str, bool]]:
    return [(str(text), bool(shared)) for text, shared in json.loads(row.evidence_json)]


def names_of(row: AdvisorFinding) -> tuple[list[str], list[str]]:
    """(names, images) a finding mentions: what is masked before a model sees it."""
    stored = json.loads(row.names_json)
    return [str(n) for n in stored.get("names", [])], [str(i) for i in stored.get("images", [])]


async def publish(
    unit: Unit, org_id: str, cloud_space_id: str, changes: Sequence[tuple[str, Change]]
) -> None:
    event_id = await advice_rows.add_changes(
        unit.session, org_id, cloud_space_id, changes, unit.now
    )
    if event_id is not None:
        unit.publish(
            ADVICE_CHANGED,
            {"event_id": event_id, "cloud_space_id": cloud_space_id, "org_id": org_id},
        )


async def merge(
    unit: Unit, cloud_space: CloudSpace, found: Sequence[Found], *, complete: bool, explain: bool
) -> list[tuple[str, Change]]:
    """Merges one run's findings into the CloudSpace's stored ones; the changes made. Call
    it holding the CloudSpace's schedule row: exemptions made while the run read are
    read here again, so an exempted rule's findings never come back."""
    now, session = unit.now, unit.session
    exempt = await advice_rows.exempt_rules(session, cloud_space.id)
    found = [item for item in found if item.finding.rule.id not in exempt]
    known = await advice_rows.known(session, cloud_space.id)
    new: list[dict[str, Any]] = []
    updated: list[dict[str, Any]] = []
    changes: list[tuple[str, Change]] = []
    present: set[str] = set()
    for item in found:
        finding = item.finding
        fingerprint = finding.fingerprint
        present.add(fingerprint)
        stored = known.get(fingerprint)
        content = {**_content(finding), "app_id": item.app_id}
        if stored is None:
            finding_id = new_id("adv")
            new.append(
                {
                    "id": finding_id,
                    "org_id": cloud_space.org_id,
                    "cloud_space_id": cloud_space.id,
                    "fingerprint": fingerprint,
                    "rule_id": finding.rule.id,
                    "family": finding.rule.family.value,
                    "kind": finding.object.kind,
                    "namespace": finding.object.namespace,
                    "name": finding.object.name,
                    "first_seen_at": now,
                    "last_seen_at": now,
                    "changed_at": now,
                    "explain_due_at": now if explain else None,
                    "explain_attempts": 0,
                    **content,
                }
            )
            changes.append((finding_id, Change.NEW))
        elif stored.resolved:
            updated.append(
                {"finding_id": stored.id, "resolved_at": None, "changed_at": now, **content}
            )
            changes.append((stored.id, Change.REOPENED))
        elif stored.content_digest != finding.content_digest:
            updated.append(
                {"finding_id": stored.id, "resolved_at": None, "changed_at": now, **content}
            )
            changes.append((stored.id, Change.CHANGED))
    gone = (
        []
        if not complete
        else [
            stored.id for fp, stored in known.items() if fp not in present and not stored.resolved
        ]
    )
    await advice_rows.insert_findings(session, new)
    await advice_rows.update_findings(session, updated)
    await advice_rows.resolve(session, gone, now)
    changes += [(finding_id, Change.RESOLVED) for finding_id in gone]
    await advice_rows.seen(session, cloud_space.id, now)
    await advice_rows.forget_resolved(session, cloud_space.id, now - RESOLVED_KEPT)
    await publish(unit, cloud_space.org_id, cloud_space.id, changes)
    return changes


# -- what people do -----------------------------------------------------------------
def _reason(problems: Problems, reason: str) -> str:
    reason = reason.strip()
    if not reason:
        problems.add(["reason"], "reason is required: say why")
    elif len(reason) > MAX_REASON_CHARS:
        problems.add(["reason"], f"reason must be at most {MAX_REASON_CHARS} characters")
    elif (why := text_problem(reason, multiline=True)) is not None:
        problems.add(["reason"], f"reason {why}")
    return reason


async def _finding(unit: Unit, viewer: Viewer, finding_id: str) -> AdvisorFinding:
    row = await advice_rows.finding_for_update(unit.session, viewer.org_id, finding_id)
    if row is None:
        raise UserErrors.one(["input", "id"], "no such finding", "NOT_FOUND")
    return row


async def dismiss(unit: Unit, viewer: Viewer, finding_id: str, reason: str) -> AdvisorFinding:
    viewer.require(MANAGE)
    problems = Problems("input")
    reason = _reason(problems, reason)
    row = await _finding(unit, viewer, finding_id)
    if problems:
        raise UserErrors(problems.errors)
    if row.dismissed_at is not None:
        return row  # dismissed already: the first reason stands
    row.dismissed_at, row.dismiss_reason = unit.now, reason
    row.dismissed_by, row.explain_due_at = sanitised(viewer.subject), None
    unit.session.add(row)
    await publish(unit, row.org_id, row.cloud_space_id, [(row.id, Change.DISMISSED)])
    return row


async def restore(unit: Unit, viewer: Viewer, finding_id: str, reason: str) -> AdvisorFinding:
    viewer.require(MANAGE)
    problems = Problems("input")
    _reason(problems, reason)  # recorded by the audit log with the call
    row = await _finding(unit, viewer, finding_id)
    if problems:
        raise UserErrors(problems.errors)
    if row.dismissed_at is None:
        raise UserErrors.one(["input", "id"], "the finding is not dismissed", "PRECONDITION_FAILED")
    row.dismissed_at, row.dismiss_reason, row.dismissed_by = None, None, None
    if row.explanation is None and row.resolved_at is None:
        row.explain_due_at = unit.now
    unit.session.add(row)
    await publish(unit, row.org_id, row.cloud_space_id, [(row.id, Change.RESTORED)])
    return row


async def cloud_space_of(unit: Unit, viewer: Viewer, cloud_space_id: str) -> CloudSpace:
    row = await owned.by_id(unit.session, CloudSpace, viewer.org_id, cloud_space_id)
    if row is None:
        raise UserErrors.one(["input", "cloudSpaceId"], "no such CloudSpace", "NOT_FOUND")
    return row


def _rule(problems: Problems, rule_id: str) -> None:
    if rule_id not in BY_ID:
        problems.add(["ruleId"], "no such rule: advisorRules lists them")


async def exempt(
    unit: Unit, viewer: Viewer, cloud_space_id: str, rule_id: str, reason: str
) -> AdvisorExemption:
    """The rule no longer runs on the CloudSpace; its open findings resolve now."""
    viewer.require(MANAGE)
    problems = Problems("input")
    _rule(problems, rule_id)
    reason = _reason(problems, reason)
    cloud_space = await cloud_space_of(unit, viewer, cloud_space_id)
    if problems:
        raise UserErrors(problems.errors)
    await advice_rows.lock_schedule(unit.session, cloud_space.id)
    existing = await advice_rows.exemption(unit.session, cloud_space.id, rule_id)
    if existing is not None:
        return existing
    exemption = AdvisorExemption(
        cloud_space_id=cloud_space.id,
        rule_id=rule_id,
        org_id=cloud_space.org_id,
        reason=reason,
        created_by=sanitised(viewer.subject),
        created_at=unit.now,
    )
    unit.session.add(exemption)
    open_ids = await advice_rows.open_of_rule(unit.session, cloud_space.id, rule_id)
    await advice_rows.resolve(unit.session, open_ids, unit.now)
    await publish(
        unit, cloud_space.org_id, cloud_space.id, [(i, Change.RESOLVED) for i in open_ids]
    )
    return exemption


async def lift_exemption(
    unit: Unit, viewer: Viewer, cloud_space_id: str, rule_id: str
) -> AdvisorExemption:
    """The rule runs again, from the CloudSpace's next run (due now)."""
    viewer.require(MANAGE)
    cloud_space = await cloud_space_of(unit, viewer, cloud_space_id)
    existing = await advice_rows.exemption(unit.session, cloud_space.id, rule_id)
    if existing is None:
        raise UserErrors.one(["input", "ruleId"], "the rule is not exempted here", "NOT_FOUND")
    await unit.session.delete(existing)
    await advice_rows.run_soon(unit.session, cloud_space.id, unit.now)
    return existing


def changes_kept_after(now: datetime) -> datetime:
    return now - CHANGES_KEPT
