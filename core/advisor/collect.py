"""Gathering one run's findings: what the rules report, merged per (rule, object).

Several pods of one workload report the same rule: they make one finding on the
workload, with evidence from each (bounded), the most severe severity, and every name
they mention.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from core.advisor.model import SEVERITY_ORDER, Evidence, Finding, ObjectRef, Rule, Severity
from providers.network import cluster_text

EVIDENCE_KEPT = 8
EVIDENCE_TEXT_LIMIT = 300


def said(text: object, limit: int = EVIDENCE_TEXT_LIMIT) -> str:
    """Text the cluster (or an application) chose, safe to store and show."""
    return cluster_text(str(text), limit)


@dataclass
class _Draft:
    rule: Rule
    object: ObjectRef
    title: str
    suggestion: str
    patch: str | None
    severity: Severity | None
    evidence: list[Evidence] = field(default_factory=list)
    more: int = 0
    names: set[str] = field(default_factory=set)
    images: set[str] = field(default_factory=set)


class Collector:
    def __init__(self, exempt: frozenset[str] = frozenset()) -> None:
        self.exempt = exempt
        self._drafts: dict[tuple[str, ObjectRef], _Draft] = {}

    def wants(self, rule: Rule) -> bool:
        return rule.id not in self.exempt

    def add(
        self,
        rule: Rule,
        ref: ObjectRef,
        *,
        title: str,
        evidence: Iterable[Evidence],
        suggestion: str,
        patch: str | None = None,
        severity: Severity | None = None,
        names: Iterable[str] = (),
        images: Iterable[str] = (),
    ) -> None:
        if rule.id in self.exempt:
            return
        key = (rule.id, ref)
        draft = self._drafts.get(key)
        if draft is None:
            draft = _Draft(rule, ref, title, suggestion, patch, severity)
            self._drafts[key] = draft
        elif severity is not None and (
            draft.severity is None
            or SEVERITY_ORDER.index(severity) < SEVERITY_ORDER.index(draft.severity)
        ):
            draft.severity = severity
        for line in evidence:
            if not line.text or line in draft.evidence:
                continue
            if len(draft.evidence) < EVIDENCE_KEPT:
                draft.evidence.append(line)
            else:
                draft.more += 1
        draft.names.update(n for n in names if n)
        draft.images.update(i for i in images if i)

    def findings(self) -> list[Finding]:
        found = []
        for draft in self._drafts.values():
            evidence = list(draft.evidence)
            if draft.more:
                evidence.append(Evidence(f"… and {draft.more} more like these"))
            found.append(
                Finding(
                    rule=draft.rule,
                    object=draft.object,
                    title=draft.title,
                    evidence=tuple(evidence),
                    suggestion=draft.suggestion,
                    patch=draft.patch,
                    severity=draft.severity,
                    names=frozenset(
                        draft.names | {draft.object.name, draft.object.namespace} - {""}
                    ),
                    images=frozenset(draft.images),
                )
            )
        return found
