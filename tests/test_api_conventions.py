"""The API's cross-cutting conventions, as a client meets them on the wire.

Auth failures are HTTP 401 with a GraphQL-shaped body (and 4403 on a
WebSocket); connection arguments are validated, never clamped; the query
limits refuse a document before anything in it runs; unexpected errors are
masked; health endpoints answer; and a nested list read costs the same number
of SQL statements for 50 spaces as for 5 (no N+1).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from graphql import Source, get_introspection_query
from graphql.language import Lexer, TokenKind
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from core.common.secrets import SecretBox
from tests.conftest import Org
from tests.support import factories as make
from tests.support.server import Server


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # Probes would add their own statements to the SQL counter the N+1 test reads.
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


async def post(
    server: Server, query: str, headers: dict[str, str] | None = None, variables: Any = None
) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.url, json={"query": query, "variables": variables}, headers=headers or {}
        ) as response,
    ):
        return response.status, json.loads(await response.text())


def codes(body: dict[str, Any]) -> list[str]:
    return [error.get("extensions", {}).get("code") for error in body.get("errors") or []]


# -- authentication -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer sdk_not-a-token", "Bearer ", "Basic dXNlcjpwYXNz", "sdk_token-without-scheme"],
)
@pytest.mark.parametrize("query", ["{ viewer { role } }", "{ __schema { queryType { name } } }"])
async def test_missing_or_bad_token_is_401_unauthenticated(
    server: Server, authorization: str | None, query: str
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    status, body = await post(server, query, headers)
    assert status == 401
    assert set(body) == {"errors"}, "no data, not even null"
    [error] = body["errors"]
    assert error["extensions"] == {"code": "UNAUTHENTICATED"}
    assert isinstance(error["message"], str) and error["message"]


async def test_introspection_answers_with_a_token(server: Server, org: Org) -> None:
    status, body = await post(
        server,
        "{ __schema { queryType { name } } }",
        {"Authorization": f"Bearer {org.tokens['viewer']}"},
    )
    assert status == 200
    assert body["data"]["__schema"]["queryType"]["name"] == "Query"


async def test_the_full_introspection_query_of_graphiql_and_gql_answers(
    server: Server, org: Org
) -> None:
    """Explorers and code generators send the standard introspection query, nested deeper
    than the depth limit; introspection fields do not count toward depth."""
    query = get_introspection_query(descriptions=True, input_value_deprecation=True)
    status, body = await post(server, query, {"Authorization": f"Bearer {org.tokens['viewer']}"})
    assert status == 200, body
    assert "errors" not in body, body["errors"]
    names = {kind["name"] for kind in body["data"]["__schema"]["types"]}
    assert {"Query", "Space", "CloudAccount"} <= names


async def websocket_init(server: Server, payload: dict[str, Any] | None) -> dict[str, Any] | int:
    """The server's answer to connection_init: the ack message, or the close code."""
    async with connect(server.ws_url, subprotocols=["graphql-transport-ws"]) as socket:  # type: ignore[list-item]
        message: dict[str, Any] = {"type": "connection_init"}
        if payload is not None:
            message["payload"] = payload
        await socket.send(json.dumps(message))
        try:
            answer: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), 10))
        except ConnectionClosed as closed:
            assert closed.rcvd is not None
            return closed.rcvd.code
        return answer


@pytest.mark.parametrize(
    "payload",
    [None, {}, {"Authorization": "Bearer sdk_not-a-token"}, {"Authorization": 42}, {"token": "x"}],
)
async def test_websocket_without_a_valid_token_closes_4403(
    server: Server, payload: dict[str, Any] | None
) -> None:
    assert await websocket_init(server, payload) == 4403


@pytest.mark.parametrize("key", ["Authorization", "authorization", "AUTHORIZATION"])
async def test_websocket_token_key_is_case_insensitive(server: Server, org: Org, key: str) -> None:
    answer = await websocket_init(server, {key: f"Bearer {org.tokens['viewer']}"})
    assert isinstance(answer, dict) and answer["type"] == "connection_ack"


# -- connection arguments -----------------------------------------------------------------

LISTS = {
    "spaces": "{ spaces(first: $first) { totalCount } }",
    "cloudAccounts": "{ cloudAccounts(first: $first) { totalCount } }",
    "environments": "{ environments(first: $first) { totalCount } }",
    "statusEvents": "{ spaces(first: 1) { nodes { statusEvents(first: $first) { status } } } }",
}


@pytest.mark.parametrize("first", [101, 1000, 0, -1])
@pytest.mark.parametrize("field", list(LISTS))
async def test_first_outside_1_to_100_is_bad_user_input(org: Org, field: str, first: int) -> None:
    await make.register_generic_space(org.admin)  # so nested lists are resolved too
    response = await org.viewer.call("query($first: Int) " + LISTS[field], {"first": first})
    assert make.top_level_codes(response) == ["BAD_USER_INPUT"]


