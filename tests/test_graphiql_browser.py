"""GraphiQL in a real browser, as someone on a network without internet uses it.

Headless Debian Chromium opens /graphql, the user types a token into the header
editor, runs a query and a subscription, and sees the results. Every request the
page makes is recorded: none may leave 127.0.0.1, so the explorer works air-gapped.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from api import graphiql
from tests.conftest import Org
from tests.support.chromium import Chromium
from tests.support.factories import register_generic_space
from tests.support.server import REPO, Server

QUERY_EDITOR = "document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror"
HEADER_EDITOR = (
    "document.querySelector('.graphiql-editor-tool .graphiql-editor:not(.hidden) .CodeMirror')"
    ".CodeMirror"
)
RESULT_PANE = "document.querySelector('.graphiql-response .CodeMirror').CodeMirror.getValue()"
AUTHORIZATION_VALUE = '"Authorization": "'
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
WAIT_S = 20.0

VIEWER = "{ viewer { org { name } role } }"
STATUS_EVENTS = "subscription { spaceStatusChanged { spaceId status space { name } } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # The registered test cluster is unreachable; its probes must not publish transitions
    # of their own and replace the registration event in the result pane.
    return {"SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000"}


@pytest.fixture(scope="module", autouse=True)
def graphiql_assets() -> None:
    """The server mounts the assets only if they exist when it starts: install them first."""
    if not graphiql.ASSETS.is_dir():
        subprocess.run(["make", "graphiql"], cwd=REPO, check=True, capture_output=True)


@pytest.fixture
async def page(chromium: None, tmp_path: Path) -> AsyncIterator[Chromium]:
    async with Chromium(tmp_path / "profile") as opened:
        try:
            yield opened
        finally:
            # What the page looked like at the end, to look at when a test fails.
            await opened.screenshot(tmp_path / "graphiql.png")


async def open_graphiql(page: Chromium, server: Server, token: str) -> None:
    """Open the explorer and type the token into the header editor's Authorization value."""
    await page.open(server.url)
    await page.wait_for(f"!!document.querySelector('.graphiql-editor-tool') && !!{HEADER_EDITOR}")
    typed_at = await page.evaluate(
        f"""(() => {{
            const editor = {HEADER_EDITOR};
            const at = editor.getValue().indexOf({json.dumps(AUTHORIZATION_VALUE)});
            if (at < 0) return null;
            editor.focus();
            editor.setCursor(editor.posFromIndex(at + {len(AUTHORIZATION_VALUE)}));
            return at;
        }})()"""
    )
    assert typed_at is not None, "the header editor offers no Authorization header to fill in"
    await page.type_text(f"Bearer {token}")
    headers = json.loads(await page.evaluate(f"{HEADER_EDITOR}.getValue()"))
    assert headers == {"Authorization": f"Bearer {token}"}


async def run(page: Chromium, document: str) -> None:
    """Put `document` in the query editor and press the run button."""
    await page.evaluate(f"{QUERY_EDITOR}.setValue({json.dumps(document)})")
    # GraphiQL parses the editor 100 ms after a change, and routes subscriptions to the
    # WebSocket by that parse: run only once it describes this document.
    await page.wait_for(
        f"{QUERY_EDITOR}.documentAST?.loc.source.body === {QUERY_EDITOR}.getValue()"
    )
    await page.click(".graphiql-execute-button")


async def result_pane(page: Chromium, wanted: dict[str, Any]) -> dict[str, Any]:
    """The result pane's JSON once its data is `wanted`."""
    deadline = time.monotonic() + WAIT_S
    shown = ""
    while time.monotonic() < deadline:
        shown = await page.evaluate(RESULT_PANE)
        result: dict[str, Any] = json.loads(shown) if shown else {}
        if result.get("data") == wanted:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"the result pane shows {shown!r}; page errors: {page.errors}")


def offsite(requests: list[str]) -> list[str]:
    return [
        url
        for url in requests
        if urlsplit(url).scheme != "data" and urlsplit(url).hostname not in LOCAL_HOSTS
    ]


async def test_a_query_run_from_graphiql_shows_its_result_without_leaving_the_server(
    server: Server, org: Org, page: Chromium
) -> None:
    await open_graphiql(page, server, org.tokens["viewer"])
    await run(page, VIEWER)

    viewer = {"viewer": {"org": {"name": org.name}, "role": "VIEWER"}}
    assert await result_pane(page, viewer) == {"data": viewer}

    # With the typed token the schema loads, and the explorer plugin lists the fields.
    await page.click('[aria-label="Re-fetch GraphQL schema"]')
    await page.click('[aria-label="Show GraphiQL Explorer"]')
    await page.wait_for(
        "document.querySelector('.graphiql-plugin')?.innerText.includes('cloudAccounts')"
    )

    assets = [url for url in page.requests if urlsplit(url).path.startswith("/graphiql/")]
    assert {urlsplit(url).path for url in assets} >= {
        "/graphiql/react/umd/react.production.min.js",
        "/graphiql/react-dom/umd/react-dom.production.min.js",
        "/graphiql/graphiql/graphiql.min.js",
        "/graphiql/graphiql/graphiql.min.css",
        "/graphiql/@graphiql/plugin-explorer/dist/index.umd.js",
    }
    assert offsite(page.requests) == []
    assert page.errors == []


async def test_a_subscription_run_from_graphiql_receives_events_over_the_websocket(
    server: Server, org: Org, page: Chromium
) -> None:
    token = org.tokens["viewer"]
    await open_graphiql(page, server, token)
    await run(page, STATUS_EVENTS)

    # Register only once the subscription listens, or its event would go to nobody.
    deadline = time.monotonic() + WAIT_S
    while await asyncio.to_thread(server.metric, "spacedock_event_subscribers") < 1:
        assert time.monotonic() < deadline, f"no subscription started; page errors: {page.errors}"
        await asyncio.sleep(0.05)
    space = await register_generic_space(org.admin)

    event = {"spaceId": space["id"], "status": "UNKNOWN", "space": {"name": space["name"]}}
    assert await result_pane(page, {"spaceStatusChanged": event}) == {
        "data": {"spaceStatusChanged": event}
    }

    # The header editor's token authenticated the WebSocket, in connection_init.
    sockets = [url for url in page.requests if urlsplit(url).scheme in ("ws", "wss")]
    assert sockets == [server.ws_url]
    assert json.loads(page.frames_sent[0]) == {
        "type": "connection_init",
        "payload": {"Authorization": f"Bearer {token}"},
    }
    assert offsite(page.requests) == []
    assert page.errors == []
