"""What the App Advisor finds, as plain values: rules, the objects they are about, and
findings with their stable fingerprint.

A finding is the outcome of one rule on one object. Its fingerprint is a digest of the
rule and the object (kind, namespace, name), nothing else, so a run that finds the
same thing again names the same finding: it is kept across runs, never duplicated, and
resolved once a run no longer finds it. Everything else a finding says (severity, text,
evidence, the patch) may change between runs; `content_digest` tells a change apart.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum


class Severity(StrEnum):
    CRITICAL = "CRITICAL"
    WARNING = "WARNING"
    INFO = "INFO"


# Most severe first: how lists are ordered and explanations queued.
SEVERITY_ORDER = (Severity.CRITICAL, Severity.WARNING, Severity.INFO)


class Family(StrEnum):
    FAILURE = "FAILURE"  # broken now, with the evidence from status and events
    CONFIGURATION = "CONFIGURATION"  # will break later; comes with a patch that fixes it


@dataclass(frozen=True)
class Rule:
    id: str
    family: Family
    severity: Severity  # the usual severity; a finding may say otherwise (all replicas down)
    title: str
    reads: str  # what it reads, for the README and `advisorRules`


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str  # "" for a cluster-scoped object
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else self.kind


@dataclass(frozen=True)
class Evidence:
    """One line of evidence. `shared`: it may go to the explaining model (names masked).
    Text an application chose (a termination message, a probe's answer) never does."""

    text: str
    shared: bool = True


@dataclass(frozen=True)
class Finding:
    rule: Rule
    object: ObjectRef
    title: str
    evidence: tuple[Evidence, ...]
    suggestion: str
    # A strategic merge patch (YAML) of `object` that clears the finding once applied.
    patch: str | None = None
    severity: Severity | None = None  # None: the rule's
    # Every name the finding mentions (containers, pods, images, services, …): masked
    # before anything reaches a model.
    names: frozenset[str] = field(default_factory=frozenset)
    images: frozenset[str] = field(default_factory=frozenset)

    @property
    def effective_severity(self) -> Severity:
        return self.severity or self.rule.severity

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.rule.id, self.object)

    @property
    def content_digest(self) -> str:
        """Changes when anything a reader sees changes (not the object or the rule)."""
        content = [
            self.effective_severity.value,
            self.title,
            [[e.text, e.shared] for e in self.evidence],
            self.suggestion,
            self.patch,
        ]
        return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:32]


def fingerprint(rule_id: str, ref: ObjectRef) -> str:
    key = json.dumps([rule_id, ref.kind, ref.namespace, ref.name])
    return hashlib.sha256(key.encode()).hexdigest()[:32]
