"""The app status loop: every SPACEDOCK_APP_STATUS_INTERVAL_S, each app's Flux objects are
read from its target and turned into its status (core.apps.status); a change is an event,
and an APPLIED revision becomes READY or FAILED once Flux has answered for it.

Apps are claimed like probes (`status_due_at` moves an interval on), then read per
cluster: one task per target cluster at a time, a fixed number of list calls each (the
app's source and applier kinds, by the `spacedock.dev/app` label, and the workloads their
inventories name, per namespace), so the cost grows with clusters and namespaces, not
with calls per app. Apps whose target cannot be reached now are not called at all: they
read UNKNOWN (or PROGRESSING while their CloudSpace is being made) with the reason.
Only changes are written.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, ClassVar

from core.apps import flux
from core.apps.history import EventKind, RevisionState, record, revision_moved
from core.apps.settings import AppSettings
from core.apps.sources import SourceKind
from core.apps.status import (
    AppStatus,
    Observation,
    Reading,
    inventory_entry,
    observe,
    revision_outcome,
    workloads_json,
)
from core.apps.targets import Reaches, Target, TargetState, read_world, target_of_app
from core.cloudspaces.host_access import connect
from core.common.loops import STOP_GRACE_S, Loop, LoopStats, metric, seconds_until_due
from core.common.services import Services, Unit
from db import apps as app_rows
from db import claims
from db.app_tables import App
from providers import host as host_api
from providers.errors import ProviderError

log = logging.getLogger("spacedock.app_status")

BATCH = 500
READ_TIMEOUT_S = 20.0
# Apps made by another replica cannot wake this loop: with no work at all it looks this often.
LOOK_WHEN_NONE_S = 30.0
APPS_GROUP = "apps/v1"
SELECTOR = flux.APP_LABEL  # every object that carries an app's id


@dataclass
class StatusStats(LoopStats):
    loop: ClassVar[str] = "app_status"

    apps: int = metric("counter", "spacedock_app_status_reads_total", "App statuses read.")
    clusters: int = metric(
        "counter", "spacedock_app_status_cluster_reads_total", "Cluster passes of the status loop."
    )
    api_calls: int = metric(
        "counter", "spacedock_app_status_api_calls_total", "Calls to target clusters."
    )
    changes: int = metric(
        "counter", "spacedock_app_status_changes_total", "App status changes written."
    )


class StatusLoop:
    def __init__(
        self, services: Services, settings: AppSettings, reaches: Reaches, concurrency: int = 16
    ) -> None:
        self.services = services
        self.settings = settings
        self.reaches = reaches
        self.stats = StatusStats()
        self.loop = Loop("app_status", self.stats, concurrency)
        self._cluster_locks: dict[str, asyncio.Lock] = {}

    def start(self) -> None:
        self.loop.run("claims", self._claim_step)

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Claims nothing more and lets the cluster reads in flight write within `grace_s`;
        apps not read fall due again at their next interval, for any replica."""
        await self.loop.stop(grace_s)

    async def _claim_step(self) -> None:
        await self.loop.wait_for_free(1, self.settings.status_interval_s)
        interval = timedelta(seconds=self.settings.status_interval_s)
        async with self.services.unit() as unit:
            rows = await claims.claim_due(
                unit.session,
                app_rows.STATUS_QUEUE,
                now=unit.now,
                due_again=unit.now + interval,
                limit=BATCH,
            )
            world = await read_world(unit.session, rows)
            waiting = await app_rows.in_states(
                unit.session, [row.id for row in rows], [RevisionState.APPLIED]
            )
            now = unit.now
        awaiting = {revision.app_id for revision in waiting}
        by_cluster: dict[str, list[tuple[App, Target]]] = defaultdict(list)
        gated: list[tuple[App, Target]] = []
        for app in rows:
            target = target_of_app(self.services, app, world, now)
            (
                by_cluster[target.cluster_key] if target.state is TargetState.AVAILABLE else gated
            ).append((app, target))
        if gated:
            seen = {app.id: _gated(target) for app, target in gated}
            await self._write([app for app, _ in gated], seen, {}, awaiting)
        for key, members in by_cluster.items():
            await self.loop.wait_for_free(1, self.settings.status_interval_s)
            self.loop.spawn(f"cluster-{key}", self._read_cluster(key, members, awaiting))
        if len(rows) < BATCH:
            due_in = await seconds_until_due(
                self.services,
                app_rows.earliest_status,
                longest_s=self.settings.status_interval_s,
                when_none_s=LOOK_WHEN_NONE_S,
            )
            await self.loop.nap(due_in)

    async def _read_cluster(
        self, key: str, members: list[tuple[App, Target]], awaiting: set[str]
    ) -> None:
        lock = self._cluster_locks.setdefault(key, asyncio.Lock())
        async with lock:
            self.stats.clusters += 1
            target = members[0][1]
            apps = [app for app, _ in members]
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    readings, index = await self._read(target, apps)
                observed = {app.id: observe(readings[app.id], index) for app in apps}
            except (ProviderError, TimeoutError) as failed:
                self.reaches.forget(target)
                reason = (
                    failed.reason
                    if isinstance(failed, ProviderError)
                    else "timeout: the target did not answer"
                )
                readings = {}
                observed = {
                    app.id: Observation(AppStatus.UNKNOWN, "TargetUnreachable", reason)
                    for app in apps
                }
            self.stats.apps += len(apps)
            await self._write(apps, observed, readings, awaiting)
        if not lock.locked() and self._cluster_locks.get(key) is lock:
            del self._cluster_locks[key]

    async def _read(
        self, target: Target, apps: Sequence[App]
    ) -> tuple[dict[str, Reading], dict[tuple[str, str, str], Any]]:
        credentials = await self.reaches.credentials(target)
        async with connect(
            self.services, credentials, timeout_s=READ_TIMEOUT_S, on_call=self._count_call
        ) as kube:
            kinds = set()
            for app in apps:
                kinds |= (
                    {"GitRepository", "Kustomization"}
                    if app.source_kind == SourceKind.GIT
                    else {"HelmRepository", "HelmRelease"}
                )
            found: dict[tuple[str, str], dict[str, Any]] = {}
            for kind in sorted(kinds):
                for obj in await kube.items(
                    host_api.path_of(flux.API_OF[kind], kind, None), SELECTOR
                ):
                    owner = ((obj.get("metadata") or {}).get("labels") or {}).get(flux.APP_LABEL)
                    found[(kind, str(owner))] = obj
            readings = {}
            for app in apps:
                git = app.source_kind == SourceKind.GIT
                deploy = found.get(("Kustomization" if git else "HelmRelease", app.id))
                source = found.get(("GitRepository" if git else "HelmRepository", app.id))
                readings[app.id] = Reading(source, deploy, await _chart_if_failing(kube, deploy))
            return readings, await _workloads(kube, readings.values())

    def _count_call(self) -> None:
        self.stats.api_calls += 1

    async def _write(
        self,
        claimed: Sequence[App],
        observed: Mapping[str, Observation],
        readings: Mapping[str, Reading],
        awaiting: set[str],
    ) -> None:
        """Only what changed is written (most passes write nothing): one transaction for the
        apps whose status differs from the row claimed, or whose revision awaits Flux."""
        seen = {app.id: _as_shown(app, observed[app.id]) for app in claimed}
        wanted = sorted(
            app.id for app in claimed if app.id in awaiting or _delta(app, seen[app.id]) is not None
        )
        if not wanted:
            return
        async with self.services.unit() as unit:
            apps = await app_rows.locked_many(unit.session, wanted)
            applied = {
                r.app_id: r
                for r in await app_rows.in_states(unit.session, wanted, [RevisionState.APPLIED])
            }
            for app in apps:
                if app.deleting:
                    continue
                observation = _as_shown(app, observed[app.id])
                await self._changed(unit, app, observation)
                revision = applied.get(app.id)
                reading = readings.get(app.id)
                if revision is None or reading is None or revision.number != app.delivered_revision:
                    continue
                outcome = revision_outcome(
                    reading, observation, revision.source_generation, revision.deploy_generation
                )
                if outcome is not None:
                    revision.flux_revision = observation.last_applied or observation.last_attempted
                    revision.reason = (
                        None
                        if outcome == "READY"
                        else f"{observation.reason}: {observation.message}"
                    )
                    revision.finished_at = unit.now
                    await revision_moved(unit, app, revision, RevisionState(outcome))

    async def _changed(self, unit: Unit, app: App, seen: Observation) -> None:
        delta = _delta(app, seen)
        if delta is None:
            return
        before, after, facts = delta
        app.last_applied_revision, app.last_attempted_revision, app.last_handled_sync_at = facts
        app.status, app.status_reason, app.status_message, app.workloads_json = after
        if before != after:
            app.status_read_at = unit.now
        unit.session.add(app)
        await unit.session.flush()
        if before != after:
            self.stats.changes += 1
            await record(unit, app, EventKind.STATUS, previous_status=before[0])


