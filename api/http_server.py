"""How uvicorn serves the app: bounded request heads, no slow senders, no query strings in logs.

uvicorn's HTTP parser keeps reading a request head for as long as the client sends
one, and keeps a connection that never finishes its head open forever: an
unauthenticated client could hold a 100 MB header in memory or thousands of
half-sent requests. `BoundedHttpProtocol` answers 431 past `MAX_HEAD_BYTES` and
408 when a head takes longer than the read timeout. The access log shows paths
only: a GET carries its variables (secrets, for mutations) in the query string.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from uvicorn.config import LOGGING_CONFIG, Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

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


class PathOnly(logging.Filter):
    """Drops the query string from the paths uvicorn logs (requests and WebSocket handshakes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                arg.split("?", 1)[0] if isinstance(arg, str) and arg.startswith("/") else arg
                for arg in record.args
            )
        return True


def log_config() -> dict[str, Any]:
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["path_only"] = {"()": PathOnly}
    for handler in ("default", "access"):
        config["handlers"][handler]["filters"] = ["path_only"]
    return config


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn.run's transport options for these settings."""
    BoundedHttpProtocol.read_timeout_s = settings.request_read_timeout_s
    return {
        "http": BoundedHttpProtocol,
        "ws": "websockets-sansio",
        "ws_max_size": settings.max_body_bytes,
        "log_config": log_config(),
        "timeout_keep_alive": 5,
    }
