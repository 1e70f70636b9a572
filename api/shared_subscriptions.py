"""Subscriptions that run once per group of subscribers who would see the same (issue 12).

A status change used to be executed once per subscriber: each ran the selection set,
serialised the result and sent it, so an event cost O(subscribers) of GraphQL work and
5,000 subscribers took seconds, with every other client waiting behind them. Frontends
send the same few subscription documents, so here the subscribers of one document,
operation name and variables who may see the same form a group. The group runs the
subscription once, serialises each result once, and hands the same text to every member.

Who may see the same: one org and one role with the same policies. Nothing a subscription
selects depends on who holds the credential (no field below Subscription reads the
subject or the token), so two people of one org and role share a group, while another
org or role never does.

Each subscriber is still checked on its own before it joins (`admit`): the subscription's
argument checks run for it with its own context (SubscriptionMode(admit_only=True)), so a
foreign spaceId is NOT_FOUND for that subscriber whatever a group already runs. Its
session, credential expiry and subscription count stay its connection's.

A member whose socket cannot take a frame within SEND_TIMEOUT_S (a client that stopped
reading, with its buffers full) is closed with 1013 rather than holding up the others.
A group goes through the events that reach it together (a storm: their rows are read in
one go, core.common.event_reads) in one pass, but a turn of the event loop holds at most
FAN_OUT_CHUNK units of its work (a frame is one, an event's execution EVENT_UNITS): then
it yields, between members of a large group and between events of a long backlog, so the
probe loop and other clients are served during a storm (issue 19). A group whose run fell behind the event bus (its queue
filled) has lost events: its members are closed with 1013 to catch up, never left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from strawberry.types.execution import ExecutionResult

from core.common import metrics, request_scope
from core.common.events import CATCH_UP_REASON, FELL_BEHIND
from core.common.rbac import Viewer

log = logging.getLogger("spacedock.transport")

SEND_TIMEOUT_S = 5.0
# A group's work in one turn of the event loop, in frames sent; executing and serialising
# an event costs about as much as EVENT_UNITS frames.
FAN_OUT_CHUNK = 64
EVENT_UNITS = 8
WS_TRY_AGAIN_LATER = 1013


@dataclass(frozen=True)
class GroupKey:
    """What a group's members share: the operation and what they may see."""

    query: str
    operation_name: str | None
    variables: str  # canonical JSON
    org_id: str
    role: str
    permissions: tuple[str, ...]

    @classmethod
    def of(
        cls,
        query: str,
        operation_name: str | None,
        variables: dict[str, Any] | None,
        viewer: Viewer,
    ) -> GroupKey:
        return cls(
            query=query,
            operation_name=operation_name,
            variables=json.dumps(variables or {}, sort_keys=True, separators=(",", ":")),
            org_id=viewer.org_id,
            role=viewer.role_name,
            permissions=tuple(sorted(viewer.permissions)),
        )


class Member(Protocol):
    """One subscriber: one operation on one connection."""

    def deliver(self, payload: str) -> Awaitable[None]:
        """Sends one `next` frame whose payload is this JSON text."""
        ...

    async def drop(self, code: int, reason: str) -> None:
        """Closes the subscriber's connection."""
        ...


# Starts the group's one run of the subscription; `on_listening` is called once
# published events will reach it.
StartStream = Callable[[Callable[[], None]], Awaitable[AsyncIterator[ExecutionResult]]]


def fell_behind(result: ExecutionResult) -> bool:
    """The stream's events outran it (core.common.events.FellBehind), so it ends here."""
    return any((error.extensions or {}).get("code") == FELL_BEHIND for error in result.errors or ())


def payload_text(result: ExecutionResult) -> str:
    """The `next` payload of a result, as graphql-transport-ws sends it."""
    payload: dict[str, Any] = {"data": result.data}
    if result.errors:
        payload["errors"] = [error.formatted for error in result.errors]
    if result.extensions:
        payload["extensions"] = result.extensions
    return json.dumps(payload)


