"""The README's frontend set-ups, run as they are written there, with the client libraries
pinned in tests/frontend/package.json (`make frontend`), on both databases:

- the live example, bundled with graphql-ws, in headless Chromium on another origin: each
  event carries the space with its id and current status, a stale id is reported once,
  and across a server restart the table misses nothing and sees nothing twice;
- the Apollo Client set-up: a watched table follows the events with no refetch;
- graphql-codegen with the README's config and scalar mappings runs clean over
  schema.graphql and the live example's document, and `tsc --strict` accepts the
  generated types and the Apollo Client and urql set-ups.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sim.ports import HeldPort
from tests.conftest import Org
from tests.support import factories as make
from tests.support.chromium import Chromium
from tests.support.live import subscribers, subscribers_reach
from tests.support.server import REPO, Server

FRONTEND = REPO / "tests" / "frontend"
TOOLS = FRONTEND / "node_modules"
README = REPO / "README.md"
PAGE_PORT = HeldPort()
PAGE_ORIGIN = f"http://127.0.0.1:{PAGE_PORT.number}"
EXAMPLE_WS = "wss://spacedock.example.com/graphql"
EXAMPLE_HTTP = "https://spacedock.example.com/graphql"
WAIT_S = 40.0


def readme_block(marker: str) -> str:
    """The README's fenced code block whose first line is the comment `marker`."""
    blocks = re.findall(r"```(?:js|ts)\n(.*?)```", README.read_text(), re.DOTALL)
    found = [block for block in blocks if block.startswith(f"// {marker}\n")]
    assert len(found) == 1, f"the README has no one block marked {marker!r}"
    return str(found[0])


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # The page's origin is listed; failing probes never reach the threshold, so every
    # status event comes from the test.
    return {
        "SPACEDOCK_CORS_ORIGINS": PAGE_ORIGIN,
        "SPACEDOCK_PROBE_INTERVAL_S": "3600",
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000",
    }


