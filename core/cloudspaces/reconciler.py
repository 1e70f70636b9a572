"""The CloudSpace reconciler: the second background loop beside the probe loop, built on
the same kit (`core.common.loops`) and the same claims (`db.claims`), with leases.

A claimer leases due CloudSpaces (`next_attempt_at` has come, no live lease) to this
process and spawns one worker per CloudSpace, at most `concurrency` at once. A worker
runs the CloudSpace's persisted step against the clusters (outside any transaction),
then persists the outcome in one transaction per step, fenced on its lease and on the
step it ran: a worker whose lease was taken over, or whose CloudSpace was resized or
deleted meanwhile, writes nothing. Events go out after commit. Replicas share the
work through the leases, and a crash resumes from the persisted step once the lease
runs out; every write being a server-side apply, a step that runs again creates
nothing twice.

Outcomes: a step done advances to the next (PENDING → PROVISIONING → INSTALLING_FLUX
→ READY, each phase change an event); a step waiting (a HelmRelease not Ready yet, a
namespace lingering) releases the CloudSpace for a short poll, its blocker in
`message`; a step failing makes it FAILED with the reason, retried from that step
with exponential backoff (while DELETING the phase stays and the reason is the
message). READY re-runs `refresh` every SPACEDOCK_RECONCILE_INTERVAL_S. The last
DELETING step removes the row and sends DELETED, once.

A worker owns its CloudSpace only while its lease (SPACEDOCK_RECONCILE_LEASE_S, 30 s)
holds, so no other replica runs a step at the same time: while a step runs, a heartbeat
renews the lease every third of it; a step, minting its credential included, is stopped
at five sixths of the lease (a temporary failure, retried), so it ends before a lease
written as it started can lapse even when no renewal gets through; and a renewal that
finds the lease taken (this process stalled past it, and another replica claimed the
CloudSpace) stops the step at once, and nothing of it is written.

A second task gives every org its default CloudSpace (core.cloudspaces.defaults).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import ClassVar

from core.cloudspaces import defaults
from core.cloudspaces import lifecycle as rules
from core.cloudspaces.steps import STEPS, Done, Failed, Outcome, Steps, Wait, persist
from core.common import metrics
from core.common.loops import (
    STOP_GRACE_S,
    Loop,
    LoopStats,
    describe,
    metric,
    seconds_until_due,
)
from core.common.services import Services, Unit
from core.spaces.clusters import credentials_for
from core.spaces.statuses import CloudSpacePhase
from db import claims
from db import cloudspaces as cloudspace_rows
from db.cloudspace_tables import CloudSpace
from db.tables import Space
from providers.errors import ProviderError, backoff_s, retry_after_s

log = logging.getLogger("spacedock.reconciler")

MAX_RETRY_S = 300.0
# A step may run for this share of the lease (the rest is the margin for the write after it).
STEP_SHARE_OF_LEASE = 5 / 6
# The heartbeat renews the lease this many times per lease.
RENEWALS_PER_LEASE = 3
# Orgs without their default CloudSpace are looked for this often.
DEFAULTS_EVERY_S = 5.0
# CloudSpaces made by another process (a replica; `spacedock token create` making an org's
# default one) cannot wake this loop: it looks for due work this often, and this rarely
# while there is no CloudSpace at all.
LOOK_FOR_DUE_S = 2.0
LOOK_WHEN_NONE_S = 10.0


@dataclass
class ReconcileStats(LoopStats):
    loop: ClassVar[str] = "reconcile"

    steps: int = metric("counter", "spacedock_reconcile_steps_total", "CloudSpace steps done.")
    waits: int = metric(
        "counter",
        "spacedock_reconcile_waits_total",
        "CloudSpace steps that found something not ready yet and polled again later.",
    )
    failures: int = metric(
        "counter",
        "spacedock_reconcile_failures_total",
        "CloudSpace steps that failed (FAILED, retried with backoff).",
    )
    api_calls: int = metric(
        "counter",
        "spacedock_reconcile_api_calls_total",
        "Calls the reconciler made to host and vCluster API servers.",
    )
    deleted: int = metric(
        "counter", "spacedock_reconcile_deleted_total", "CloudSpaces removed (DELETED sent)."
    )
    steps_too_long: int = metric(
        "counter",
        "spacedock_reconcile_steps_too_long_total",
        "CloudSpace steps stopped at their deadline, below the lease (retried).",
    )
    leases_lost: int = metric(
        "counter",
        "spacedock_reconcile_leases_lost_total",
        "CloudSpace steps stopped because another reconciler had taken the lease over.",
    )
    defaults_made: int = metric(
        "counter",
        "spacedock_default_cloudspaces_made_total",
        "Default CloudSpaces this server gave to orgs that had none.",
    )


class Then(StrEnum):
    """What the reconciler does once a step's outcome is written."""

    CONTINUE = "continue"  # the next step runs now
    RELEASE = "release"  # the CloudSpace waits (a poll, a retry, READY's interval)
    REMOVED = "removed"  # it is gone


