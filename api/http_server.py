"""How uvicorn serves the app: bounded request heads, no slow senders, and a hand-over
before it stops (api.hand_over). Logging is api.logs's.

uvicorn's HTTP parser keeps reading a request head for as long as the client sends
one, and keeps a connection that never finishes its head open forever: an
unauthenticated client could hold a 100 MB header in memory or thousands of
half-sent requests. `BoundedHttpProtocol` answers 431 past `MAX_HEAD_BYTES` and
408 when a head takes longer than the read timeout.
"""

from __future__ import annotations

import asyncio
from types import FrameType
from typing import Any

from starlette.applications import Starlette
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server, ServerState

from api import logs
from api.hand_over import HandOver
from api.settings import Settings

MAX_HEAD_BYTES = 64 * 1024  # request line and headers together
LINGER_S = 1.0  # how long a refused connection's remaining input is drained before closing


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a size and a time limit on every request head."""

    read_timeout_s = 5.0  # set per server by `server_options`

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.head_bytes = 0  # as received, before the parser has seen a complete header
        self.reading_head = True
        self.head_deadline: asyncio.TimerHandle | None = None
        self.refused = False
        self.parsed_head_bytes = 0  # exact, from the parser's callbacks

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.arm_head_deadline()  # a connection that sends nothing is a head never finished

    def arm_head_deadline(self) -> None:
        if self.head_deadline is None:
            self.head_deadline = self.loop.call_later(self.read_timeout_s, self.head_too_slow)

    def disarm_head_deadline(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm_head_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.reading_head:
            self.head_bytes += len(data)
        super().data_received(data)
        # Checked after parsing: a chunk that ends the head may carry body bytes too.
        if self.reading_head and self.head_bytes > MAX_HEAD_BYTES and not self.refused:
            self.refuse(431, b"Request Header Fields Too Large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.reading_head = True
        self.head_bytes = 0
        self.parsed_head_bytes = 0
        self.arm_head_deadline()

    def on_url(self, url: bytes) -> None:
        self.parsed_head_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.parsed_head_bytes += len(name) + len(value) + 4  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.reading_head = False
        self.disarm_head_deadline()
        if self.parsed_head_bytes > MAX_HEAD_BYTES:  # a head that arrived in one piece
            self.refuse(431, b"Request Header Fields Too Large")
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self.refused:
            super().on_message_complete()

    def head_too_slow(self) -> None:
        self.head_deadline = None
        if self.reading_head and not self.refused and not self.transport.is_closing():
            self.refuse(408, b"Request Timeout")

    def refuse(self, status: int, reason: bytes) -> None:
        """Answers and closes. The client may still be sending: closing at once would reset
        the connection and could destroy the answer before the client reads it, so what
        still arrives is dropped unparsed for a moment first."""
        self.refused = True
        self.disarm_head_deadline()
        body = b'{"errors":[{"message":"' + reason + b'","extensions":{"code":"BAD_REQUEST"}}]}'
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (status, reason, len(body)) + body
        )
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


class HandingOverServer(Server):
    """uvicorn's server, whose first SIGTERM or SIGINT hands the replica's work over
    (api.hand_over) while it still serves, before uvicorn's own shutdown closes the
    connections; a second signal shuts down at once, as uvicorn does."""

    def __init__(self, config: Config, hand_over: HandOver) -> None:
        super().__init__(config)
        self.hand_over = hand_over
        self._handing_over: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._handing_over is not None or self.should_exit:
            super().handle_exit(sig, frame)
            return
        self._captured_signals.append(sig)  # re-raised once uvicorn is done, as it does
        loop = asyncio.get_running_loop()  # a signal handler runs on the loop's thread
        loop.call_soon_threadsafe(self._start_hand_over)

    def _start_hand_over(self) -> None:
        if self._handing_over is None:
            self._handing_over = asyncio.create_task(self._hand_over_then_exit())

    async def _hand_over_then_exit(self) -> None:
        try:
            await self.hand_over.run()
        finally:
            self.should_exit = True


def serve(app: Starlette, settings: Settings, host: str, port: int) -> None:
    """Serves `app` until a signal, then hands over and shuts down (HandingOverServer)."""
    hand_over: HandOver = app.state.hand_over
    config = Config(
        app,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        proxy_headers=False,
        timeout_graceful_shutdown=max(1, round(hand_over.connections_grace_s)),
        **server_options(settings),
    )
    HandingOverServer(config, hand_over).run()


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's transport options for these settings."""
    BoundedHttpProtocol.read_timeout_s = settings.request_read_timeout_s
    return {
        "http": BoundedHttpProtocol,
        "ws": "websockets-sansio",
        "ws_max_size": settings.max_body_bytes,
        "log_config": logs.logging_config(
            settings.log_format, settings.log_level, settings.sdk_log_level
        ),
        "timeout_keep_alive": 5,
    }