Shown = tuple[str, str | None, str | None, str]
Facts = tuple[str | None, str | None, str | None]


def _as_shown(app: App, seen: Observation) -> Observation:
    """An app never delivered shows it is queued, whatever its target holds."""
    if app.delivered_revision is None and seen.status is not AppStatus.UNKNOWN:
        return replace(
            seen,
            status=AppStatus.PROGRESSING,
            reason="Queued",
            message="its first revision waits to be delivered",
        )
    return seen


def _delta(app: App, seen: Observation) -> tuple[Shown, Shown, Facts] | None:
    """(shown before, shown after, Flux's facts after) when the app's row would change;
    None when it would not. With nothing read (the target away, the objects gone), what
    was read last stays."""
    if app.deleting:
        return None
    keep = seen.status is AppStatus.UNKNOWN and not seen.workloads
    workloads = app.workloads_json if keep else workloads_json(seen.workloads)
    before = (app.status, app.status_reason, app.status_message, app.workloads_json)
    after = (seen.status.value, seen.reason, seen.message, workloads)
    facts = (app.last_applied_revision, app.last_attempted_revision, app.last_handled_sync_at)
    seen_facts = facts if keep else (seen.last_applied, seen.last_attempted, seen.handled_sync)
    if before == after and facts == seen_facts:
        return None
    return before, after, seen_facts