def needed(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(what)
    pytest.skip(what)


@pytest.fixture(scope="module")
def tools() -> Path:
    """The pinned client libraries, installed by `make frontend` (npm) when missing."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        needed("node and npm are needed to run the README's frontend set-ups")
    if not (TOOLS / ".installed").exists():
        made = subprocess.run(["make", "frontend"], cwd=REPO, capture_output=True, text=True)
        if made.returncode != 0:
            needed(f"`make frontend` could not install the client libraries: {made.stderr}")
    return TOOLS


def bundle(tools: Path, directory: Path, source: str, name: str) -> str:
    """`source` (JavaScript or TypeScript) bundled for a page by esbuild, as an app's
    bundler would: its imports resolved from the pinned packages."""
    entry = directory / f"{name}.ts"
    entry.write_text(source)
    (directory / "node_modules").unlink(missing_ok=True)
    (directory / "node_modules").symlink_to(tools)
    out = directory / f"{name}.js"
    built = subprocess.run(
        [
            str(tools / ".bin" / "esbuild"),
            str(entry),
            "--bundle",
            "--format=iife",
            '--define:process.env.NODE_ENV="production"',
            f"--outfile={out}",
            "--log-level=warning",
        ],
        cwd=directory,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    return out.read_text()


@asynccontextmanager
async def page_with(script: str, settings: dict[str, Any]) -> AsyncIterator[None]:
    """A page on PAGE_ORIGIN (another origin than the API's) that sets `window.spacedock`
    and runs `script`."""
    html = (
        "<!doctype html><html><head><title>dashboard</title></head><body>"
        f"<script>window.spacedock = {json.dumps(settings)};</script>"
        '<script src="/app.js"></script></body></html>'
    )
    app = web.Application()

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    async def code(request: web.Request) -> web.Response:
        return web.Response(text=script, content_type="text/javascript")

    app.router.add_get("/", index)
    app.router.add_get("/app.js", code)
    runner = web.AppRunner(app)
    await runner.setup()
    await PAGE_PORT.site(runner).start()
    try:
        yield
    finally:
        await runner.cleanup()


@pytest.fixture
async def browser(chromium: None, tmp_path: Path) -> AsyncIterator[Chromium]:
    async with Chromium(tmp_path / "profile") as opened:
        yield opened


async def eventually(browser: Chromium, expression: str) -> Any:
    return await browser.wait_for(expression, seconds=WAIT_S)


# -- the live example with graphql-ws -----------------------------------------------------

# What the README's example leaves to the app: the token, the ids on screen, and what it
# does with a space and with errors; the page records both.
LIVE_PRELUDE = """
const getToken = () => window.spacedock.token;
const spaceIds = window.spacedock.spaceIds;
window.rendered = [];
window.reported = [];
const render = (space) => window.rendered.push(space);
const showErrors = (errors) => window.reported.push(errors);
"""


async def history(org: Org, ids: list[str], after: str | None) -> list[tuple[str, str]]:
    query = """query($ids: [ID!], $after: String) {
      statusEvents(first: 100, after: $after, spaceIds: $ids) { nodes { spaceId status } }
    }"""
    nodes = (await org.viewer.data(query, {"ids": ids, "after": after}))["statusEvents"]["nodes"]
    return [(node["spaceId"], node["status"]) for node in nodes]


async def test_the_readme_live_example_follows_the_table_through_a_restart(
    server: Server, org: Org, browser: Chromium, tools: Path, tmp_path: Path
) -> None:
    example = readme_block("spacedock live example (graphql-ws)")
    assert EXAMPLE_WS in example
    script = bundle(
        tools, tmp_path, LIVE_PRELUDE + example.replace(EXAMPLE_WS, server.ws_url), "live"
    )
    first = (await make.register_generic_space(org.editor))["id"]
    second = (await make.register_generic_space(org.editor))["id"]
    stale = "spc_" + "f" * 30
    newest = await org.viewer.data("{ statusEvents(last: 1) { nodes { id } } }")
    start = newest["statusEvents"]["nodes"][0]["id"]
    settings = {"token": org.tokens["viewer"], "spaceIds": [first, stale, second]}
    before = await subscribers(server)
    async with page_with(script, settings):
        await browser.open(f"{PAGE_ORIGIN}/")
        # The stale id is reported once, NOT_FOUND with the id, and the others stream.
        reported = await eventually(
            browser, "window.reported && window.reported.length && window.reported"
        )
        [[error]] = reported
        assert error["extensions"] == {"code": "NOT_FOUND", "spaceIds": [stale]}
        await subscribers_reach(server, before + 1)

        await make.set_space_status(org.editor, first, "INACTIVE")
        [held] = await eventually(
            browser, "window.rendered && window.rendered.length === 1 && window.rendered"
        )
        assert held == {
            "id": first,
            "name": held["name"],
            "status": "INACTIVE",
            "statusReason": "operator hold",
            "statusReasonCode": "OPERATOR_HOLD",
            "held": True,
        }

        # A restart: the page reconnects by itself and resumes after the last event it
        # handled, so what happened while it was away arrives, in order, once.
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)
        await make.set_space_status(org.editor, second, "INACTIVE")
        await make.set_space_status(org.editor, first, "ACTIVE")
        await eventually(browser, "window.rendered && window.rendered.length >= 3")
        await make.set_space_status(org.editor, second, "ACTIVE")
        rendered = await eventually(
            browser, "window.rendered && window.rendered.length >= 4 && window.rendered"
        )
        expected = await history(org, [first, second], start)
        assert len(expected) == 4
        assert [(space["id"], space["status"]) for space in rendered] == expected
        # Each space as it is now, by id, as the cache holds it.
        now = await org.viewer.data(
            "query($ids: [ID!]!) { nodes(ids: $ids) { ... on Space { id status held } } }",
            {"ids": [first, second]},
        )
        latest = {space["id"]: space for space in rendered}
        assert [(s["id"], s["status"], s["held"]) for s in now["nodes"]] == [
            (latest[s["id"]]["id"], latest[s["id"]]["status"], latest[s["id"]]["held"])
            for s in now["nodes"]
        ]
        assert await browser.evaluate("window.reported && window.reported.length") == 2, (
            "once per subscription"
        )
        assert not browser.errors


# -- Apollo Client ------------------------------------------------------------------------

APOLLO_PRELUDE = """
import { gql } from "@apollo/client";
function getToken() { return window.spacedock.token; }
"""
APOLLO_APP = """
const TABLE = gql`query Table($ids: [ID!]!) {
  nodes(ids: $ids) { ... on Space { id name status statusReason statusReasonCode held } }
}`;
const FOLLOW = gql`subscription Follow($ids: [ID!], $after: String) {
  spaceStatusChanged(spaceIds: $ids, after: $after) {
    id space { id status statusReason statusReasonCode held }
  }
}`;
window.tables = [];
window.reports = [];
const ids = window.spacedock.spaceIds;
apollo.watchQuery({ query: TABLE, variables: { ids } }).subscribe({
  next: ({ data }) => window.tables.push(data.nodes.map((space) => ({ ...space }))),
});
let after = null;
let following = null;
window.resumed = 0;
function resume() {
  window.resumed += 1;
  following?.unsubscribe();
  following = apollo
    .subscribe({ query: FOLLOW, variables: { ids: [...ids, window.spacedock.stale], after }, errorPolicy: "all" })
    .subscribe({
      next: ({ data, errors }) => {
        if (errors) window.reports.push(errors);
        if (data?.spaceStatusChanged) after = data.spaceStatusChanged.id;
      },
    });
}
resume();
"""


async def test_apollo_client_merges_events_into_a_watched_table_without_a_refetch(
    server: Server, org: Org, browser: Chromium, tools: Path, tmp_path: Path
) -> None:
    setup = readme_block("spacedock Apollo Client set-up")
    setup = setup.replace(EXAMPLE_WS, server.ws_url).replace(EXAMPLE_HTTP, server.url)
    script = bundle(tools, tmp_path, APOLLO_PRELUDE + setup + APOLLO_APP, "apollo")
    first = (await make.register_generic_space(org.editor))["id"]
    second = (await make.register_generic_space(org.editor))["id"]
    stale = "spc_" + "e" * 30
    settings = {"token": org.tokens["viewer"], "spaceIds": [first, second], "stale": stale}
    before = await subscribers(server)
    async with page_with(script, settings):
        await browser.open(f"{PAGE_ORIGIN}/")
        [table] = await eventually(
            browser, "window.tables && window.tables.length === 1 && window.tables"
        )
        assert [space["status"] for space in table] == ["UNKNOWN", "UNKNOWN"]
        [[error]] = await eventually(
            browser, "window.reports && window.reports.length && window.reports"
        )
        assert error["extensions"]["spaceIds"] == [stale]
        await subscribers_reach(server, before + 1)

        await make.set_space_status(org.editor, second, "INACTIVE")
        tables = await eventually(
            browser, "window.tables && window.tables.length >= 2 && window.tables"
        )
        assert [(space["id"], space["status"], space["held"]) for space in tables[-1]] == [
            (first, "UNKNOWN", False),
            (second, "INACTIVE", True),
        ]
        assert tables[-1][1]["statusReasonCode"] == "OPERATOR_HOLD"
        # The table changed through the cache alone: one query over HTTP, none after.
        fetched = [r for r in browser.responses if r["url"] == server.url and r["type"] == "Fetch"]
        assert len(fetched) == 1, fetched

        # Through a restart: the set-up's `connected` listener resumes, and the table follows.
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)
        await eventually(browser, "window.resumed === 2")
        await make.set_space_status(org.editor, first, "INACTIVE")
        await eventually(
            browser,
            "window.tables[window.tables.length - 1].every((space) => space.status === 'INACTIVE')",
        )
        fetched = [r for r in browser.responses if r["url"] == server.url and r["type"] == "Fetch"]
        assert len(fetched) == 1, "no refetch after the reconnect either"
        assert not browser.errors


# -- graphql-codegen and TypeScript ----------------------------------------------------------


# What an app's tsconfig would say: strict, for a bundler, in a browser.
STRICT: tuple[str, ...] = ("--noEmit", "--strict", "--skipLibCheck", "--lib", "es2022,dom")
STRICT += ("--target", "es2022", "--module", "esnext", "--moduleResolution", "bundler")


def node_tool(
    tools: Path, name: str, *arguments: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools / ".bin" / name), *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=90,
    )


def live_document() -> str:
    """The subscription document of the README's live example."""
    found = re.search(
        r"const FOLLOW = `(.*?)`;", readme_block("spacedock live example (graphql-ws)"), re.DOTALL
    )
    assert found is not None
    return found.group(1)


def test_codegen_runs_clean_and_the_set_ups_type_check(tools: Path, tmp_path: Path) -> None:
    project = tmp_path / "app"
    (project / "src").mkdir(parents=True)
    (project / "node_modules").symlink_to(tools)
    shutil.copy(REPO / "schema.graphql", project / "schema.graphql")
    (project / "codegen.ts").write_text(readme_block("spacedock codegen config"))
    (project / "src" / "apollo.ts").write_text(readme_block("spacedock Apollo Client set-up"))
    (project / "src" / "urql.ts").write_text(readme_block("spacedock urql set-up"))
    # The live example's document, typed: DateTime is a string, ids are strings.
    (project / "src" / "live.ts").write_text(
        'import { graphql } from "./gql";\n'
        'import type { FollowSubscription } from "./gql/graphql";\n'
        f"export const FOLLOW = graphql(`{live_document()}`);\n"
        "export function shown(event: FollowSubscription): string {\n"
        "  const at: string = event.spaceStatusChanged.at;\n"
        "  const space = event.spaceStatusChanged.space;\n"
        "  return `${new Date(at).toISOString()} ${space?.id ?? ''} ${space?.status ?? ''}`;\n"
        "}\n"
    )
    generated = node_tool(tools, "graphql-codegen", "--config", "codegen.ts", cwd=project)
    said = generated.stdout + generated.stderr
    assert generated.returncode == 0, said
    assert not re.search(r"warn|error|⚠", said, re.IGNORECASE), said
    checked = node_tool(
        tools, "tsc", *STRICT, "src/apollo.ts", "src/urql.ts", "src/live.ts", cwd=project
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
