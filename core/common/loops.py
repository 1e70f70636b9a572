"""The loop kit: the machinery every background loop shares, kept apart from what a loop
does (kopf keeps the same helpers apart from operator logic).

A loop such as the probe loop or the CloudSpace reconciler is claim → work → write.
`Loop` gives it the rest:

- named, guarded tasks (`run`) that repeat a step until the loop stops, outlive any
  one failure, count it and back off exponentially while failures repeat;
- naps (`nap`) that end early when the loop stops or when a wake event is set;
- bounded spawning (`spawn`, `free`, `wait_for_free`): at most `concurrency` pieces of
  work in flight, so one slow target never holds up the rest and memory stays bounded;
- a stop (`stop`) that claims nothing more, gives the tasks and the work in flight a
  grace period to finish, then cancels the rest and names it, so the loop can hand it
  back to whoever claims next (a replica, or this process after a restart);
- counters (`LoopStats`, subclassed per loop) that reach /metrics through
  `core.common.metrics.MetricSource`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncSession

from core.common.metrics import MetricKind, Sample
from core.common.services import Services, utcnow
from providers.errors import backoff_s, retry_after_s

log = logging.getLogger("spacedock.loops")

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STOP_GRACE_S = 5.0
# The shortest nap before looking for due work again: a due time just past is not a spin.
MIN_NAP_S = 0.01


def retry_delay_s(error: BaseException, failures_in_a_row: int) -> float:
    """How long a step waits after its n-th failure in a row: 0.5 s, doubling, at most 30 s,
    or longer when the error says to (a throttled cloud's TemporaryError)."""
    delay = backoff_s(failures_in_a_row, FIRST_BACKOFF_S, MAX_BACKOFF_S)
    return max(delay, retry_after_s(error) or 0.0)


async def seconds_until_due(
    services: Services,
    earliest_due: Callable[[AsyncSession], Awaitable[datetime | None]],
    *,
    longest_s: float,
    when_none_s: float,
) -> float:
    """How long a loop naps before it looks for due work again: until the earliest due
    time `earliest_due` reads, at least MIN_NAP_S and at most `longest_s` (work may come
    due sooner than any row says); `when_none_s` when there is no row at all."""
    async with services.read() as session:
        earliest = await earliest_due(session)
    if earliest is None:
        return when_none_s
    return min(max((earliest - utcnow()).total_seconds(), MIN_NAP_S), longest_s)


def describe(error: BaseException) -> str:
    """An error for the log: driver messages carry no parameters, so no secrets."""
    if isinstance(error, StatementError) and error.orig is not None:
        return f"{type(error.orig).__name__}: {str(error.orig)[:200]}"
    return type(error).__name__


def metric(kind: MetricKind, name: str, help_text: str) -> Any:
    """A LoopStats field exported as a metric; `{loop}` in the name is the loop's name."""
    return dataclasses.field(default=0, metadata={"metric": (kind, name, help_text)})


@dataclass
class LoopStats:
    """Counters every loop keeps; a loop's own stats subclass this and add fields made
    with `metric(...)`. `samples()` makes them a `core.common.metrics.MetricSource`."""

    loop: ClassVar[str] = "loop"

    errors: int = metric(
        "counter",
        "spacedock_{loop}_loop_errors_total",
        "Steps or pieces of work that failed for a reason of our own (not the target's).",
    )
    dropped: int = metric(
        "counter",
        "spacedock_{loop}_loop_dropped_total",
        "Results lost to a failed write; their work is done again when it next falls due.",
    )
    in_flight: int = metric("gauge", "spacedock_{loop}_loop_in_flight", "Work running now.")

    def samples(self) -> list[Sample]:
        found: list[Sample] = []
        for stat in dataclasses.fields(self):
            kind, name, help_text = stat.metadata["metric"]
            found.append(
                Sample(name.format(loop=self.loop), kind, help_text, getattr(self, stat.name))
            )
        return found


class Loop:
    """The tasks, naps, work slots and stop of one background loop (see the module doc)."""

    def __init__(self, name: str, stats: LoopStats, concurrency: int = 1) -> None:
        self.name = name
        self.stats = stats
        self.concurrency = max(1, concurrency)
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._in_flight: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()

    @property
    def stopped(self) -> bool:
        return self.stopping.is_set()

    # -- guarded tasks ------------------------------------------------------
    def run(self, name: str, step: Callable[[], Awaitable[None]]) -> None:
        """Repeats `step` in a task named `spacedock-<loop>-<name>` until the loop stops.
        A failing step is logged and counted, and retried after `retry_delay_s`."""
        task = asyncio.create_task(self._guarded(name, step), name=f"spacedock-{self.name}-{name}")
        self._tasks.append(task)

    async def _guarded(self, name: str, step: Callable[[], Awaitable[None]]) -> None:
        failures_in_a_row = 0
        while not self.stopped:
            try:
                await step()
                failures_in_a_row = 0
            except Exception as error:  # the loop outlives any one failure
                failures_in_a_row += 1
                self.stats.errors += 1
                delay = retry_delay_s(error, failures_in_a_row)
                log.warning(
                    "%s %s step failed (%s); retrying in %.1fs",
                    self.name,
                    name,
                    describe(error),
                    delay,
                )
                await self.nap(delay)

    async def nap(self, seconds: float, *wake: asyncio.Event) -> None:
        """Sleeps up to `seconds`, sooner when the loop stops or any `wake` event is set."""
        waiters = [asyncio.ensure_future(event.wait()) for event in (self.stopping, *wake)]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    # -- bounded work ---------------------------------------------------------
    @property
    def free(self) -> int:
        """Work slots free now."""
        return self.concurrency - len(self._in_flight)

    async def wait_for_free(self, at_least: int, recheck_s: float) -> None:
        """Returns once `at_least` slots are free (or all are), or the loop stops."""
        at_least = min(at_least, self.concurrency)
        while self.free < at_least and not self.stopped:
            self._slot_freed.clear()
            await self.nap(recheck_s, self._slot_freed)

    def spawn(self, name: str, work: Coroutine[Any, Any, None]) -> bool:
        """Runs `work` in a free slot. When stopping or full, `work` is closed unrun and
        the answer is False; callers claim no more than `free`, so that means stopping."""
        if self.stopped or self.free <= 0:
            work.close()
            return False
        task = asyncio.create_task(work, name=f"spacedock-{self.name}-{name}")
        self._in_flight.add(task)
        self.stats.in_flight = len(self._in_flight)
        task.add_done_callback(self._work_done)
        return True

    def _work_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self.stats.in_flight = len(self._in_flight)
        self._slot_freed.set()
        if not task.cancelled() and (error := task.exception()) is not None:
            self.stats.errors += 1
            log.warning("%s %s failed: %s", self.name, task.get_name(), describe(error))

    # -- stop -----------------------------------------------------------------
    async def stop(self, grace_s: float = STOP_GRACE_S) -> list[str]:
        """Stops: nothing new is claimed or spawned, the named tasks and the work in flight
        get `grace_s` in all to finish what they are doing, and whatever is still running
        then is cancelled. The names of the work cancelled unfinished (its loop hands it
        back); a second stop finds nothing left and returns []."""
        self.stopping.set()
        running = [*self._tasks, *self._in_flight]
        if running:
            await asyncio.wait(running, timeout=grace_s)
        abandoned = [work.get_name() for work in self._in_flight if not work.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        self._tasks.clear()
        prefix = f"spacedock-{self.name}-"
        return [name.removeprefix(prefix) for name in abandoned]
