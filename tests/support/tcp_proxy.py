"""A TCP forwarder a test can cut and restore: a database outage without stopping the
shared Postgres. It can also stall one forwarded connection: bytes go nowhere either way
but the connection stays open, as on a link that dies without closing. It runs its own event loop in a thread, so a synchronous server
fixture can use it as well as an async test."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import sqlalchemy as sa

from sim.ports import HeldPort
from tests.support.server import Backend

T = TypeVar("T")


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._port = HeldPort()
        self.port = self._port.number
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.listener: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.upstream: set[asyncio.StreamWriter] = set()  # those to the target
        self.stalled: set[int] = set()  # upstream local ports whose bytes are dropped

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=10)

    def start(self) -> TcpProxy:
        self.thread.start()
        self.restore()
        return self

    @classmethod
    def to(cls, database: Backend) -> TcpProxy:
        """A started proxy to the database's server."""
        url = sa.make_url(database.url)
        return cls(url.host or "127.0.0.1", url.port or 5432).start()

    def backend_of(self, database: Backend) -> Backend:
        """The same database, reached through this proxy."""
        url = sa.make_url(database.url).set(host="127.0.0.1", port=self.port)
        return Backend(database.name, url.render_as_string(hide_password=False))

    def restore(self) -> None:
        """Accepts and forwards connections again."""
        self._run(self._listen())

    def cut(self) -> None:
        """Stops listening and drops every forwarded connection: the database is gone."""
        self._run(self._cut())

    def upstream_ports(self) -> set[int]:
        """The local ports of the forwarded connections to the target: how the target
        (Postgres's pg_stat_activity.client_port) sees them."""
        return self._run(self._upstream_ports())

    async def _upstream_ports(self) -> set[int]:
        ports = set()
        for writer in self.upstream:
            name = writer.get_extra_info("sockname")
            if name is not None and not writer.is_closing():
                ports.add(int(name[1]))
        return ports

    def stall(self, upstream_port: int) -> None:
        """From now on the connection whose upstream side has this local port forwards
        nothing in either direction and never closes unless an end closes it."""
        self.loop.call_soon_threadsafe(self.stalled.add, upstream_port)

    def stop(self) -> None:
        self.cut()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def _listen(self) -> None:
        held = self._port.take()
        if held is not None:
            self.listener = await asyncio.start_server(self._forward, sock=held)
        else:
            self.listener = await asyncio.start_server(
                self._forward, "127.0.0.1", self.port, reuse_address=True
            )

    async def _cut(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        for writer in list(self.writers):
            writer.transport.abort()
        self.writers.clear()
        self.upstream.clear()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.writers |= {writer, upstream_writer}
        self.upstream.add(upstream_writer)
        port = int(upstream_writer.get_extra_info("sockname")[1])
        await asyncio.gather(
            self._pump(reader, upstream_writer, port), self._pump(upstream_reader, writer, port)
        )

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
    ) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                if port in self.stalled:
                    continue  # lost on the way
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
        self.writers.discard(writer)
        self.upstream.discard(writer)