@pytest.mark.parametrize("first", [1, 100])
async def test_first_at_the_bounds_is_accepted(org: Org, first: int) -> None:
    data = await org.viewer.data(
        "query($first: Int) { spaces(first: $first) { totalCount } }", {"first": first}
    )
    assert data["spaces"]["totalCount"] == 0


@pytest.mark.parametrize("after", ["not-a-cursor", "", "c3BjX3h4", "%%%", "x" * 500])
async def test_a_cursor_we_did_not_give_out_is_bad_user_input(org: Org, after: str) -> None:
    response = await org.viewer.call(
        "query($after: String) { spaces(after: $after) { totalCount } }", {"after": after}
    )
    assert make.top_level_codes(response) == ["BAD_USER_INPUT"]


async def test_a_cursor_we_gave_out_pages_on(org: Org) -> None:
    spaces = [await make.register_generic_space(org.admin) for _ in range(3)]
    first = await org.viewer.data("{ spaces(first: 2) { pageInfo { hasNextPage endCursor } } }")
    page = first["spaces"]["pageInfo"]
    assert page["hasNextPage"]
    rest = await org.viewer.data(
        "query($after: String) { spaces(after: $after) { nodes { id } } }",
        {"after": page["endCursor"]},
    )
    assert [n["id"] for n in rest["spaces"]["nodes"]] == [spaces[2]["id"]]


# -- query limits: refused before anything runs ---------------------------------------------


def nested(depth: int) -> str:
    """A createEnvironment selection `depth` levels deep. Depth counts from 0 at the root
    field, as graphql-depth-limit and strawberry's QueryDepthLimiter count it."""
    chain = ["environment", "space", *(["environments", "space"] * 5)]
    inner = "id"
    for field in reversed(chain[: depth - 1]):
        inner = f"{field} {{ {inner} }}"
    return inner


async def environment_names(org: Org) -> list[str]:
    data = await org.viewer.data("{ environments(first: 100) { nodes { name } } }")
    return [n["name"] for n in data["environments"]["nodes"]]


def create_environment_call(
    alias: str, space_id: str, selection: str = "environment { id }"
) -> str:
    return (
        f'{alias}: createEnvironment(input: {{name: "{alias}", spaceId: "{space_id}", '
        f'namespace: "default"}}) {{ {selection} }}'
    )


async def test_depth_limit_is_10(org: Org) -> None:
    space = await make.register_generic_space(org.admin)
    at_limit = "mutation { " + create_environment_call("deep10", space["id"], nested(10)) + " }"
    over = "mutation { " + create_environment_call("deep11", space["id"], nested(11)) + " }"
    assert at_limit.count("{") - over.count("{") == -1

    response = await org.editor.call(over)
    assert response["data"] is None
    assert make.top_level_codes(response) == ["GRAPHQL_VALIDATION_FAILED"]
    assert "depth" in response["errors"][0]["message"]
    assert await environment_names(org) == [], "the refused mutation ran"

    await org.editor.data(at_limit)
    assert await environment_names(org) == ["deep10"]


async def test_alias_limit_is_15(org: Org) -> None:
    space = await make.register_generic_space(org.admin)
    calls = [create_environment_call(f"e{i:02d}", space["id"]) for i in range(16)]

    response = await org.editor.call("mutation { " + " ".join(calls) + " }")
    assert response["data"] is None
    assert make.top_level_codes(response) == ["GRAPHQL_VALIDATION_FAILED"]
    assert await environment_names(org) == [], "a refused mutation ran"

    await org.editor.data("mutation { " + " ".join(calls[:15]) + " }")
    assert len(await environment_names(org)) == 15


RICH_SPACES = (
    "spaces(first: 1) { nodes { PAD name provider spaceType synthetic held status createdAt "
    "config { clusterName region server } cloudAccount { id name } lastProbe { at ok error } "
    "environments { id name namespace gate } statusEvents(first: 5) { previous status at } } "
    "totalCount pageInfo { hasNextPage endCursor } }"
)


def tokens(document: str) -> int:
    lexer = Lexer(Source(document))
    count = 0
    while lexer.advance().kind != TokenKind.EOF:
        count += 1
    return count


def query_of_tokens(total: int) -> str:
    """A realistic read (15 aliases, rich selections) of exactly `total` tokens; the padding
    is spread thin because graphql-core's validation recurses on long runs of one field."""
    aliases = 15
    pads = [1] * aliases

    def build() -> str:
        selections = (
            f"a{i}: " + RICH_SPACES.replace("PAD", "id " * pads[i]) for i in range(aliases)
        )
        return "{ " + " ".join(selections) + " }"

    missing = total - tokens(build())
    assert missing >= 0
    for i in range(missing):
        pads[i % aliases] += 1
    document = build()
    assert tokens(document) == total
    return document


