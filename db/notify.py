"""Postgres NOTIFY and LISTEN, the cross-replica transport of the event bus.

NOTIFY goes through the engine's pool, after the change it announces has
committed. LISTEN needs a connection of its own that stays open, so it is a
plain asyncpg connection outside the pool, opened when the first subscriber of
this process arrives and closed when the last one leaves. If Postgres drops it
(a restart, a failover, an administrator), it is reopened with backoff and
every channel still wanted is listened to again. A link that dies without closing (a
dropped route, a stalled proxy) drops nothing asyncpg can see, so the connection is also
checked every `keepalive_s` with a cheap query that must answer within as long; one that
does not is closed and counts as lost, like a drop.

Whoever built the notifier hears of every gap: `lost` when notifications may have been
missed (the connection dropped, or a NOTIFY of this process failed), `resumed` once it
listens again, so it can read back from the history what it did not hear (core.common.events).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import sqlalchemy as sa

from db.engine import Database

log = logging.getLogger(__name__)

# Postgres channel names are identifiers, and one database may serve other software too.
CHANNEL_PREFIX = "spacedock_"
# Shown in pg_stat_activity, so operators (and tests) can tell the listener apart.
APPLICATION_NAME = "spacedock-events"
RECONNECT_MAX_DELAY_S = 5.0
KEEPALIVE_S = 5.0  # the default of SPACEDOCK_EVENT_LISTEN_KEEPALIVE_S
CONNECT_TIMEOUT_S = 10.0
CONNECTION_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)
# Many notifications in one statement, sent in the arrays' order.
NOTIFY_ALL = sa.text(
    "SELECT pg_notify(n.channel, n.text)"
    " FROM unnest(CAST(:channels AS text[]), CAST(:texts AS text[])) WITH ORDINALITY"
    " AS n(channel, text, position) ORDER BY n.position"
)


class PostgresNotifier:
    def __init__(
        self,
        database: Database,
        deliver: Callable[[str, str], None],
        lost: Callable[[], None] = lambda: None,
        resumed: Callable[[], None] = lambda: None,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self._database = database
        self._keepalive_s = keepalive_s
        self._keepalive: asyncio.Task[None] | None = None
        self._deliver = deliver
        self._on_lost = lost
        self._on_resumed = resumed
        self._dsn = database.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._wanted: Counter[str] = Counter()
        self._connection: Any = None  # asyncpg.Connection while listening
        self._lock = asyncio.Lock()  # one connect, LISTEN, UNLISTEN or close at a time
        self._reconnecting: asyncio.Task[None] | None = None

    async def notify(self, channel: str, text: str) -> None:
        """Sends one notification; a failure is logged, not raised, because the change it
        announces has already committed: this process reads it back from the history
        (`lost`, then `resumed`) instead."""
        try:
            async with self._database.engine.begin() as connection:
                await connection.execute(
                    sa.select(sa.func.pg_notify(CHANNEL_PREFIX + channel, text))
                )
        except (OSError, TimeoutError, sa.exc.DBAPIError) as error:
            log.error("an event on %s was not sent: %s", channel, type(error).__name__)
            self._not_sent()

    async def notify_all(self, notifications: Sequence[tuple[str, str]]) -> None:
        """Several notifications in one statement (Postgres sends them in this order): a
        probe step publishes one per probe, which one by one took a statement each."""
        if len(notifications) == 1:
            await self.notify(*notifications[0])
            return
        if not notifications:
            return
        channels = [CHANNEL_PREFIX + channel for channel, _ in notifications]
        texts = [text for _, text in notifications]
        try:
            async with self._database.engine.begin() as connection:
                await connection.execute(NOTIFY_ALL, {"channels": channels, "texts": texts})
        except (OSError, TimeoutError, sa.exc.DBAPIError) as error:
            log.error(
                "%d events on %s were not sent: %s",
                len(notifications),
                ", ".join(sorted(set(channels))),
                type(error).__name__,
            )
            self._not_sent()

    def _not_sent(self) -> None:
        """This process's own events went unannounced: it replays them for its subscribers
        (other replicas hear of them at their next gap, or not at all)."""
        if self._connection is not None:
            self._on_lost()
            self._on_resumed()

    async def listen(self, channel: str) -> None:
        async with self._lock:
            self._wanted[channel] += 1
            try:
                if self._connection is None:
                    self._connection = await self._open()
                elif self._wanted[channel] == 1:
                    await self._connection.add_listener(CHANNEL_PREFIX + channel, self._received)
            except BaseException:
                self._forget(channel)
                raise

    async def unlisten(self, channel: str) -> None:
        async with self._lock:
            self._forget(channel)
            connection = self._connection
            if connection is None or channel in self._wanted:
                return
            try:
                if self._wanted:
                    await connection.remove_listener(CHANNEL_PREFIX + channel, self._received)
                    return
                self._connection = None  # a closing we asked for is not a loss
                if self._keepalive is not None:
                    self._keepalive.cancel()
                    self._keepalive = None
                await connection.close(timeout=5)
            except CONNECTION_ERRORS as error:
                # A broken connection listens to nothing; the loss handler takes over.
                log.info("event LISTEN connection failed while leaving %s: %s", channel, error)

    def _forget(self, channel: str) -> None:
        self._wanted[channel] -= 1
        if self._wanted[channel] <= 0:
            del self._wanted[channel]

    async def _open(self) -> Any:
        """A new LISTEN connection, listening to every wanted channel."""
        connection = await asyncpg.connect(
            self._dsn,
            timeout=CONNECT_TIMEOUT_S,
            server_settings={"application_name": f"{APPLICATION_NAME}-{os.getpid()}"},
        )
        try:
            for channel in self._wanted:
                await connection.add_listener(CHANNEL_PREFIX + channel, self._received)
        except BaseException:
            connection.terminate()
            raise
        connection.add_termination_listener(self._lost)
        if self._keepalive is not None:
            self._keepalive.cancel()  # it checked a connection that is gone
        self._keepalive = asyncio.create_task(
            self._keep_alive(connection), name="event-listen-keepalive"
        )
        return connection

    async def _keep_alive(self, connection: Any) -> None:
        """Checks the LISTEN connection until it is no longer the one listening; one that
        does not answer in time is terminated, so its gap is replayed (`lost`)."""
        while True:
            await asyncio.sleep(self._keepalive_s)
            if connection is not self._connection:
                return
            try:
                async with asyncio.timeout(self._keepalive_s):
                    async with self._lock:  # one operation at a time on the connection
                        if connection is not self._connection:
                            return
                        await connection.fetchval("SELECT 1")
            except (*CONNECTION_ERRORS, TimeoutError) as error:
                log.warning(
                    "the event LISTEN connection did not answer its keepalive (%s)",
                    type(error).__name__,
                )
                self._lost(connection)
                connection.terminate()
                return

    def _received(self, _connection: Any, _pid: int, channel: str, text: str) -> None:
        self._deliver(channel.removeprefix(CHANNEL_PREFIX), text)

    def _lost(self, connection: Any) -> None:
        if connection is not self._connection:
            return
        self._connection = None
        self._on_lost()
        log.warning("the event LISTEN connection to Postgres was lost; reconnecting")
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = asyncio.create_task(
                self._reconnect(), name="event-listen-reconnect"
            )

    async def _reconnect(self) -> None:
        delay = 0.1
        while True:
            await asyncio.sleep(delay)
            async with self._lock:
                if not self._wanted or self._connection is not None:
                    # Nothing to hear any more, or listen() reopened it: the gap is over
                    # either way, and whoever holds deliveries for it must let them go.
                    self._on_resumed()
                    return
                try:
                    self._connection = await self._open()
                except CONNECTION_ERRORS as error:
                    log.warning(
                        "event LISTEN reconnect failed (%s); retrying", type(error).__name__
                    )
                    delay = min(delay * 2, RECONNECT_MAX_DELAY_S)
                    continue
            log.info("the event LISTEN connection to Postgres is back")
            self._on_resumed()
            return