def _gated(target: Target) -> Observation:
    if target.state is TargetState.COMING_UP:
        return Observation(AppStatus.PROGRESSING, "WaitingForTarget", target.why)
    reason = "TargetGone" if target.state is TargetState.GONE else "TargetUnavailable"
    return Observation(AppStatus.UNKNOWN, reason, target.why)


async def _chart_if_failing(
    kube: host_api.Kube, release: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """A HelmRelease's HelmChart, read only while the release is not Ready: it holds the
    chart's own reason (a version that does not exist)."""
    if release is None or release.get("kind") != "HelmRelease":
        return None
    status = release.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    named = status.get("helmChart")
    if (
        (ready is not None and ready.get("status") == "True")
        or not isinstance(named, str)
        or "/" not in named
    ):
        return None
    namespace, name = named.split("/", 1)
    return await kube.get(host_api.path_of(flux.SOURCE_API, "HelmChart", namespace, name))


async def _workloads(kube: host_api.Kube, readings: Any) -> dict[tuple[str, str, str], Any]:
    """The Deployments, StatefulSets and DaemonSets the inventories name: one list per
    namespace and kind."""
    wanted: set[tuple[str, str]] = set()
    for reading in readings:
        for entry in (((reading.deploy or {}).get("status") or {}).get("inventory") or {}).get(
            "entries"
        ) or []:
            parsed = inventory_entry(entry)
            if parsed is not None:
                wanted.add((parsed[0], parsed[2]))
    index: dict[tuple[str, str, str], Any] = {}
    for namespace, kind in sorted(wanted):
        for obj in await kube.items(host_api.path_of(APPS_GROUP, kind, namespace)):
            index[(kind, namespace, (obj.get("metadata") or {}).get("name", ""))] = obj
    return index
