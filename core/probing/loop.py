"""The reachability probe loop: claim due spaces → probe them → write the results.

The machinery (guarded tasks, naps, bounded spawning, ordered stop, stats) is the loop
kit's (`core.common.loops`); the status rules are `core.spaces.status_rules`. What is left here:

- the claimer takes due spaces (`db.probes.claim`) whenever enough probe slots are
  free, so at most `concurrency` probes are in flight and a slow cluster never holds up
  the rest; the claim itself moves each space's next probe one jittered interval on;
- each probe looks up its credential (a short read for cloud grants, then a mint with no
  database connection held) and calls the cluster;
- the writer applies finished probes in one transaction per step: lastProbe,
  consecutiveFailures, the probes' verdict and a persisted `SpaceStatusEvent` for every
  visible transition, published after commit. A held space is probed like any other,
  but it shows INACTIVE, so its probes cause no visible transition. Deregistered
  spaces are never claimed, and a result that lands after deregistration is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from core.common import metrics
from core.common.events import SPACE_PROBED
from core.common.loops import (
    STOP_GRACE_S,
    Loop,
    LoopStats,
    describe,
    metric,
    seconds_until_due,
)
from core.common.services import Services, utcnow
from core.spaces.clusters import credentials_for
from core.spaces.health import probe_state
from core.spaces.lifecycle import Transition, record_transitions
from core.spaces.reasons import StatusReasonCode, failure_code
from core.spaces.status_rules import ProbeResult, ProbeState, after_probe, visible_status
from db import probes as probe_rows
from db.outages import is_unavailable
from providers.errors import ProviderError, for_exception
from providers.probe import ProbeOutcome, Prober

log = logging.getLogger("spacedock.probes")

# Claim when at least this share of the slots is free, so claims come in batches.
CLAIM_BATCH_SHARE = 4
MAX_WRITE_BATCH = 1000
# Results waiting for a database that does not answer, kept to be written when it does.
RESULTS_KEPT = 20 * MAX_WRITE_BATCH
# Spaces registered elsewhere (another replica, `spacedock space import-kubeconfig`) cannot
# wake this loop; it looks for due spaces at least this often, so their first probe still
# comes within seconds.
LOOK_FOR_DUE_S = 2.0


@dataclass(frozen=True)
class ProbeSettings:
    interval_s: float = 60.0
    timeout_s: float = 5.0
    failure_threshold: int = 3
    concurrency: int = 256
    jitter: float = 0.1  # the interval varies by this share either way

    def next_probe_in(self) -> timedelta:
        """The jittered interval, and never shorter than a probe may take (its credential
        lookup and call share one `timeout_s`), so two probes of one space never overlap."""
        spread = random.uniform(-self.jitter, self.jitter)
        return timedelta(seconds=max(self.timeout_s, self.interval_s * (1 + spread)))


@dataclass
class ProbeStats(LoopStats):
    loop: ClassVar[str] = "probe"

    probes: int = metric("counter", "spacedock_probes_total", "Probes that gave a result.")
    failures: int = metric("counter", "spacedock_probe_failures_total", "Probes that failed.")
    transitions: int = metric(
        "counter", "spacedock_probe_transitions_total", "Status transitions the probes caused."
    )


@dataclass(frozen=True)
class _Result:
    space_id: str
    at: datetime
    outcome: ProbeOutcome
    # Whether the failure came from getting the credential, not from the cluster.
    minting: bool = False

    @property
    def error_code(self) -> StatusReasonCode | None:
        if self.outcome.error is None:
            return None
        return failure_code(self.outcome.error, minting=self.minting)

    @property
    def outcome_label(self) -> str:
        """The probe's reason code, PROBE_OK or the failure's (spacedock_probe_duration_seconds)."""
        code = self.error_code
        return (StatusReasonCode.PROBE_OK if self.outcome.ok or code is None else code).value


def probed_payload(space: probe_rows.ResultLock, write: probe_rows.ProbeWrite) -> dict[str, object]:
    """A probe result as spaceProbed subscribers receive it."""
    return {
        "org_id": space.org_id,
        "space_id": space.id,
        "at": write.at.isoformat(),
        "ok": write.ok,
        "version": write.version,
        "latency_ms": write.latency_ms,
        "error": write.error,
        "error_code": write.error_code,
        "failures": write.consecutive_failures,
    }


class ProbeLoop:
    def __init__(self, services: Services, prober: Prober, settings: ProbeSettings) -> None:
        self.services = services
        self.prober = prober
        self.settings = settings
        self.stats = ProbeStats()
        self.loop = Loop("probe", self.stats, settings.concurrency)
        self._results_ready = asyncio.Event()
        self._results_written = asyncio.Event()
        self._results: list[_Result] = []

    def start(self) -> None:
        self.loop.run("claims", self._claim_step)
        self.loop.run("results", self._write_step)
        log.info(
            "probe loop started: every %gs, timeout %gs, INACTIVE after %d failures, %d at once",
            self.settings.interval_s,
            self.settings.timeout_s,
            self.settings.failure_threshold,
            self.settings.concurrency,
        )

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stops claiming, lets the probes in flight finish within `grace_s`, writes the
        results in, and hands back the spaces whose probes did not finish: due again now,
        for whichever replica claims next (else only when their claim's time came)."""
        abandoned = await self.loop.stop(grace_s)
        if abandoned:
            try:
                async with self.services.unit() as unit:
                    await probe_rows.schedule(unit.session, dict.fromkeys(abandoned, unit.now))
                log.info("handed back %d unfinished probes", len(abandoned))
            except Exception as error:  # shutting down: they fall due when their claim said
                log.warning("unfinished probes not handed back: %s", describe(error))
        if self._results:
            batch, self._results = self._results, []
            try:
                await self._write(batch)
            except Exception as error:  # shutting down; the next start probes again
                self.stats.dropped += len(batch)
                log.warning("last probe results not written: %s", describe(error))
        await self.prober.close()

    # -- claiming and probing ----------------------------------------------
    async def _claim_step(self) -> None:
        settings = self.settings
        await self.loop.wait_for_free(
            settings.concurrency // CLAIM_BATCH_SHARE, settings.interval_s
        )
        # Results not yet written hold claims back: probing more would only pile them up in
        # memory (issue 19: a replica whose writes fell behind held 17,000 and counting),
        # and spaces left unclaimed fall to whichever replica keeps up.
        while len(self._results) >= MAX_WRITE_BATCH and not self.loop.stopped:
            self._results_written.clear()
            await self.loop.nap(settings.interval_s, self._results_written)
        if self.loop.stopped:
            return
        free = self.loop.free
        self.services.probe_wanted.clear()  # a wish made from here on wakes the nap below
        async with self.services.unit() as unit:
            spaces = await probe_rows.claim(
                unit.session,
                now=unit.now,
                due_again=unit.now + settings.next_probe_in(),
                limit=free,
            )
            # Each space's own jitter, so that spaces claimed together drift apart; counted
            # from now, after the claim, which a busy database may have kept waiting.
            claimed_at = utcnow()
            await probe_rows.schedule(
                unit.session, {space.id: claimed_at + settings.next_probe_in() for space in spaces}
            )
        for space in spaces:
            self.loop.spawn(space.id, self._probe(space))
        if len(spaces) < free:
            longest_s = min(self.settings.interval_s, LOOK_FOR_DUE_S)
            due_in = await seconds_until_due(
                self.services, probe_rows.earliest_due, longest_s=longest_s, when_none_s=longest_s
            )
            await self.loop.nap(due_in, self.services.probe_wanted)

    async def _probe(self, space: probe_rows.ProbeTarget) -> None:
        """One probe; an error of our own (not the cluster's) gives no result, and the
        space is probed again when it next falls due. The credential lookup and the call
        share one deadline, so a probe never outlasts `timeout_s`."""
        credentials = None
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                credentials = await credentials_for(self.services, space)
                outcome = await self.prober.probe(credentials)
        except ProviderError as refused:  # e.g. cluster access revoked
            outcome = ProbeOutcome(False, None, error=refused.reason)
        except TimeoutError as late:
            if credentials is None:
                why = f"timeout: no cluster credential within {self.settings.timeout_s:g}s"
            else:
                why = for_exception(late, self.settings.timeout_s).reason
            waited_ms = round((time.perf_counter() - started) * 1000, 3)
            outcome = ProbeOutcome(False, waited_ms, error=why)
        self.stats.probes += 1
        self.stats.failures += not outcome.ok
        minting = credentials is None  # the failure came from getting the credential
        result = _Result(space.id, utcnow(), outcome, minting)
        metrics.observe_probe(time.perf_counter() - started, result.outcome_label)
        self._results.append(result)
        self._results_ready.set()

    # -- writing results ----------------------------------------------------
    async def _write_step(self) -> None:
        await self.loop.nap(self.settings.interval_s, self._results_ready)
        if not self._results:
            return
        # Let the probes finishing about now share this transaction.
        await self.loop.nap(min(0.05, self.settings.interval_s / 10))
        self._results_ready.clear()
        batch, self._results = self._results[:MAX_WRITE_BATCH], self._results[MAX_WRITE_BATCH:]
        if self._results:
            self._results_ready.set()
        try:
            await self._write(batch)
            self._results_written.set()
        except BaseException as error:
            # The database away (or the loop stopping): the results go back to the front,
            # written when it answers again (or by stop()), not lost an interval's worth
            # of probes (issue 19). Anything else is a bug with these results: dropped.
            if isinstance(error, asyncio.CancelledError) or is_unavailable(error):
                self._keep(batch)
            else:
                self.stats.dropped += len(batch)
            raise

    def _keep(self, batch: list[_Result]) -> None:
        """Puts unwritten results back before newer ones, at most RESULTS_KEPT in all
        (the oldest past that are dropped: newer results of those spaces follow)."""
        self._results[:0] = batch
        if len(self._results) > RESULTS_KEPT:
            over = len(self._results) - RESULTS_KEPT
            del self._results[:over]
            self.stats.dropped += over
        self._results_ready.set()

    async def _write(self, batch: list[_Result]) -> None:
        threshold = self.settings.failure_threshold
        async with self.services.unit() as unit:
            rows = await probe_rows.lock_for_results(
                unit.session, sorted({result.space_id for result in batch})
            )
            live = {row.id: row for row in rows}
            states: dict[str, ProbeState] = {row.id: probe_state(row) for row in live.values()}
            writes: dict[str, probe_rows.ProbeWrite] = {}
            transitions: list[Transition] = []
            for result in batch:
                space = live.get(result.space_id)
                if space is None:  # deregistered while the probe was in flight
                    self.services.credentials.forget(result.space_id)
                    continue
                outcome = result.outcome
                before = states[space.id]
                error_code = result.error_code
                if error_code == StatusReasonCode.UNAUTHORIZED:
                    # A credential the cluster refuses is not offered again: the next
                    # probe mints afresh (and says so when it cannot).
                    self.services.credentials.forget(space.id)
                after, reason = after_probe(
                    before,
                    ProbeResult(outcome.ok, outcome.version, outcome.error, error_code),
                    threshold,
                )
                states[space.id] = after
                writes[space.id] = probe_rows.ProbeWrite(
                    space_id=space.id,
                    probe_status=after.status,
                    consecutive_failures=after.failures,
                    at=result.at,
                    ok=outcome.ok,
                    version=outcome.version,
                    latency_ms=outcome.latency_ms,
                    error=outcome.error,
                    error_code=error_code,
                )
                unit.publish(SPACE_PROBED, probed_payload(space, writes[space.id]))
                shown_before = visible_status(before, held=space.held)[0]
                shown_after = visible_status(after, held=space.held)[0]
                if shown_after != shown_before:
                    transitions.append(Transition(space, shown_before, shown_after, reason))
                    log.info(
                        "space %s: %s -> %s (%s)", space.id, shown_before, shown_after, reason.words
                    )
                    self.stats.transitions += 1
            await record_transitions(unit, transitions)  # one statement for a whole storm
            await probe_rows.write_results(unit.session, list(writes.values()))
