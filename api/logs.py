"""How spacedock logs: text for a terminal (the default) or one JSON object per line
(SPACEDOCK_LOG_FORMAT=json), each line stamped with the request it belongs to.

`RequestIds` begins a request scope (core.common.request_scope) for every HTTP request
and WebSocket connection, taking the client's X-Request-Id when it is a plain token, and
echoes the id in the response's X-Request-Id header; every line written while the request
runs, uvicorn's access line and the tasks it starts included, carries it (`request_id`).

Cloud SDKs log every request and response at INFO (azure-identity about 8 lines per
token), so their loggers are held at SPACEDOCK_SDK_LOG_LEVEL (WARNING unless asked).
uvicorn's access log shows paths only: a GET carries its variables (secrets, for
mutations) in the query string, and the admission webhook's path its secret.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.common import request_scope

# The loggers of the SDKs spacedock calls, each the root of its package's loggers.
SDK_LOGGERS = (
    "azure",
    "msal",
    "botocore",
    "aiobotocore",
    "boto3",
    "aioboto3",
    "urllib3",
    "google",
    "kubernetes_asyncio",
)
# Fields of a log record that are not extras a line should carry.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "request_id",
    "color_message",
}


# The admission webhook's path ends in a vCluster's secret (core.cloudspaces.admission).
ADMISSION_PATH = "/api/v1/admission/"
ADMISSION_SECRET = re.compile(rf"^({ADMISSION_PATH}[^/]*/[^/]*/).+$")


def logged_path(path: str) -> str:
    """A path as the log shows it: no query string, no webhook secret."""
    path = path.partition("?")[0]
    # Every request is logged: the pattern only where it can match.
    if path.startswith(ADMISSION_PATH):
        return ADMISSION_SECRET.sub(r"\1…", path)
    return path


class PathOnly(logging.Filter):
    """Drops the query string (and the admission webhook's secret) from the paths uvicorn
    logs (requests and WebSocket handshakes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                logged_path(arg) if isinstance(arg, str) and arg.startswith("/") else arg
                for arg in record.args
            )
        return True


class RequestIdFilter(logging.Filter):
    """Stamps each record with the id of the request it was written in (None outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_scope.current_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, request_id when in a
    request, an access line's method, path and status, and the traceback of an exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            line["request_id"] = request_id
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            _, line["method"], line["path"], _, line["status"] = args  # client, …, HTTP version
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                line[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def logging_config(log_format: str, level: str, sdk_level: str) -> dict[str, Any]:
    """The logging setup (dictConfig) for the command and for uvicorn, which applies it
    again as it starts."""
    filters = {
        "path_only": {"()": PathOnly},
        "request_id": {"()": RequestIdFilter},
    }
    on_handlers = ["path_only", "request_id"]
    sdks = {name: {"level": sdk_level} for name in SDK_LOGGERS}
    if log_format == "json":
        return {
            "version": 1,
            "disable_existing_loggers": False,
            "filters": filters,
            "formatters": {"json": {"()": JsonFormatter}},
            "handlers": {
                "json": {
                    "class": "logging.StreamHandler",
                    "formatter": "json",
                    "filters": on_handlers,
                    "stream": "ext://sys.stderr",
                }
            },
            "root": {"handlers": ["json"], "level": level},
            "loggers": {
                **sdks,
                "alembic": {"level": "WARNING"},
                # uvicorn's own handlers would print text: its lines go to the root's.
                "uvicorn": {"handlers": [], "level": level, "propagate": True},
                "uvicorn.error": {"level": level},
                "uvicorn.access": {"handlers": [], "level": level, "propagate": True},
            },
        }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": filters,
        "formatters": {
            "text": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
            "uvicorn": {
                "()": "uvicorn.logging.DefaultFormatter",
                "fmt": "%(levelprefix)s %(message)s",
            },
            "access": {
                "()": "uvicorn.logging.AccessFormatter",
                "fmt": '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
            },
        },
        "handlers": {
            "text": {
                "class": "logging.StreamHandler",
                "formatter": "text",
                "filters": on_handlers,
                "stream": "ext://sys.stderr",
            },
            "uvicorn": {
                "class": "logging.StreamHandler",
                "formatter": "uvicorn",
                "filters": on_handlers,
                "stream": "ext://sys.stderr",
            },
            "access": {
                "class": "logging.StreamHandler",
                "formatter": "access",
                "filters": on_handlers,
                "stream": "ext://sys.stdout",
            },
        },
        "root": {"handlers": ["text"], "level": level},
        "loggers": {
            **sdks,
            "alembic": {"level": "WARNING"},
            "uvicorn": {"handlers": ["uvicorn"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["access"], "level": level, "propagate": False},
        },
    }


def configure(log_format: str, level: str, sdk_level: str) -> None:
    logging.config.dictConfig(logging_config(log_format, level, sdk_level))
    # Python's warnings become log lines too, so that a JSON log holds nothing but JSON.
    logging.captureWarnings(log_format == "json")


# The messages that open an answer, which carry the X-Request-Id header.
ANSWER_STARTS = frozenset(
    ("http.response.start", "websocket.accept", "websocket.http.response.start")
)


class RequestIds:
    """Every HTTP request and WebSocket connection runs in a request scope of its own,
    whose id the response (or the WebSocket handshake's answer) carries as X-Request-Id."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope["headers"] if name == b"x-request-id"), None)
        current, token = request_scope.enter(None if given is None else given.decode("latin-1"))
        echoed = (b"x-request-id", current.id.encode())

        # A plain function handing on the server's own awaitable: every WebSocket frame
        # passes here, and a coroutine of our own per frame cost a fan-out ~1 µs per
        # subscriber (issue 20).
        def sending(message: Message) -> Awaitable[None]:
            if message["type"] in ANSWER_STARTS:
                message = {**message, "headers": [*message.get("headers", ()), echoed]}
            return send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            request_scope.leave(token)
