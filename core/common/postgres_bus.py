"""The event bus across replicas: Postgres NOTIFY and LISTEN, with the replay that NOTIFY
lacks (issue 19). Split from core.common.events, which holds the bus every process has."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from core.common.events import CATCH_UP_REASON, Deliver, InProcessBus, Payload
from db.outages import is_unavailable

log = logging.getLogger(__name__)


class Notifier(Protocol):
    """Cross-process delivery of short texts per channel (Postgres NOTIFY and LISTEN).

    `listen` returns once notifications on the channel are being received; each
    one then reaches the `deliver` callback the notifier was built with, in this
    process, whichever process sent it. Channels are listened to while anyone holds
    them, counted, so the notifier may hold a connection only while it is needed.
    When notifications may have been missed (the connection was lost, or a NOTIFY of
    this process failed) the notifier calls `lost`; once it listens again, `resumed`.
    """

    async def notify(self, channel: str, text: str) -> None: ...

    async def notify_all(self, notifications: Sequence[tuple[str, str]]) -> None:
        """Several (channel, text) notifications, in order, in one statement."""
        ...

    async def listen(self, channel: str) -> None: ...

    async def unlisten(self, channel: str) -> None: ...


@dataclass(frozen=True)
class Hearing:
    """What a notifier calls back: every notification, and the gaps in hearing them."""

    deliver: Deliver
    lost: Callable[[], None]
    resumed: Callable[[], None]


class Trimmed(Exception):
    """Events after the asked id may have been dropped from the history: no replay."""


class EventLog(Protocol):
    """The persisted history of the channels that have one (core.common.event_replay)."""

    channels: frozenset[str]

    async def latest(self, channel: str) -> int:
        """The newest event id on `channel` (0 for none)."""
        ...

    async def after(self, channel: str, after: int, limit: int) -> Sequence[Payload]:
        """Announcements after `after`, oldest first, at most `limit`."""
        ...

    async def check_kept(self, channel: str, after: int) -> None:
        """Raises Trimmed when some events after `after` may be gone from the history."""
        ...


# Ids fanned out that are remembered per channel, to skip what arrives twice (a replayed
# event whose NOTIFY comes too).
RECENT_IDS_KEPT = 8192
# Ids are taken when a transaction inserts, and it may commit after a later id: a replay
# starts this many ids before the newest fanned out, skipping those already fanned out.
REPLAY_OVERLAP_IDS = 1000
REPLAY_PAGE = 1000
# More than this missed is past replaying: subscribers are told to catch up themselves.
REPLAY_MAX_EVENTS = 20_000
REPLAY_RETRY_MAX_DELAY_S = 5.0
# A replay that cannot reach the database for this long gives up (what arrives meanwhile
# is held in memory).
REPLAY_GIVE_UP_S = 300.0


@dataclass
class _Heard:
    """One replayable channel's fan-out so far."""

    floor: int  # events up to here are before this replica listened, or fanned out
    newest: int = 0  # the newest id fanned out
    recent: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_IDS_KEPT))
    recent_set: set[int] = field(default_factory=set)

    def first_time(self, event_id: int) -> bool:
        """Records `event_id` as fanned out; False when it already was."""
        if event_id in self.recent_set:
            return False
        if len(self.recent) == self.recent.maxlen:
            oldest = self.recent[0]
            self.recent_set.discard(oldest)
            self.floor = max(self.floor, oldest)
        self.recent.append(event_id)
        self.recent_set.add(event_id)
        self.newest = max(self.newest, event_id)
        return True

    def replay_from(self) -> int:
        return max(self.floor, self.newest - REPLAY_OVERLAP_IDS)


