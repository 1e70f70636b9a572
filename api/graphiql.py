"""The GraphiQL explorer, served with its assets from this server (no CDN)."""

from __future__ import annotations

from pathlib import Path

from starlette.responses import HTMLResponse

TEMPLATE = Path(__file__).parent / "templates" / "graphiql.html"
ASSETS = Path(__file__).parent / "graphiql" / "node_modules"


def page() -> HTMLResponse:
    return HTMLResponse(TEMPLATE.read_text())