class Group:
    """The members of one key, and the one run of their subscription."""

    def __init__(
        self, key: GroupKey, on_end: Callable[[Group], None], send_timeout_s: float
    ) -> None:
        self.key = key
        self.send_timeout_s = send_timeout_s
        self.members: dict[Member, None] = {}  # ordered: delivered in joining order
        self.listening = False
        self.ended = asyncio.Event()
        self._on_end = on_end
        self._task: asyncio.Task[None] | None = None
        self._turn = 0  # units of work since this group last yielded to the event loop
        self._send_watch = SendWatch(send_timeout_s)

    def start(self, stream: StartStream) -> None:
        self._task = asyncio.create_task(
            self._run(stream), name="shared subscription", context=request_scope.detached()
        )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _listening(self) -> None:
        self.listening = True

    async def _run(self, stream: StartStream) -> None:
        try:
            async with aclosing(await stream(self._listening)) as results:  # type: ignore[type-var]
                async for result in results:
                    if fell_behind(result):
                        await self._close_to_catch_up()
                        return
                    started = time.perf_counter()
                    await self._fan_out(payload_text(result))
                    metrics.observe_fanout(time.perf_counter() - started)
        except Exception:  # a bug: the members are completed rather than left waiting
            log.exception("a shared subscription failed")
        finally:
            self._send_watch.disarm()
            self._on_end(self)
            self.ended.set()

    async def _spend(self, units: int) -> None:
        """Counts work; yields to the event loop once a turn's worth is done."""
        self._turn += units
        if self._turn > FAN_OUT_CHUNK:
            self._turn = units
            await asyncio.sleep(0)

    async def _close_to_catch_up(self) -> None:
        """The run fell behind the bus and lost events: every member is closed to catch
        up with statusEvents(after:) rather than left streaming with a hole (issue 19)."""
        members, self.members = list(self.members), {}
        log.warning("closed %d subscribers that fell behind: %s", len(members), CATCH_UP_REASON)
        await asyncio.gather(
            *(member.drop(WS_TRY_AGAIN_LATER, CATCH_UP_REASON) for member in members),
            return_exceptions=True,
        )

    async def _fan_out(self, payload: str) -> None:
        await self._spend(EVENT_UNITS)
        watch = self._send_watch
        for member in list(self.members):
            self._turn += 1  # _spend(1), inline: this loop runs once per subscriber
            if self._turn > FAN_OUT_CHUNK:
                self._turn = 1
                await asyncio.sleep(0)
            if member not in self.members:
                continue  # it left during this fan-out
            try:
                with watch:
                    await member.deliver(payload)
            except TimeoutError:
                self.members.pop(member, None)
                reason = f"too slow: did not take an event within {self.send_timeout_s:g} s"
                _background(member.drop(WS_TRY_AGAIN_LATER, reason))
            except (OSError, RuntimeError):
                self.members.pop(member, None)  # its socket is gone; its handler cleans up


class SendWatch:
    """A time limit on each send of one task's fan-out, as `asyncio.timeout` around each
    send would give (the send cancelled, TimeoutError raised in its place), with one timer
    for the whole fan-out instead of one per send: a timer per send cost about 10 µs, more
    than the rest of a delivery together (issue 20). When the timer fires it cancels the
    send running since the limit, or waits for the running send's own limit."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0  # the task's cancellation requests when its send began
        self._since: float | None = None  # when the running send began
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False

    def __enter__(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = task = asyncio.current_task()
        assert task is not None
        self._cancelling = task.cancelling()
        self._since = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(self._since + self.limit_s, self._check)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: object
    ) -> None:
        self._since = None
        if self._expired:
            self._expired = False
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
                raise TimeoutError from error  # cancelled for its limit, and nothing else

    def _check(self) -> None:
        self._timer = None
        if self._since is None or self._task is None:
            return  # no send running: the next one arms the timer again
        loop = self._task.get_loop()
        deadline = self._since + self.limit_s
        if loop.time() < deadline:
            self._timer = loop.call_at(deadline, self._check)
            return
        self._expired = True
        self._task.cancel()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


_pending: set[asyncio.Task[None]] = set()


def _background(work: Awaitable[None]) -> None:
    async def run() -> None:
        with contextlib.suppress(Exception):
            await work

    task = asyncio.create_task(run())
    _pending.add(task)
    task.add_done_callback(_pending.discard)


class SharedSubscriptions:
    """Every group of this process, by key."""

    def __init__(self, send_timeout_s: float = SEND_TIMEOUT_S) -> None:
        self.send_timeout_s = send_timeout_s
        self._groups: dict[GroupKey, Group] = {}

    def close_all(self, reason: str) -> None:
        """Closes every subscriber of this process with 1013 and `reason`: its events were
        missed and cannot be replayed (core.common.events), so each must reconnect and catch up."""
        for group in list(self._groups.values()):
            members, group.members = list(group.members), {}
            for member in members:
                _background(member.drop(WS_TRY_AGAIN_LATER, reason))
        if self._groups:
            log.warning("closed every subscriber: %s", reason)

    @property
    def group_count(self) -> int:
        return len(self._groups)

    @property
    def listening_members(self) -> int:
        """Subscribers whose events are streaming (the spacedock_event_subscribers gauge)."""
        return sum(len(group.members) for group in self._groups.values() if group.listening)

    async def attend(self, key: GroupKey, member: Member, stream: StartStream) -> None:
        """Delivers the group's events to `member` until the group's stream ends; leaving
        (cancelling this) takes the member out, and the last one out stops the group."""
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(key, self._forget, self.send_timeout_s)
            group.start(stream)
        group.members[member] = None
        try:
            await group.ended.wait()
        finally:
            group.members.pop(member, None)
            if not group.members:
                group.stop()
                self._forget(group)

    def _forget(self, group: Group) -> None:
        if self._groups.get(group.key) is group:
            del self._groups[group.key]
