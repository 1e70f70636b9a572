"""The App Advisor's loop: every READY CloudSpace analysed every SPACEDOCK_ADVISOR_INTERVAL_S,
and soon after it changes, on the loop kit (core.common.loops) and the claims of db.claims.

The analyzers run here, in spacedock, not as a pod in each vCluster: no tenant quota is
spent on them and there is one place to update them. A claimer enrols the CloudSpaces
that became READY (the advisor is part of what READY promises), leases due ones to this
process and spawns one run per CloudSpace, at most `concurrency` at once. A run reads
the vCluster through its admin access (outside any transaction), analyses the snapshot
in a worker thread, then merges the findings in one transaction fenced on its lease;
the changes go out to adviceChanged after commit. A failed read leaves the findings as
they are and is retried with backoff. Each claim also looks at the app and CloudSpace
events since its last look (two primary-key ranges, no LISTEN connection of its own): a
CloudSpace that became READY (again), or whose app changed, is due at once. Replicas share
the work through the leases.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from core.advisor import findings as advice
from core.advisor.analysis import analyze
from core.advisor.explainer import Explainer, describe_settings
from core.advisor.ownership import AppIndex, inventories_of
from core.advisor.reading import Reader
from core.advisor.settings import AdvisorSettings
from core.cloudspaces.reconciler import owner_name
from core.common.loops import (
    STOP_GRACE_S,
    Loop,
    LoopStats,
    describe,
    metric,
    seconds_until_due,
)
from core.common.services import Services
from db import advisor as advice_rows
from db import claims, owned
from db.cloudspace_tables import CloudSpace
from providers.errors import ProviderError, backoff_s
from providers.network import cluster_text

log = logging.getLogger("spacedock.advisor")

LOOK_FOR_DUE_S = 2.0
LOOK_WHEN_NONE_S = 10.0
MAX_RETRY_S = 300.0
JITTER = 0.1  # runs spread over ±10% of the interval


@dataclass
class AdvisorStats(LoopStats):
    loop: ClassVar[str] = "advisor"

    runs: int = metric("counter", "spacedock_advisor_runs_total", "CloudSpaces analysed.")
    failed_runs: int = metric(
        "counter",
        "spacedock_advisor_failed_runs_total",
        "Runs that could not read their vCluster (retried with backoff).",
    )
    objects: int = metric(
        "counter", "spacedock_advisor_objects_read_total", "Objects read from vClusters."
    )
    api_calls: int = metric(
        "counter", "spacedock_advisor_api_calls_total", "Calls to host and vCluster API servers."
    )
    changes: int = metric(
        "counter", "spacedock_advisor_changes_total", "Findings new, changed or resolved."
    )


class Advisor:
    def __init__(self, services: Services, settings: AdvisorSettings) -> None:
        self.services = services
        self.settings = settings
        self.owner = owner_name()
        self.stats = AdvisorStats()
        self.loop = Loop("advisor", self.stats, settings.concurrency)
        self.reader = Reader(services, settings, on_call=self._count_call)
        self.explainer = None if settings.model is None else Explainer(services, settings.model)
        self.wanted = asyncio.Event()
        # The app and CloudSpace events looked at so far (a change there runs its CloudSpace).
        self.seen: advice_rows.Seen | None = None
        # A run reads for at most read_timeout_s; its lease outlasts that.
        self.lease = timedelta(seconds=settings.read_timeout_s + 30)

    def start(self) -> None:
        self.loop.run("claims", self._claim_step)
        if self.explainer is not None:
            self.explainer.start()
        log.info(
            "App Advisor started as %s: READY CloudSpaces analysed every %gs%s",
            self.owner,
            self.settings.interval_s,
            ""
            if self.settings.model is None
            else f", explanations from {describe_settings(self.settings.model)}",
        )

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Claims nothing more, lets the runs in flight finish and merge within `grace_s`
        (the explanations too; a call cut short is asked again later), then hands every
        CloudSpace it holds back, due now, for another replica or a restart."""
        explaining = (
            self.explainer.stop(grace_s) if self.explainer is not None else asyncio.sleep(0)
        )
        await asyncio.gather(self.loop.stop(grace_s), explaining)
        try:
            async with self.services.unit() as unit:
                await advice_rows.release_all(unit.session, self.owner, unit.now)
        except Exception as error:  # shutting down: the leases run out by themselves
            log.warning("advisor leases not handed back: %s", describe(error))

    # -- claiming ---------------------------------------------------------------------
    async def _claim_step(self) -> None:
        await self.loop.wait_for_free(1, LOOK_FOR_DUE_S)
        free = self.loop.free
        if free <= 0:
            return
        self.wanted.clear()
        async with self.services.unit() as unit:
            if self.seen is None:  # from here on: what changed before the start is not news
                self.seen = await advice_rows.newest_events(unit.session)
            await advice_rows.enroll_ready(unit.session, unit.now)
            await advice_rows.run_changed_soon(unit.session, self.seen, unit.now)
            claimed_until = unit.now + self.lease
            rows = await claims.claim_due(
                unit.session,
                advice_rows.RUN_QUEUE,
                now=unit.now,
                due_again=claimed_until,
                limit=free,
                owner=self.owner,
                lease_until=claimed_until,
            )
        for row in rows:
            self.loop.spawn(row.cloud_space_id, self._run(row.cloud_space_id, claimed_until))
        if len(rows) < free:
            due_in = await seconds_until_due(
                self.services,
                advice_rows.earliest_due,
                longest_s=LOOK_FOR_DUE_S,
                when_none_s=LOOK_WHEN_NONE_S,
            )
            await self.loop.nap(due_in, self.wanted)

    # -- one run ------------------------------------------------------------------------
    async def _run(self, cloud_space_id: str, claimed_until: datetime) -> None:
        async with self.services.read() as session:
            row = await owned.by_id(session, CloudSpace, None, cloud_space_id)
            exempt = await advice_rows.exempt_rules(session, cloud_space_id)
            app_ids = frozenset() if row is None else await advice_rows.app_ids(session, row)
        if row is None:
            return  # deleted meanwhile: its schedule went with it
        try:
            snapshot = await self.reader.snapshot(row)
            apps = AppIndex(inventories_of(snapshot, app_ids))
            found = await asyncio.to_thread(analyze, snapshot, exempt, apps)
        except ProviderError as failed:
            self.stats.failed_runs += 1
            await self._persist_failure(row, claimed_until, failed.reason)
            return
        except Exception as error:  # ours, not the cluster's: logged, retried like a failure
            self.stats.errors += 1
            log.warning("advisor run of CloudSpace %s: %s", row.id, describe(error))
            await self._persist_failure(
                row, claimed_until, "internal error while analysing; retrying"
            )
            return
        async with self.services.unit() as unit:
            schedule = await advice_rows.locked_if_claimed(unit.session, row.id, self.owner)
            if schedule is None:
                return  # the lease passed to another replica, or the CloudSpace went
            changes = await advice.merge(
                unit, row, found, complete=snapshot.complete, explain=self.explainer is not None
            )
            wanted_again = schedule.next_run_at < claimed_until  # asked for while running
            schedule.next_run_at = unit.now if wanted_again else unit.now + self._interval()
            schedule.claimed_by, schedule.lease_until = None, None
            schedule.last_run_at, schedule.last_error, schedule.failures = unit.now, None, 0
            schedule.objects_read, schedule.truncated = snapshot.object_count, not snapshot.complete
            unit.session.add(schedule)
            await advice_rows.forget_changes(unit.session, advice.changes_kept_after(unit.now))
        self.stats.runs += 1
        self.stats.objects += snapshot.object_count
        self.stats.changes += len(changes)
        if changes and self.explainer is not None:
            self.explainer.wanted.set()

    async def _persist_failure(self, row: CloudSpace, claimed_until: datetime, reason: str) -> None:
        async with self.services.unit() as unit:
            schedule = await advice_rows.locked_if_claimed(unit.session, row.id, self.owner)
            if schedule is None:
                return
            schedule.failures += 1
            retry = min(self.settings.interval_s, backoff_s(schedule.failures, 5.0, MAX_RETRY_S))
            schedule.next_run_at = unit.now + timedelta(seconds=retry)
            schedule.claimed_by, schedule.lease_until = None, None
            schedule.last_error = cluster_text(reason, 300)
            unit.session.add(schedule)
        log.info("advisor run of CloudSpace %s failed: %s", row.id, reason)

    def _interval(self) -> timedelta:
        spread = 1 + random.uniform(-JITTER, JITTER)
        return timedelta(seconds=self.settings.interval_s * spread)

    def _count_call(self) -> None:
        self.stats.api_calls += 1
