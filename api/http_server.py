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
        self.head_bytes = 0
        self.reading_head = True
        self.head_deadline: asyncio.TimerHandle | None = None

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
        if self.reading_head:
            self.head_bytes += len(data)
        super().data_received(data)
        # Checked after parsing: a chunk that ends the head may carry body bytes too.
        if (
            self.reading_head
            and self.head_bytes > MAX_HEAD_BYTES
            and not self.transport.is_closing()
        ):
            self.refuse(431, b"Request Header Fields Too Large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.reading_head = True
        self.head_bytes = 0
        self.arm_head_deadline()

    def on_headers_complete(self) -> None:
        self.reading_head = False
        self.disarm_head_deadline()
        super().on_headers_complete()

    def head_too_slow(self) -> None:
        self.head_deadline = None
        if self.reading_head and not self.transport.is_closing():
            self.refuse(408, b"Request Timeout")

    def refuse(self, status: int, reason: bytes) -> None:
        body = b'{"errors":[{"message":"' + reason + b'","extensions":{"code":"BAD_REQUEST"}}]}'
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (status, reason, len(body)) + body
        )
        self.transport.close()


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
