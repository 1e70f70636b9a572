"""The GraphiQL explorer, served with its assets from this server (no CDN).

`make graphiql` installs the pinned UMD bundles of api/graphiql/package.json into
api/graphiql/node_modules, which api.app mounts at /graphiql; the page loads only
from there, so it works on networks that cannot reach the internet. A wheel carries
the files the page loads in the same place (setup.py copies them from node_modules
at build time), so `pip install` serves GraphiQL without npm.
"""

from __future__ import annotations

from pathlib import Path

from starlette.responses import HTMLResponse

TEMPLATE = Path(__file__).parent / "templates" / "graphiql.html"
ASSETS = Path(__file__).parent / "graphiql" / "node_modules"

MISSING_ASSETS = (
    "<!doctype html><title>spacedock GraphiQL</title>"
    "<p>The GraphiQL assets are not installed: run <code>make graphiql</code>.</p>"
)


def page() -> HTMLResponse:
    if not ASSETS.is_dir():
        return HTMLResponse(MISSING_ASSETS, status_code=503)
    return HTMLResponse(TEMPLATE.read_text())
