"""Every simulated server says it is a simulation in each answer's `Server` header, so
nobody takes a demo's or a test's answers for a real cluster's or cloud's."""

from __future__ import annotations

from aiohttp import web

PRODUCT = "spacedock-sim"


def header(kind: str) -> str:
    """The `Server` header of the simulator `kind` ("kubernetes", "gcp", ...)."""
    return f"{PRODUCT} ({kind}; a simulation)"


def named(app: web.Application, kind: str) -> web.Application:
    """`app`, answering with the simulation's `Server` header."""

    async def name(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Server"] = header(kind)

    app.on_response_prepare.append(name)
    return app