class PostgresBus:
    """Every replica's subscribers get every replica's events: a publish goes out as a
    NOTIFY and comes back, to this process too, through LISTEN, then fans out locally.

    NOTIFY has no replay, so the bus keeps its own: for the channels with a persisted
    history it remembers the ids it fanned out, and when the notifier says it may have
    missed some (`lost`), it holds what arrives until it listens again (`resumed`), reads
    the events after the newest it fanned out from the history, fans out those it had
    not, in id order, then what it held. When that is impossible (the history was trimmed,
    too many were missed, the database stays away) the callbacks of `when_unreplayable`
    close this process's subscriptions so that clients catch up themselves.
    """

    def __init__(
        self,
        notifier_for: Callable[[Hearing], Notifier],
        history: EventLog | None = None,
        queue_size: int = 1000,
    ) -> None:
        self._local = InProcessBus(queue_size)
        self._notifier = notifier_for(Hearing(self._deliver, self._lost, self._resumed))
        self._history = history
        self._listeners: Counter[str] = Counter()  # this process's subscribers per channel
        self._heard: dict[str, _Heard] = {}
        self._holding = False  # a gap is open: deliveries wait in _held
        self._held: list[tuple[str, Payload]] = []
        self._replay: asyncio.Task[None] | None = None
        self._replay_wanted = asyncio.Event()
        self._unreplayable: list[Callable[[str], None]] = []

    async def publish(self, channel: str, payload: Payload) -> None:
        await self._notifier.notify(channel, json.dumps(payload, separators=(",", ":")))

    async def publish_all(self, events: Sequence[tuple[str, Payload]]) -> None:
        await self._notifier.notify_all(
            [(channel, json.dumps(payload, separators=(",", ":"))) for channel, payload in events]
        )

    def when_unreplayable(self, callback: Callable[[str], None]) -> None:
        self._unreplayable.append(callback)

    def tap(self, channel: str, callback: Callable[[Payload], None]) -> None:
        self._local.tap(channel, callback)

    @property
    def fell_behind(self) -> int:
        """Subscribers of this process closed so far for falling behind."""
        return self._local.fell_behind

    async def subscribe(
        self, channel: str, on_listening: Callable[[], None] | None = None
    ) -> AsyncGenerator[Payload, None]:
        async with self.listening(channel) as events:
            if on_listening is not None:
                on_listening()
            async for payload in events:
                yield payload

    @asynccontextmanager
    async def listening(self, channel: str) -> AsyncIterator[AsyncIterator[Payload]]:
        await self._notifier.listen(channel)
        try:
            await self._start_hearing(channel)
            async with self._local.listening(channel) as events:
                yield events
        finally:
            self._stop_hearing(channel)
            await self._notifier.unlisten(channel)

    async def _start_hearing(self, channel: str) -> None:
        """Counts a subscriber; the first one of a replayable channel marks where this
        replica's hearing starts (read after LISTEN, so nothing later is missed)."""
        self._listeners[channel] += 1
        if self._history is None or channel not in self._history.channels:
            return
        if channel in self._heard:
            return
        floor = await self._history.latest(channel)  # a failure: subscribe's finally uncounts
        self._heard.setdefault(channel, _Heard(floor))

    def _stop_hearing(self, channel: str) -> None:
        self._listeners[channel] -= 1
        if self._listeners[channel] <= 0:
            del self._listeners[channel]
            self._heard.pop(channel, None)  # not heard from now: a new start next time

    def _deliver(self, channel: str, text: str) -> None:
        try:
            payload = json.loads(text)
        except ValueError:
            log.warning("ignored a notification on %s that is not JSON", channel)
            return
        if not isinstance(payload, dict):
            return
        if self._holding:
            self._held.append((channel, payload))
        else:
            self._fan_out(channel, payload)

    def _fan_out(self, channel: str, payload: Payload) -> None:
        heard = self._heard.get(channel)
        event_id = payload.get("event_id")
        if heard is not None and isinstance(event_id, int) and not heard.first_time(event_id):
            return  # replayed already, or heard twice
        self._local.deliver(channel, payload)

    def _lost(self) -> None:
        """Notifications may be missing from now: hold what arrives until the replay."""
        self._holding = True

    def _resumed(self) -> None:
        """Listening again: read back what was missed, then what was held."""
        self._holding = True
        self._replay_wanted.set()
        if self._replay is None or self._replay.done():
            self._replay = asyncio.create_task(self._replay_gaps(), name="event-replay")

    async def _replay_gaps(self) -> None:
        while self._replay_wanted.is_set():
            self._replay_wanted.clear()
            try:
                await self._replay_once()
            except Exception as error:  # the reason is logged; subscribers catch up
                log.error("events missed while not listening cannot be replayed: %s", error)
                self._give_up()
                return
        self._release_held()

    async def _replay_once(self) -> None:
        """Fans out, in id order, every persisted event after the newest fanned out."""
        started = asyncio.get_running_loop().time()
        delay = 0.1
        for channel in list(self._heard):
            replayed = 0
            first = self._heard[channel]
            cursor, checked_after = first.replay_from(), max(first.floor, first.newest)
            checked = False
            while True:
                heard = self._heard.get(channel)
                if heard is None or self._history is None:
                    break  # nobody listens to it any more
                try:
                    if not checked:
                        await self._history.check_kept(channel, checked_after)
                        checked = True
                    page = await self._history.after(channel, cursor, REPLAY_PAGE)
                except Trimmed:
                    raise
                except Exception as error:
                    waited = asyncio.get_running_loop().time() - started
                    if not is_unavailable(error) or waited > REPLAY_GIVE_UP_S:
                        raise
                    log.warning("event replay waits for the database (%s)", type(error).__name__)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, REPLAY_RETRY_MAX_DELAY_S)
                    continue
                fresh = [p for p in page if p.get("event_id") not in heard.recent_set]
                replayed += len(fresh)
                if replayed > REPLAY_MAX_EVENTS:
                    raise Trimmed(f"more than {REPLAY_MAX_EVENTS} events on {channel} were missed")
                for payload in fresh:
                    self._fan_out(channel, payload)
                if page:
                    cursor = int(page[-1]["event_id"])
                if len(page) < REPLAY_PAGE:
                    break
            if replayed:
                log.info("replayed %d events on %s missed while not listening", replayed, channel)

    def _release_held(self) -> None:
        held, self._held = self._held, []
        self._holding = False
        for channel, payload in held:
            self._fan_out(channel, payload)

    def _give_up(self) -> None:
        """What was missed stays missed: subscribers are closed to catch up themselves,
        and hearing starts again from what arrives next."""
        self._held = []
        self._holding = False
        for heard in self._heard.values():
            heard.floor = max(heard.floor, heard.newest)
        for callback in self._unreplayable:
            callback(CATCH_UP_REASON)