async def test_token_limit_is_2000(org: Org) -> None:
    await org.viewer.data(query_of_tokens(2000))
    response = await org.viewer.call(query_of_tokens(2001))
    assert response["data"] is None
    assert make.top_level_codes(response) == ["GRAPHQL_VALIDATION_FAILED"]
    assert "2000 tokens" in response["errors"][0]["message"]


async def test_a_mutation_over_the_token_limit_does_not_run(org: Org) -> None:
    space = await make.register_generic_space(org.admin)
    too_long = create_environment_call("wordy", space["id"], "environment { " + "id " * 2000 + "}")
    response = await org.editor.call("mutation { " + too_long + " }")
    assert make.top_level_codes(response) == ["GRAPHQL_VALIDATION_FAILED"]
    assert await environment_names(org) == [], "the refused mutation ran"


# -- unexpected errors --------------------------------------------------------------------


async def test_unexpected_errors_are_masked_without_a_traceback(
    server: Server, org: Org, tmp_path: Path
) -> None:
    """A real fault, no mock: the operator restarts with another SPACEDOCK_SECRET_KEY, so
    stored credentials no longer decrypt. The client learns nothing of it; the log does."""
    account = await make.create_cloud_account(org.admin)
    await make.grant_cluster_access(org.admin, account["id"], "prod")
    rekeyed = Server(
        backend=server.backend,
        log_path=tmp_path / "rekeyed.log",
        env={**server.env, "SPACEDOCK_SECRET_KEY": SecretBox.generate_key()},
    ).start()
    try:
        status, body = await post(
            rekeyed,
            make.REGISTER_SPACE,
            {"Authorization": f"Bearer {org.tokens['admin']}"},
            {
                "input": {
                    "name": "rekeyed",
                    "provider": "AWS",
                    "cloudAccountId": account["id"],
                    "config": make.cloud_config("AWS", "prod"),
                }
            },
        )
        log = rekeyed.log()
    finally:
        rekeyed.stop()
    assert status == 200
    assert codes(body) == ["INTERNAL_SERVER_ERROR"]
    [error] = body["errors"]
    assert error["message"] == "Internal server error"
    assert set(error["extensions"]) == {"code"}, "no stacktrace or exception in extensions"
    text = json.dumps(body)
    for revealing in ("Traceback", "RuntimeError", "SPACEDOCK_SECRET_KEY", ".py", "decrypt"):
        assert revealing not in text
    assert "Traceback" in log, "the fault is logged for the operator"
    spaces = await org.viewer.data("{ spaces { totalCount } }")
    assert spaces["spaces"]["totalCount"] == 0, "the failed mutation left nothing behind"


# -- health -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_health_endpoints_answer_200_without_a_token(server: Server, path: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(server.base + path) as response:
        assert response.status == 200
        body = await response.json()
    assert body["status"] == "ok"
    if path == "/readyz":
        assert body["database"] == "reachable"


# -- N+1 ----------------------------------------------------------------------------------

NESTED_READS = {
    "spaces": """
    {
      spaces(first: 100) {
        nodes { cloudAccount { name } environments { name } statusEvents(first: 5) { status } }
      }
    }""",
    "environments": """
    {
      environments(first: 100) {
        nodes { name gate space { name status cloudAccount { name clusterAccess { region } } } }
      }
    }""",
    "sorted, searched spaces": """
    {
      spaces(last: 100, orderBy: {field: NAME, direction: DESC}, filter: {search: "SPACE"}) {
        pageInfo { hasPreviousPage startCursor }
        nodes { cloudAccount { name } environments { name } }
      }
    }""",
    "status events (catch-up)": """
    {
      statusEvents(first: 100) {
        pageInfo { hasNextPage endCursor }
        nodes { id reasonCode space { name statusReasonCode lastProbe { errorCode } } }
      }
    }""",
    "space counts": """
    {
      spaceCounts(filter: {providers: [AWS, GENERIC], held: false}) { total active unknown }
    }""",
    "account spaces": """
    {
      cloudAccounts(first: 100) {
        nodes { clusterAccess { clusterName } spaces(first: 100) { nodes { environments { name } } } }
      }
    }""",
}


async def populate(org: Org, account_id: str, start: int, stop: int) -> None:
    """Spaces start..stop-1, every other one an AWS space, each with two environments."""
    for i in range(start, stop):
        if i % 2:
            space = await make.register_cloud_space(
                org.admin, account_id=account_id, cluster_name=f"c{i}"
            )
        else:
            space = await make.register_generic_space(
                org.admin, server=f"https://127.0.0.1:6443/c{i}"
            )
        for _ in range(2):
            await make.create_environment(org.editor, space["id"])


