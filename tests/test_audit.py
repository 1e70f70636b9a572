"""The audit log as an admin reads it: every mutation call, allowed or refused, with who
made it, what it named or created, the outcome, and the input without a single secret.
No org sees another's events."""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.access.audit import without_userinfo
from tests.conftest import Org
from tests.support import factories as make
from tests.support.server import Server

EVENTS = """
query($filter: AuditFilter) {
  auditEvents(first: 100, filter: $filter) {
    totalCount
    nodes { id at actor actorKind action targetIds outcome input requestId }
  }
}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


async def events(org: Org, **filter: Any) -> list[dict[str, Any]]:
    found = await org.admin.data(EVENTS, {"filter": filter or None})
    nodes: list[dict[str, Any]] = found["auditEvents"]["nodes"]
    assert found["auditEvents"]["totalCount"] == len(nodes)
    return nodes


async def subject(client: Any) -> str:
    name: str = (await client.data("{ viewer { subject } }"))["viewer"]["subject"]
    return name


async def test_an_allowed_call_is_recorded_with_actor_targets_and_input(org: Org) -> None:
    space = await make.register_generic_space(org.editor, name="audited")
    environment = await make.create_environment(org.editor, space["id"])

    [registered] = await events(org, action="registerSpace")
    assert registered["actor"] == await subject(org.editor)
    assert registered["actorKind"] == "API_TOKEN"
    assert registered["outcome"] == "OK"
    assert registered["targetIds"] == [space["id"]], "the id the call created"
    assert registered["input"]["name"] == "audited"
    assert registered["input"]["provider"] == "GENERIC"
    assert registered["requestId"], "every call carries its request's id"

    [created] = await events(org, action="createEnvironment")
    assert set(created["targetIds"]) == {space["id"], environment["id"]}, "named and created"
    both = await events(org, targetId=space["id"])
    assert [e["action"] for e in both] == ["registerSpace", "createEnvironment"], "oldest first"


async def test_a_refused_call_is_recorded_with_its_codes(org: Org) -> None:
    space = await make.register_generic_space(org.admin)
    refused = await org.viewer.mutate(make.DEREGISTER_SPACE, {"input": {"id": space["id"]}})
    assert [e["code"] for e in refused["userErrors"]] == ["FORBIDDEN"]
    invalid = await org.editor.mutate(
        make.REGISTER_SPACE,
        {"input": {"name": "", "provider": "GENERIC", "config": make.generic_config()}},
    )
    assert invalid["userErrors"]

    [forbidden] = await events(org, action="deregisterSpace")
    assert forbidden["outcome"] == "FORBIDDEN"
    assert forbidden["actor"] == await subject(org.viewer)
    assert forbidden["targetIds"] == [space["id"]]
    state = await org.admin.data(f'{{ space(id: "{space["id"]}") {{ deregisteredAt }} }}')
    assert state["space"]["deregisteredAt"] is None, "the refused call changed nothing"
    outcomes = [e["outcome"] for e in await events(org, action="registerSpace")]
    assert outcomes[0] == "OK" and "INVALID" in outcomes[1]


async def test_no_secret_reaches_a_recorded_input(server: Server, org: Org) -> None:
    canary = f"canary-{secrets.token_hex(8)}"
    await make.create_cloud_account(
        org.admin,
        "AWS",
        credentials={**make.credentials_for("AWS"), "externalId": canary},
    )
    config = make.generic_config(token=f"{canary}-token")
    config["caCert"] = make.ca_pem()
    await org.admin.mutate(
        make.REGISTER_SPACE,
        {"input": {"name": make.unique("s"), "provider": "GENERIC", "config": config}},
    )
    await org.admin.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("s"),
                "provider": "GENERIC",
                "config": {
                    "clusterName": "x",
                    "server": "https://127.0.0.1:6443/x",
                    "caCert": config["caCert"],
                    "clientCertificate": f"{canary}-cert",
                    "clientKey": f"{canary}-key",
                },
            }
        },
    )
    recorded = await events(org)
    [account] = [e for e in recorded if e["action"] == "createCloudAccount"]
    assert account["input"]["credentials"] == "[redacted]"
    spaces = [e for e in recorded if e["action"] == "registerSpace"]
    assert spaces[0]["input"]["config"]["serviceAccountToken"] == "[redacted]"
    assert spaces[0]["input"]["config"]["caCert"] == "[redacted]"
    assert spaces[1]["input"]["config"]["clientKey"] == "[redacted]"
    assert spaces[1]["input"]["config"]["server"] == "https://127.0.0.1:6443/x", "the rest is kept"
    assert canary not in json.dumps(recorded)
    if server.backend.name == "sqlite":
        path = server.backend.url.split("///", 1)[1]
        with sqlite3.connect(path) as stored:
            rows = list(stored.execute("SELECT * FROM audit_events"))
        assert rows and canary not in json.dumps(rows, default=str)


async def test_a_url_with_userinfo_is_recorded_without_it(org: Org) -> None:
    canary = f"canary-{secrets.token_hex(8)}"
    config = make.generic_config(server=f"https://admin:{canary}@127.0.0.1:6443/x")
    await org.admin.mutate(
        make.REGISTER_SPACE,
        {"input": {"name": make.unique("s"), "provider": "GENERIC", "config": config}},
    )
    [recorded] = [e for e in await events(org) if e["action"] == "registerSpace"]
    assert recorded["outcome"] != "OK"  # refused: credentials do not belong in a URL
    assert recorded["input"]["config"]["server"] == "https://[redacted]@127.0.0.1:6443/x"
    assert canary not in json.dumps(recorded)


URL_PARTS = st.sampled_from(["https", "://", "a", "@", "/", "?", "#", " ", ":", "x.y", "é"])


@given(st.lists(URL_PARTS, max_size=30).map("".join))
def test_userinfo_is_redacted_wherever_a_url_holds_one(text: str) -> None:
    redacted = without_userinfo(text)
    for url_start in range(len(redacted)):
        if redacted.startswith("://", url_start):
            authority = re.split(r"[/?#\s]", redacted[url_start + 3 :])[0]
            assert "@" not in authority or authority.startswith("[redacted]@"), redacted
    if "[redacted]" not in redacted:
        assert redacted == text  # nothing but userinfo is ever touched


def test_redaction_is_linear_in_the_value_whatever_it_holds() -> None:
    # A backtracking pattern took seconds of the event loop per 64 KiB value here, and
    # hours on these; each is a single pass now (pytest-timeout bounds the test).
    for hostile in ("a" * 1_000_000, "a://" * 250_000, "a://" + "b" * 1_000_000):
        assert without_userinfo(hostile) == hostile
    assert without_userinfo("x://" + "u" * 1_000_000 + "@h") == "x://[redacted]@h"


async def test_the_log_needs_audit_view(org: Org) -> None:
    for client in (org.editor, org.viewer):
        response = await client.call("{ auditEvents { totalCount } }")
        assert [e["extensions"]["code"] for e in response["errors"]] == ["FORBIDDEN"]
        assert "audit:view" in response["errors"][0]["message"]


async def test_no_org_sees_anothers_events(org: Org, other_org: Org) -> None:
    space = await make.register_generic_space(org.admin)
    theirs = await events(other_org)
    assert space["id"] not in json.dumps(theirs)
    assert await events(other_org, targetId=space["id"]) == []
    assert await events(other_org, actor=await subject(org.admin)) == []


async def test_filters_by_actor_and_time(org: Org) -> None:
    await make.register_generic_space(org.admin)
    await make.register_generic_space(org.editor)
    by_editor = await events(org, actor=await subject(org.editor))
    assert {e["actor"] for e in by_editor} == {await subject(org.editor)}
    latest = (await events(org))[-1]
    assert [e["id"] for e in await events(org, since=latest["at"])][-1] == latest["id"]


def test_every_secret_looking_input_field_is_marked_secret() -> None:
    """The one redaction rule is the SECRET mark: a new credential field must carry it."""
    from graphql import GraphQLBoolean, GraphQLID, GraphQLInputObjectType, get_named_type

    from schema.build import schema

    looks_secret = ("credential", "token", "key", "secret", "password", "cert")
    unmarked = []
    for name, kind in schema._schema.type_map.items():
        if not isinstance(kind, GraphQLInputObjectType):
            continue
        for field_name, field in kind.fields.items():
            definition = (field.extensions or {}).get("strawberry-definition")
            marked = bool(getattr(definition, "metadata", {}).get("secret"))
            # An id names a token, it is none; a flag (removeCredential) holds none either.
            if get_named_type(field.type) in (GraphQLID, GraphQLBoolean):
                continue
            if any(word in field_name.lower() for word in looks_secret) and not marked:
                unmarked.append(f"{name}.{field_name}")
    assert unmarked == [], f"mark these metadata=SECRET: {unmarked}"


async def test_a_clients_request_id_is_recorded(server: Server, org: Org) -> None:
    import aiohttp

    request_id = f"req-{secrets.token_hex(6)}"
    variables = {
        "input": {"name": make.unique("s"), "provider": "GENERIC", "config": make.generic_config()}
    }
    headers = {**org.admin.headers, "X-Request-Id": request_id}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.url, json={"query": make.REGISTER_SPACE, "variables": variables}, headers=headers
        ) as response,
    ):
        assert response.status == 200
    [event] = await events(org, action="registerSpace")
    assert event["requestId"] == request_id