def outcome_word(outcome: Outcome) -> str:
    """A step's outcome as spacedock_reconcile_step_duration_seconds labels it."""
    if isinstance(outcome, Failed):
        return "failed"
    return "wait" if isinstance(outcome, Wait) else "done"


def _write_usage(row: CloudSpace, outcome: Done | Wait) -> None:
    if outcome.usage is not None:
        row.usage_cpu = round(outcome.usage.cpu, 3)
        row.usage_memory_mib = round(outcome.usage.memory_mib)


def owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Reconciler:
    def __init__(self, services: Services, concurrency: int = 32) -> None:
        self.services = services
        self.settings = services.cloudspaces
        self.owner = owner_name()
        self.lease = timedelta(seconds=self.settings.reconcile_lease_s)
        self.step_deadline_s = self.settings.reconcile_lease_s * STEP_SHARE_OF_LEASE
        self.renew_every_s = self.settings.reconcile_lease_s / RENEWALS_PER_LEASE
        self.stats = ReconcileStats()
        self.loop = Loop("reconcile", self.stats, concurrency)
        self.steps = Steps(services, on_call=self._count_call)

    @property
    def poll_s(self) -> float:
        """How soon a waiting step looks again."""
        return min(2.0, self.settings.reconcile_interval_s)

    def retry_in(self, failures: int, at_least_s: float | None = None) -> float:
        """After the n-th failure in a row: 5 s (or the reconcile interval, if shorter),
        doubling, at most MAX_RETRY_S; never sooner than the failure asks."""
        first = min(5.0, self.settings.reconcile_interval_s)
        return max(backoff_s(failures, first, MAX_RETRY_S), at_least_s or 0.0)

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> None:
        self.loop.run("claims", self._claim_step)
        self.loop.run("default-cloudspaces", self._defaults_step)
        log.info(
            "CloudSpace reconciler started as %s: READY re-checked every %gs, leases of %gs",
            self.owner,
            self.settings.reconcile_interval_s,
            self.settings.reconcile_lease_s,
        )

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stops claiming, lets each step in flight finish and persist within `grace_s`
        (no further step is started), abandons the rest, then hands every CloudSpace it
        holds back, so its persisted step runs again at once, here after a restart or on
        another replica. (After a crash, the leases run out instead.)"""
        await self.loop.stop(grace_s)
        try:
            async with self.services.unit() as unit:
                released = await cloudspace_rows.release_all(unit.session, self.owner, unit.now)
        except Exception as error:  # shutting down: the leases run out by themselves
            log.warning("CloudSpace leases not handed back: %s", describe(error))
            return
        if released:
            log.info("handed back %d CloudSpace leases", released)

    # -- claiming ---------------------------------------------------------------
    async def _claim_step(self) -> None:
        await self.loop.wait_for_free(1, LOOK_FOR_DUE_S)
        free = self.loop.free
        if free <= 0:
            return
        self.services.reconcile_wanted.clear()  # a wish from here on wakes the nap below
        async with self.services.unit() as unit:
            rows = await claims.claim_due(
                unit.session,
                cloudspace_rows.RECONCILE_QUEUE,
                now=unit.now,
                due_again=unit.now + self.lease,
                limit=free,
                owner=self.owner,
                lease_until=unit.now + self.lease,
            )
        for row in rows:
            self.loop.spawn(row.id, self._work(row))
        if len(rows) < free:
            due_in = await seconds_until_due(
                self.services,
                cloudspace_rows.earliest_due,
                longest_s=LOOK_FOR_DUE_S,
                when_none_s=LOOK_WHEN_NONE_S,  # no CloudSpace at all: looked at rarely
            )
            await self.loop.nap(due_in, self.services.reconcile_wanted)

    async def _defaults_step(self) -> None:
        made = await defaults.ensure_all(self.services)
        self.stats.defaults_made += made
        await self.loop.nap(0 if made >= defaults.BATCH else DEFAULTS_EVERY_S)

    # -- one CloudSpace -----------------------------------------------------------
    async def _work(self, row: CloudSpace | None) -> None:
        """Runs the CloudSpace's steps while they are done at once; stops at a wait, a
        failure, READY's refresh, the end of deletion, or a lost lease. The host space is
        read once for the whole run (it cannot be deregistered while it hosts this)."""
        host: Space | None = None
        cloud_space_id = None if row is None else row.id
        try:
            while row is not None and not self.loop.stopped:
                if host is None:
                    async with self.services.read() as session:
                        host = await cloudspace_rows.host_space(session, row.host_space_id)
                step = row.step
                started = time.perf_counter()
                outcome = await self._run_leased(row, host)
                if outcome is None:
                    return  # the lease passed to another reconciler, which runs it now
                metrics.observe_reconcile_step(
                    time.perf_counter() - started, step, outcome_word(outcome)
                )
                row = await self._persist(row.id, step, outcome)
        finally:
            if cloud_space_id is not None:
                self.steps.forget(cloud_space_id)

    async def _run_leased(self, row: CloudSpace, host: Space | None) -> Outcome | None:
        """The step's outcome, run while a heartbeat renews the lease; None when a renewal
        found the lease taken over: the step was stopped then, and writes nothing."""
        step = asyncio.create_task(self._run(row, host), name=f"spacedock-step-{row.id}")
        try:
            while True:
                done, _ = await asyncio.wait({step}, timeout=self.renew_every_s)
                if done:
                    return step.result()
                if not await self._renew(row.id):
                    self.stats.leases_lost += 1
                    log.warning(
                        "CloudSpace %s step %s stopped: its lease was taken over", row.id, row.step
                    )
                    return None
        finally:
            if not step.done():
                step.cancel()
                await asyncio.gather(step, return_exceptions=True)

    async def _renew(self, cloud_space_id: str) -> bool:
        """Extends this worker's lease; False when it no longer holds it. A renewal that
        cannot be written (the database away) counts as held: the step's deadline, below
        the lease written as it started, still ends it in time."""
        try:
            async with self.services.unit() as unit:
                return await cloudspace_rows.renew_lease(
                    unit.session, cloud_space_id, self.owner, unit.now + self.lease
                )
        except Exception as error:
            log.warning("CloudSpace %s lease not renewed: %s", cloud_space_id, describe(error))
            return True

    async def _run(self, row: CloudSpace, host: Space | None) -> Outcome:
        """The step, its credential's mint included, within the step deadline."""
        try:
            async with asyncio.timeout(self.step_deadline_s):
                return await self._step(row, host)
        except TimeoutError:
            self.stats.steps_too_long += 1
            return Failed(
                f"timeout: step {row.step} took longer than {self.step_deadline_s:g}s "
                "(5/6 of SPACEDOCK_RECONCILE_LEASE_S); retrying"
            )

    async def _step(self, row: CloudSpace, host: Space | None) -> Outcome:
        try:
            if host is None:
                return Failed("the host space no longer exists")
            credentials = await credentials_for(self.services, host)
            return await STEPS[row.step](self.steps, row, credentials)
        except ProviderError as failed:
            return Failed(failed.reason, retry_after_s(failed))
        except ValueError as bad:  # e.g. Flux manifests that are not Kubernetes YAML
            return Failed(str(bad))
        except Exception as error:  # ours, not the cluster's: logged, retried like a failure
            self.stats.errors += 1
            log.warning("CloudSpace %s step %s: %s", row.id, row.step, describe(error))
            return Failed(f"internal error in step {row.step}; retrying")

    async def _persist(self, cloud_space_id: str, step: str, outcome: Outcome) -> CloudSpace | None:
        """One transaction: the outcome of `step`, if this worker still holds the lease and
        the CloudSpace is still at that step. The row when its next step runs now."""
        async with self.services.unit() as unit:
            row = await cloudspace_rows.locked_if_claimed(unit.session, cloud_space_id, self.owner)
            if row is None:
                return None  # deleted, or the lease passed to another reconciler
            if row.step != step:  # changed under us (deleteCloudSpace): its new step is due
                row.claimed_by, row.lease_until, row.next_attempt_at = None, None, unit.now
                unit.session.add(row)
                return None
            await persist(unit, row, outcome)
            after = await self._apply(unit, row, outcome)
            if after is Then.REMOVED:
                return None
            if after is Then.CONTINUE:
                row.lease_until = row.next_attempt_at = unit.now + self.lease
            else:
                row.claimed_by, row.lease_until = None, None
            unit.session.add(row)
        return row if after is Then.CONTINUE else None

    async def _apply(self, unit: Unit, row: CloudSpace, outcome: Outcome) -> Then:
        """Writes the outcome on the locked row, and says what the reconciler does next."""
        before = (row.phase, row.message)
        after = Then.RELEASE
        if isinstance(outcome, Failed):
            self.stats.failures += 1
            row.failures += 1
            if row.phase == CloudSpacePhase.DELETING:
                row.message = f"retrying: {outcome.reason}"
            else:
                row.phase, row.message = CloudSpacePhase.FAILED, outcome.reason
            row.next_attempt_at = unit.now + timedelta(
                seconds=self.retry_in(row.failures, outcome.retry_after_s)
            )
            log.info("CloudSpace %s step %s failed: %s", row.id, row.step, outcome.reason)
        elif isinstance(outcome, Wait):
            self.stats.waits += 1
            row.phase, row.message = rules.PHASE_OF[row.step], outcome.message
            row.next_attempt_at = unit.now + timedelta(seconds=self.poll_s)
            _write_usage(row, outcome)  # READY while a vCluster added later comes up
        else:
            self.stats.steps += 1
            row.failures = 0
            _write_usage(row, outcome)
            following = rules.next_step(row.step)
            if row.step == rules.Step.DELETE_KUBECONFIG:
                await self._remove(unit, row)
                return Then.REMOVED
            if following is None:  # READY's refresh: again after the interval
                row.phase, row.message = CloudSpacePhase.READY, None
                interval = timedelta(seconds=self.settings.reconcile_interval_s)
                row.next_attempt_at = unit.now + interval
            else:
                row.step = following
                # READY is announced once its first refresh has placed every quota.
                if following != rules.Step.REFRESH:
                    row.phase = rules.PHASE_OF[following]
                row.message = None
                after = Then.CONTINUE
        if (row.phase, row.message) != before:
            await rules.record_phase(unit, row, before[0], row.phase, row.message)
        return after

    async def _remove(self, unit: Unit, row: CloudSpace) -> None:
        """The last step: the row goes, and DELETED is sent once."""
        self.stats.deleted += 1
        await rules.record_phase(unit, row, row.phase, CloudSpacePhase.DELETED, None)
        unit.session.expunge(row)
        await cloudspace_rows.delete(unit.session, row.id)
        log.info("CloudSpace %s deleted", row.id)

    def _count_call(self) -> None:
        self.stats.api_calls += 1
