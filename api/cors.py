"""Browsers on other origins: CORS answers for the origins SPACEDOCK_CORS_ORIGINS lists,
and for every other origin a refusal whose reason a browser developer can read.

A browser hides a refused cross-origin answer from the page; what its developer sees is
the console's "blocked by CORS policy" and, in the network panel, the preflight's status
and headers. So a preflight from an origin not listed answers 403 with the reason in an
`X-Spacedock-Refused` header and in a GraphQL-shaped body (FORBIDDEN), and any other
request from such an origin runs as before (without CORS headers, so the page cannot
read it) with the same header. A WebSocket from such an origin is closed at once with
4403 and the reason (api.graphql_view), which a page's `CloseEvent.reason` holds.

Same-origin requests (the GraphiQL page this server serves) and clients that send no
`Origin` (no browser) are not cross-origin and pass untouched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.http.websocket_origin import is_same_origin

from api.http_requests import error_response

log = logging.getLogger("spacedock.cors")

REFUSED_HEADER = "X-Spacedock-Refused"
# How many refused origins are logged (once each): a page cannot flood the log.
ORIGINS_LOGGED = 100
# What an echoed origin may hold in a header or close reason: visible ASCII, not too long.
UNSHOWN = re.compile(r"[^\x21-\x7e]")
SHOWN_ORIGIN = 80
SAME_NAMES = "origins match exactly: http://localhost:5173 and http://127.0.0.1:5173 are two"
# A WebSocket close reason holds at most this many bytes.
MAX_CLOSE_REASON = 123


def cross_origin(headers: Headers) -> str | None:
    """The page's origin when a browser calls from another origin than this server's."""
    origin = headers.get("origin")
    if origin is None or is_same_origin(origin, headers.get("host")):
        return None
    return origin


def refusal(origin: str, allowed: Collection[str], short: bool = False) -> str | None:
    """Why a page on `origin` may not call the API; None when it may. `short`: within a
    WebSocket close reason's 123 bytes."""
    if origin in allowed:
        return None
    shown = UNSHOWN.sub("?", origin[:SHOWN_ORIGIN])
    if short:
        return f"Origin {shown} is not in SPACEDOCK_CORS_ORIGINS"[:MAX_CLOSE_REASON]
    if not allowed:
        return f"Origin {shown} refused: SPACEDOCK_CORS_ORIGINS is unset; list it there ({SAME_NAMES})."
    return f"Origin {shown} is not in SPACEDOCK_CORS_ORIGINS; list it there ({SAME_NAMES})."


class Cors:
    """CORS for the listed origins (Starlette's middleware), a readable refusal for the rest."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = allowed
        self.listed: ASGIApp = (
            CORSMiddleware(
                app,
                allow_origins=list(allowed),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "X-Request-Id"],
                # What a page may read besides the body: a kubeconfig download's expiry and
                # file name, and any answer's request id (api.logs) an error report quotes.
                expose_headers=["X-Kubeconfig-Expires-At", "Content-Disposition", "X-Request-Id"],
                max_age=600,
            )
            if allowed
            else app
        )
        self._logged: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = cross_origin(headers)
        reason = None if origin is None else refusal(origin, self.allowed)
        if origin is None or reason is None:
            await self.listed(scope, receive, send)
            return
        self._log(origin, reason)
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            refused = error_response(403, "FORBIDDEN", reason, {REFUSED_HEADER: reason})
            await refused(scope, receive, send)
            return

        async def with_reason(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REFUSED_HEADER] = reason
            await send(message)

        await self.app(scope, receive, with_reason)

    def _log(self, origin: str, reason: str) -> None:
        if origin in self._logged or len(self._logged) >= ORIGINS_LOGGED:
            return
        self._logged.add(origin)
        log.warning("refused a browser page: %s", reason)
