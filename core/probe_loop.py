"""The reachability probe loop (DESIGN.md "Probe semantics").

Two guarded tasks share the work. The claimer leases due spaces from the
database (`db.probes.claim_due`) whenever probe slots are free, so at most
`concurrency` probes are in flight and a slow cluster never holds up the
rest. The writer gathers finished probes and applies them in one transaction
per step: lastProbe, consecutiveFailures, the probes' status and a persisted
`SpaceStatusEvent` for every visible transition, published after commit.

Rules: a 200 with a parseable version is ACTIVE at once; each failure counts,
and the threshold-th in a row is INACTIVE; below it the status stays (damping).
A held space is probed like any other, but it shows INACTIVE, so its probes
change no visible status and emit no event. Deregistered spaces are never
claimed, and a result that lands after deregistration is dropped.

Both tasks sleep on interruptible events (stop, `Services.probe_wanted`) and
back off on errors; a failing database or cluster never ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.exc import StatementError

from core.clusters import credentials_for
from core.health import stored_status
from core.services import Services, utcnow
from core.spaces import record_transition
from db import probes as repo
from db.tables import Space
from providers.errors import ProviderError
from providers.probe import ProbeOutcome, Prober

log = logging.getLogger("spacedock.probes")

# Claim when at least this share of the slots is free, so claims come in batches.
CLAIM_BATCH_SHARE = 4
MAX_WRITE_BATCH = 1000
MAX_BACKOFF_S = 30.0
MIN_NAP_S = 0.01
# Spaces registered elsewhere (another replica, `spacedock space import-kubeconfig`) cannot
# wake this loop; it looks for due spaces at least this often, so their first probe still
# comes within seconds.
LOOK_FOR_DUE_S = 2.0
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class ProbeSettings:
    interval_s: float = 60.0
    timeout_s: float = 5.0
    failure_threshold: int = 3
    concurrency: int = 256
    jitter: float = 0.1  # the interval varies by this share either way

    def next_probe_in(self) -> timedelta:
        """The jittered interval, and never shorter than a probe may take, so that two
        probes of one space never overlap."""
        spread = random.uniform(-self.jitter, self.jitter)
        return timedelta(seconds=max(self.timeout_s, self.interval_s * (1 + spread)))

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=max(self.timeout_s, self.interval_s))


@dataclass
class ProbeStats:
    """Counters for /metrics."""

    probes: int = 0
    failures: int = 0
    transitions: int = 0
    errors: int = 0  # steps or probes that failed for a reason other than the cluster
    dropped: int = 0  # results lost to a failed write; those spaces are probed next interval
    in_flight: int = 0


@dataclass(frozen=True)
class _Result:
    space_id: str
    at: datetime
    outcome: ProbeOutcome


@dataclass
class _Verdict:
    """A space's probe state while a step's results are applied in order."""

    space: Space
    probe_status: str
    failures: int
    visible: str = field(init=False)

    def __post_init__(self) -> None:
        self.visible = stored_status(self.space)


def describe(error: BaseException) -> str:
    """An error for the log: driver messages carry no parameters, so no secrets."""
    if isinstance(error, StatementError) and error.orig is not None:
        return f"{type(error.orig).__name__}: {str(error.orig)[:200]}"
    return type(error).__name__


async def _finish(task: asyncio.Task[None]) -> None:
    """Lets a task end by itself within STOP_GRACE_S, then cancels it."""
    _, unfinished = await asyncio.wait([task], timeout=STOP_GRACE_S)
    for straggler in unfinished:
        straggler.cancel()
    await asyncio.gather(task, return_exceptions=True)


class ProbeLoop:
    def __init__(self, services: Services, prober: Prober, settings: ProbeSettings) -> None:
        self.services = services
        self.prober = prober
        self.settings = settings
        self.stats = ProbeStats()
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._results_ready = asyncio.Event()
        self._results: list[_Result] = []
        self._in_flight: set[asyncio.Task[None]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle --------------------------------------------------------
    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(
                self._guarded("claim", self._claim_step), name="spacedock-probe-claims"
            ),
            asyncio.create_task(
                self._guarded("write", self._write_step), name="spacedock-probe-results"
            ),
        ]
        log.info(
            "probe loop started: every %gs, timeout %gs, INACTIVE after %d failures, %d at once",
            self.settings.interval_s,
            self.settings.timeout_s,
            self.settings.failure_threshold,
            self.settings.concurrency,
        )

    async def stop(self) -> None:
        """Stops claiming, abandons the probes in flight (their leases lapse, so they run
        again next interval) and writes the results already in."""
        self._stopping.set()
        if self._tasks:
            claimer, writer = self._tasks
            await _finish(claimer)
            for probe in list(self._in_flight):
                probe.cancel()
            await asyncio.gather(*self._in_flight, return_exceptions=True)
            self._results_ready.set()
            await _finish(writer)
            if self._results:
                try:
                    await self._write(self._results)
                except Exception as error:  # shutting down; the next start probes again
                    log.warning("last probe results not written: %s", describe(error))
        await self.prober.close()

    async def _guarded(self, name: str, step: Callable[[], Awaitable[None]]) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                await step()
                failures = 0
            except Exception as error:  # the loop outlives any one failure
                failures += 1
                self.stats.errors += 1
                delay = min(MAX_BACKOFF_S, 0.5 * 2 ** (failures - 1))
                log.warning(
                    "probe %s step failed (%s); retrying in %.1fs", name, describe(error), delay
                )
                await self._nap(delay)

    async def _nap(self, seconds: float, *wake: asyncio.Event) -> None:
        """Sleeps up to `seconds`, sooner when stopping or when any `wake` event is set."""
        waiters = [asyncio.ensure_future(event.wait()) for event in (self._stopping, *wake)]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    # -- claiming and probing ----------------------------------------------
    async def _claim_step(self) -> None:
        settings = self.settings
        batch = max(1, settings.concurrency // CLAIM_BATCH_SHARE)
        while self._in_flight and settings.concurrency - len(self._in_flight) < batch:
            self._slot_freed.clear()
            await self._nap(settings.interval_s, self._slot_freed)
            if self._stopping.is_set():
                return
        free = settings.concurrency - len(self._in_flight)
        self.services.probe_wanted.clear()  # a wish made from here on wakes the nap below
        async with self.services.unit() as unit:
            spaces = await repo.claim_due(unit.session, unit.now, unit.now + settings.lease, free)
            await repo.schedule(
                unit.session, {space.id: unit.now + settings.next_probe_in() for space in spaces}
            )
        for space in spaces:
            self._spawn(space)
        if len(spaces) < free:
            await self._nap(await self._until_next_due(), self.services.probe_wanted)

    async def _until_next_due(self) -> float:
        async with self.services.read() as session:
            earliest = await repo.earliest_due(session)
        wait = LOOK_FOR_DUE_S if earliest is None else (earliest - utcnow()).total_seconds()
        return min(max(wait, MIN_NAP_S), self.settings.interval_s, LOOK_FOR_DUE_S)

    def _spawn(self, space: Space) -> None:
        if self._stopping.is_set():
            return
        probe = asyncio.create_task(self._probe(space), name=f"spacedock-probe-{space.id}")
        self._in_flight.add(probe)
        self.stats.in_flight = len(self._in_flight)
        probe.add_done_callback(self._probe_done)

    def _probe_done(self, probe: asyncio.Task[None]) -> None:
        self._in_flight.discard(probe)
        self.stats.in_flight = len(self._in_flight)
        self._slot_freed.set()

    async def _probe(self, space: Space) -> None:
        try:
            try:
                async with self.services.read() as session:
                    credentials = await credentials_for(session, self.services, space)
            except ProviderError as refused:  # e.g. cluster access revoked
                outcome = ProbeOutcome(False, None, error=refused.reason)
            else:
                outcome = await self.prober.probe(credentials)
        except Exception as error:  # not the cluster's fault: no result, probed again next time
            self.stats.errors += 1
            log.warning("probe of space %s had no result: %s", space.id, describe(error))
            return
        self.stats.probes += 1
        self.stats.failures += not outcome.ok
        self._results.append(_Result(space.id, utcnow(), outcome))
        self._results_ready.set()

    # -- writing results ----------------------------------------------------
    async def _write_step(self) -> None:
        await self._nap(self.settings.interval_s, self._results_ready)
        if not self._results:
            return
        # Let the probes finishing about now share this transaction.
        await self._nap(min(0.05, self.settings.interval_s / 10))
        self._results_ready.clear()
        batch, self._results = self._results[:MAX_WRITE_BATCH], self._results[MAX_WRITE_BATCH:]
        if self._results:
            self._results_ready.set()
        try:
            await self._write(batch)
        except BaseException:
            self.stats.dropped += len(batch)
            raise

    async def _write(self, batch: list[_Result]) -> None:
        threshold = self.settings.failure_threshold
        async with self.services.unit() as unit:
            rows = await repo.lock_for_results(unit.session, sorted({r.space_id for r in batch}))
            verdicts = {
                row.id: _Verdict(row, row.probe_status, row.consecutive_failures)
                for row in rows
                if row.deregistered_at is None
            }
            writes: dict[str, repo.ProbeWrite] = {}
            for result in batch:
                verdict = verdicts.get(result.space_id)
                if verdict is None:
                    continue  # deregistered while the probe was in flight
                outcome = result.outcome
                if outcome.ok:
                    verdict.failures = 0
                    verdict.probe_status = "ACTIVE"
                    reason = f"probe ok ({outcome.version})"
                else:
                    verdict.failures += 1
                    if verdict.failures >= threshold:
                        verdict.probe_status = "INACTIVE"
                    reason = f"{verdict.failures} consecutive failures: {outcome.error}"
                writes[result.space_id] = repo.ProbeWrite(
                    space_id=result.space_id,
                    probe_status=verdict.probe_status,
                    consecutive_failures=verdict.failures,
                    at=result.at,
                    ok=outcome.ok,
                    version=outcome.version,
                    latency_ms=outcome.latency_ms,
                    error=outcome.error,
                )
                visible = "INACTIVE" if verdict.space.held else verdict.probe_status
                if visible != verdict.visible:
                    await record_transition(unit, verdict.space, verdict.visible, visible, reason)
                    log.info(
                        "space %s: %s -> %s (%s)",
                        verdict.space.id,
                        verdict.visible,
                        visible,
                        reason,
                    )
                    verdict.visible = visible
                    self.stats.transitions += 1
            await repo.write_results(unit.session, list(writes.values()))
