"""The delivery worker: a loop-kit loop that brings each app's revisions, suspensions, sync
requests and deletion to its target, built like the CloudSpace reconciler.

A claimer leases apps with due work (`delivery_due_at` has come, no live lease) to this
process and spawns one worker per app, at most `concurrency` at once and PER_CLUSTER per
target cluster. A worker decides in one transaction, fenced on its lease, what the app
needs (its oldest pending revision first, in number order), calls the cluster outside any
transaction, and writes the outcome in another. A revision is marked APPLYING before its
objects are written, so a process that dies mid-write leaves it APPLYING: whoever takes
the app next (here after a restart, or another replica once the lease runs out) resumes
it and writes only what is not there yet (core.apps.writes). Two replicas never hold one
app's lease at once, so they never apply the same revision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ClassVar

from core.apps import flux, queue, sources, writes
from core.apps.history import RevisionState, revision_moved
from core.apps.settings import AppSettings
from core.apps.targets import Reaches, Target, TargetState, read_world, target_of_app
from core.apps.writes import (
    AGAIN,
    Crashed,
    Outcome,
    Refused,
    Removing,
    Unreachable,
    Wrote,
    unreachable,
)
from core.cloudspaces.host_access import connect
from core.cloudspaces.reconciler import owner_name
from core.common.loops import STOP_GRACE_S, Loop, LoopStats, describe, metric, seconds_until_due
from core.common.services import Services, Unit
from db import apps as app_rows
from db import claims
from db.app_tables import App, AppRevision
from providers.errors import ProviderError

log = logging.getLogger("spacedock.delivery")

LEASE = timedelta(seconds=30)
# Every cluster call of one step together, well inside the lease.
STEP_TIMEOUT_S = 20.0
PER_CLUSTER = 4
LOOK_FOR_DUE_S = 2.0
# Apps made by another replica cannot wake this loop: with no work at all it looks this often.
LOOK_WHEN_NONE_S = 30.0


@dataclass
class DeliveryStats(LoopStats):
    loop: ClassVar[str] = "delivery"

    applied: int = metric(
        "counter",
        "spacedock_delivery_revisions_applied_total",
        "Revisions written to their targets.",
    )
    tries: int = metric(
        "counter",
        "spacedock_delivery_tries_failed_total",
        "Tries of a revision against an unavailable target.",
    )
    api_calls: int = metric(
        "counter", "spacedock_delivery_api_calls_total", "Calls to target clusters."
    )


@dataclass(frozen=True)
class Job:
    """Cluster work one step needs."""

    kind: str  # deliver, operate or remove
    target: Target
    placement: flux.Placement
    source_kind: str
    objects: list[flux.Obj] = field(default_factory=list)
    revision: AppRevision | None = None
    resumed: bool = False
    suspended: bool = False
    sync_at: datetime | None = None
    resume_first: flux.Obj | None = None


class Delivery:
    def __init__(
        self,
        services: Services,
        settings: AppSettings,
        reaches: Reaches,
        concurrency: int = 32,
        per_cluster: int = PER_CLUSTER,
    ) -> None:
        self.services = services
        self.per_cluster = per_cluster
        self.settings = settings
        self.reaches = reaches
        self.owner = owner_name()
        self.stats = DeliveryStats()
        self.loop = Loop("delivery", self.stats, concurrency)
        self._clusters: dict[str, tuple[asyncio.Semaphore, int]] = {}

    def start(self) -> None:
        self.loop.run("claims", self._claim_step)

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Claims nothing more, lets each step in flight finish and persist within `grace_s`,
        then hands back every app it holds, so another replica (or this one after a restart)
        takes it at once. (After a crash, the leases run out instead.)"""
        await self.loop.stop(grace_s)
        try:
            async with self.services.unit() as unit:
                await app_rows.release_all(unit.session, self.owner, unit.now)
        except Exception as error:  # shutting down: the leases run out by themselves
            log.warning("app leases not handed back: %s", describe(error))

    async def _claim_step(self) -> None:
        await self.loop.wait_for_free(1, LOOK_FOR_DUE_S)
        free = self.loop.free
        if free <= 0:
            return
        self.services.delivery_wanted.clear()
        async with self.services.unit() as unit:
            rows = await claims.claim_due(
                unit.session,
                app_rows.DELIVERY_QUEUE,
                now=unit.now,
                due_again=unit.now + LEASE,
                limit=free,
                owner=self.owner,
                lease_until=unit.now + LEASE,
            )
            claimed = [row.id for row in rows]
        for app_id in claimed:
            self.loop.spawn(app_id, self._work(app_id))
        if len(claimed) < free:
            due_in = await seconds_until_due(
                self.services,
                app_rows.earliest_delivery,
                longest_s=LOOK_FOR_DUE_S,
                when_none_s=LOOK_WHEN_NONE_S,
            )
            await self.loop.nap(due_in, self.services.delivery_wanted)

    async def _work(self, app_id: str) -> None:
        while not self.loop.stopped:
            async with self.services.unit() as unit:
                job = await self._next(unit, app_id)
            if job == AGAIN:
                continue
            if not isinstance(job, Job):
                return
            outcome = await self._run(job)
            async with self.services.unit() as unit:
                again = await self._persist(unit, app_id, job, outcome)
            if not again:
                return

    # -- deciding -----------------------------------------------------------------
    async def _next(self, unit: Unit, app_id: str) -> Job | str | None:
        app = await app_rows.locked_if_claimed(unit.session, app_id, self.owner)
        if app is None:
            return None  # deleted, or the lease passed to another worker
        app.lease_until = app.delivery_due_at = unit.now + LEASE
        unit.session.add(app)
        target = target_of_app(self.services, app, await read_world(unit.session, [app]), unit.now)
        if app.deleting:
            return await self._removal(unit, app, target)
        waiting = await queue.pending(unit, app)
        if waiting:
            return await self._delivery(unit, app, target, waiting[0])
        if _operations_wanted(app):
            if target.state is TargetState.GONE:
                app.delivered_suspended, app.delivered_sync_at = (
                    app.suspended,
                    app.sync_requested_at,
                )
                return AGAIN
            if target.state is not TargetState.AVAILABLE:
                queue.reschedule(unit, app, self.settings.retry_interval_s)
                return None
            return await self._job(unit, app, target, "operate", await self._delivered(unit, app))
        queue.reschedule(unit, app, None)  # nothing to do until a mutation asks
        return None

    async def _delivery(
        self, unit: Unit, app: App, target: Target, revision: AppRevision
    ) -> Job | str | None:
        if target.state is TargetState.GONE:
            await queue.dead_letter_all(unit, app, target.why or "the target is gone")
            return AGAIN
        if target.state is TargetState.COMING_UP:
            await queue.waits(unit, app, revision, f"waiting: {target.why}")
            queue.reschedule(unit, app, self.settings.poll_s)
            return None
        if target.state is TargetState.UNAVAILABLE:
            self.stats.tries += 1
            if await queue.spend_try(unit, app, target.why or "the target is unavailable"):
                queue.reschedule(unit, app, self.settings.retry_interval_s)
                return None
            return AGAIN
        resumed = revision.state == RevisionState.APPLYING
        await revision_moved(unit, app, revision, RevisionState.APPLYING)
        return await self._job(unit, app, target, "deliver", revision, resumed)

    async def _removal(self, unit: Unit, app: App, target: Target) -> Job | None:
        if target.state is TargetState.GONE or app.delivered_revision is None:
            await queue.removed(unit, app)  # nothing of it can be (or was) on a cluster
            return None
        if target.state is not TargetState.AVAILABLE:
            await queue.say(
                unit, app, f"waiting for the target to remove its Flux objects: {target.why}"
            )
            queue.reschedule(unit, app, self.settings.retry_interval_s)
            return None
        return await self._job(unit, app, target, "remove", await self._delivered(unit, app))

    async def _delivered(self, unit: Unit, app: App) -> AppRevision | None:
        """The revision last written to the cluster, which suspensions and syncs rewrite."""
        if app.delivered_revision is None:
            return None
        return await app_rows.by_number(unit.session, app.id, app.delivered_revision)

    async def _job(
        self,
        unit: Unit,
        app: App,
        target: Target,
        kind: str,
        revision: AppRevision | None,
        resumed: bool = False,
    ) -> Job:
        placement = flux.Placement(app.id, app.name, app.namespace)
        source_kind = (
            "GitRepository" if app.source_kind == sources.SourceKind.GIT else "HelmRepository"
        )
        objects: list[flux.Obj] = []
        resume_first = None
        if revision is not None:
            credential = None
            if app.credential_ciphertext is not None:
                credential = self.services.secrets.open(app.credential_ciphertext)
            suspended = app.suspended and kind != "remove"
            objects = flux.objects(
                placement,
                sources.from_json(revision.source_json),
                revision.number,
                credential=credential,
                suspended=suspended,
                sync_at=app.sync_requested_at,
            )
            if kind == "remove" and app.delivered_suspended:
                resume_first = objects[-1]
        return Job(
            kind,
            target,
            placement,
            source_kind,
            objects,
            revision,
            resumed,
            app.suspended,
            app.sync_requested_at,
            resume_first,
        )

    # -- the cluster ----------------------------------------------------------------
    @asynccontextmanager
    async def _cluster_slot(self, key: str) -> AsyncIterator[None]:
        """At most `per_cluster` steps on one cluster at once."""
        semaphore, users = self._clusters.get(key, (asyncio.Semaphore(self.per_cluster), 0))
        self._clusters[key] = (semaphore, users + 1)
        try:
            async with semaphore:
                yield
        finally:
            semaphore, users = self._clusters[key]
            if users <= 1:
                del self._clusters[key]
            else:
                self._clusters[key] = (semaphore, users - 1)

    async def _run(self, job: Job) -> Outcome:
        try:
            async with self._cluster_slot(job.target.cluster_key), asyncio.timeout(STEP_TIMEOUT_S):
                credentials = await self.reaches.credentials(job.target)
                async with connect(
                    self.services, credentials, timeout_s=STEP_TIMEOUT_S, on_call=self._count_call
                ) as kube:
                    if job.kind == "remove":
                        return Removing(
                            await writes.remove(
                                kube, job.placement, job.source_kind, job.resume_first
                            )
                        )
                    number = job.revision.number if job.revision is not None else 0
                    return Wrote(await writes.write(kube, job.objects, number, resumed=job.resumed))
        except ProviderError as failed:
            self.reaches.forget(job.target)
            return Unreachable(failed.reason) if unreachable(failed) else Refused(failed.reason)
        except TimeoutError:
            self.reaches.forget(job.target)
            return Unreachable(f"timeout: the target did not answer within {STEP_TIMEOUT_S:g}s")
        except Exception as error:  # ours, not the cluster's: logged, retried later
            self.stats.errors += 1
            log.warning("app %s %s: %s", job.placement.app_id, job.kind, describe(error))
            return Crashed()

    def _count_call(self) -> None:
        self.stats.api_calls += 1

    # -- writing the outcome ----------------------------------------------------------
    async def _persist(self, unit: Unit, app_id: str, job: Job, outcome: Outcome) -> bool:
        """One transaction, fenced on the lease; whether the app has more work now."""
        app = await app_rows.locked_if_claimed(unit.session, app_id, self.owner)
        if app is None:
            return False
        app.lease_until = app.delivery_due_at = unit.now + LEASE
        unit.session.add(app)
        if isinstance(outcome, Crashed):
            queue.reschedule(unit, app, self.settings.retry_interval_s)
            return False
        if job.kind == "remove":
            return await self._persist_removal(unit, app, outcome)
        if job.kind == "operate":
            if isinstance(outcome, Unreachable):
                queue.reschedule(unit, app, self.settings.retry_interval_s)
                return False
            if isinstance(outcome, Refused):
                log.warning("app %s: Flux refused a suspension or sync: %s", app.id, outcome.reason)
            app.delivered_suspended, app.delivered_sync_at = job.suspended, job.sync_at
            app.status_due_at = unit.now
            return True
        assert job.revision is not None
        revision = await unit.session.get(AppRevision, job.revision.id, populate_existing=True)
        if revision is None or revision.state != RevisionState.APPLYING:
            return True  # changed meanwhile: decide again
        if isinstance(outcome, Wrote):
            self.stats.applied += 1
            await queue.delivered(unit, app, revision, outcome.written, job.suspended)
            app.delivered_sync_at = job.sync_at
            return await self._more(unit, app)
        if isinstance(outcome, Refused):
            await queue.failed(unit, app, revision, outcome.reason)
            return await self._more(unit, app)
        assert isinstance(outcome, Unreachable)
        self.stats.tries += 1
        if await queue.spend_try(unit, app, outcome.reason):
            queue.reschedule(unit, app, self.settings.retry_interval_s)
            return False
        return True

    async def _more(self, unit: Unit, app: App) -> bool:
        """Whether the app has more to do now; if not, its lease ends here (a transaction
        saved for the common case: one revision, then nothing)."""
        if app.deleting or _operations_wanted(app) or await queue.pending(unit, app):
            return True
        queue.reschedule(unit, app, None)
        return False

    async def _persist_removal(self, unit: Unit, app: App, outcome: Outcome) -> bool:
        if isinstance(outcome, Removing) and outcome.blocker is None:
            await queue.removed(unit, app)
            return False
        if isinstance(outcome, Removing):
            await queue.say(unit, app, outcome.blocker or "")
            queue.reschedule(unit, app, self.settings.poll_s)
            return False
        reason = outcome.reason if isinstance(outcome, (Unreachable, Refused)) else "retrying"
        await queue.say(unit, app, f"cannot remove its Flux objects yet: {reason}; retrying")
        queue.reschedule(unit, app, self.settings.retry_interval_s)
        return False


def _operations_wanted(app: App) -> bool:
    """A suspension, resumption or sync the cluster has not been given yet."""
    return app.delivered_revision is not None and (
        app.suspended != app.delivered_suspended or app.sync_requested_at != app.delivered_sync_at
    )