async def statements_per_read(
    server: Server, org: Org, reads: dict[str, str] = NESTED_READS
) -> dict[str, int]:
    """The fewest SQL statements each read took over three tries, the server quiet."""
    deadline = time.monotonic() + 10
    quiet = server.metric("spacedock_sql_statements_total")
    while time.monotonic() < deadline:  # background work (first probes) settles first
        await asyncio.sleep(0.3)
        now = server.metric("spacedock_sql_statements_total")
        if now == quiet:
            break
        quiet = now
    fewest = {}
    for name, query in reads.items():
        counts = []
        for _ in range(3):
            before = server.metric("spacedock_sql_statements_total")
            await org.viewer.data(query)
            counts.append(int(server.metric("spacedock_sql_statements_total") - before))
        fewest[name] = min(counts)
    return fewest


async def test_a_page_answers_its_spaces_status_events_from_the_read_ahead(
    server: Server, org: Org
) -> None:
    """statusEvents on a page of spaces costs one statement: every space's events read at
    once in the page's own session and served as prepared answers, not through each
    space's resolver and loader, which open a session of their own (at fd831df they did,
    since the text rule on `first` counted as an extension that rules preparing out)."""
    account = await make.create_cloud_account(org.admin)
    await populate(org, account["id"], 0, 4)
    page = "{ spaces(first: 100) { nodes { id environments { name } %s } } }"
    counts = await statements_per_read(
        server,
        org,
        {"without": page % "", "with": page % "statusEvents(first: 5) { status at }"},
    )
    assert counts["with"] == counts["without"] + 1, counts
    spaces = (await org.viewer.data(page % "statusEvents(first: 5) { status }"))["spaces"]
    assert len(spaces["nodes"]) == 4
    assert all(space["statusEvents"] for space in spaces["nodes"]), "registrations are events"


LINKS = """
fragment Links on Space {
  id
  ... on Space { cloudAccount { name } }
  environments { name namespace }
  statusEvents(first: $n) { id status reason }
  two: statusEvents(first: 2) @skip(if: $skipTwo) { id }
}
"""
READ_AHEAD = (
    """
query($n: Int, $skipTwo: Boolean!) {
  spaces(first: 100) {
    edges { node { ...Links } }
    nodes { id newest: statusEvents(first: 1) { status } }
  }
}"""
    + LINKS
)
ONE_SPACE = (
    """
query($id: ID!, $n: Int, $skipTwo: Boolean!) {
  space(id: $id) { ...Links newest: statusEvents(first: 1) { status } }
}"""
    + LINKS
)


@pytest.mark.parametrize("skip_two", [False, True])
@pytest.mark.parametrize("n", [None, 1, 5])
async def test_a_page_read_ahead_answers_as_each_space_alone(
    org: Org, n: int | None, skip_two: bool
) -> None:
    """A page of spaces loads its links at once (through fragments, aliases, variables and
    @skip); each space must read as it does alone, where its fields load one by one."""
    account = await make.create_cloud_account(org.admin)
    await populate(org, account["id"], 0, 3)
    variables = {"n": n, "skipTwo": skip_two}
    spaces = (await org.viewer.data(READ_AHEAD, variables))["spaces"]["nodes"]
    for space in spaces:  # a hold: no probe changes what the reads show from here on
        await make.set_space_status(org.admin, space["id"], "INACTIVE")
    for _ in range(10):  # unless a probe already under way lands between the reads
        page = (await org.viewer.data(READ_AHEAD, variables))["spaces"]
        alone = [
            (await org.viewer.data(ONE_SPACE, {**variables, "id": space["id"]}))["space"]
            for space in spaces
        ]
        if (await org.viewer.data(READ_AHEAD, variables))["spaces"] == page:
            break
    assert len(page["edges"]) == 3
    for edge, node, space in zip(page["edges"], page["nodes"], alone, strict=True):
        assert {**edge["node"], "newest": node["newest"]} == space


async def test_nested_reads_cost_no_statement_per_row(server: Server, org: Org) -> None:
    account = await make.create_cloud_account(org.admin)
    await populate(org, account["id"], 0, 5)
    few = await statements_per_read(server, org)
    await populate(org, account["id"], 5, 50)
    many = await statements_per_read(server, org)

    spaces = (await org.viewer.data(NESTED_READS["spaces"]))["spaces"]["nodes"]
    assert len(spaces) == 50, "the read covers every space"
    assert sum(1 for s in spaces if s["cloudAccount"]) == 25
    assert all(len(s["environments"]) == 2 and s["statusEvents"] for s in spaces)
    print(f"SQL statements per read, 5 spaces -> 50 spaces: {few} -> {many}")
    # A per-row query would add at least 45 statements; allow a couple for background work.
    grew = {name: many[name] - few[name] for name in few}
    assert max(grew.values()) <= 2, f"statements grew with the rows: {grew}"
