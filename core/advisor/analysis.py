"""One run's analysis: every rule over a snapshot, minus the CloudSpace's exemptions,
each finding with the app it belongs to. Pure and synchronous: the loop runs it in a
worker thread so the event loop keeps serving while a large vCluster is analysed."""

from __future__ import annotations

from dataclasses import dataclass

from core.advisor import configuration, failures, failures_objects, quota
from core.advisor.collect import Collector
from core.advisor.model import Finding
from core.advisor.ownership import AppIndex
from core.advisor.snapshot import Snapshot


@dataclass(frozen=True)
class Found:
    finding: Finding
    app_id: str | None


def analyze(snapshot: Snapshot, exempt: frozenset[str], apps: AppIndex) -> list[Found]:
    out = Collector(exempt)
    failures.check(snapshot, out)
    failures_objects.check(snapshot, out)
    configuration.check(snapshot, out)
    quota.check(snapshot, out)
    return [Found(finding, apps.app_of(finding.object)) for finding in out.findings()]
