"""Issue 7: text a cluster chooses cannot forge a log line or flood a row.

A hostile API server puts a newline and a fake log line (plus carriage returns,
a bidi override, a Unicode line separator and 10,000 characters) into its Status
messages and its gitVersion. The probe stores them, the probe loop logs the
transition they cause, and a namespace listing returns the message: everywhere
the text arrives as one cleaned line of bounded length, and the server's log
holds no line the cluster wrote.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sim.kube_standin import HostileAnswer, KubeStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.server import Server

FORGED = "2026-01-01 00:00:00 INFO spacedock: admin token rotated FORGED-BY-CLUSTER"
HOSTILE_TEXT = f"denied\n{FORGED}\r\n{FORGED}\u2028{FORGED}\u202e{FORGED}\x1b[2J" + "A" * 10_000
SPACE = """
query($id: ID!) {
  space(id: $id) {
    status statusReason
    lastProbe { ok version error }
    statusEvents { reason }
  }
}"""
NAMESPACES = "query($id: ID!) { space(id: $id) { namespaces { name } } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "0.5",
        "SPACEDOCK_PROBE_TIMEOUT_S": "2",
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1",
    }


@pytest.fixture(scope="module")
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


@pytest.fixture
def cluster(standin: KubeStandIn) -> Iterator[KubeStandIn]:
    yield standin
    standin.heal()


def status_body(code: int, message: str) -> bytes:
    return json.dumps({"kind": "Status", "code": code, "message": message}).encode()


def assert_one_clean_line(text: str, limit: int) -> None:
    assert text.isprintable(), repr(text[:120])
    assert "\u2028" not in text and "\u202e" not in text
    assert len(text) <= limit, len(text)


def assert_log_not_forged(server: Server) -> None:
    for line in server.log().splitlines():
        assert not line.lstrip("\r\x1b").startswith(FORGED), line


async def until(org: Org, space_id: str, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        found: dict[str, Any] = (await org.viewer.data(SPACE, {"id": space_id}))["space"]
        if done(found):
            return found
        assert time.monotonic() < deadline, f"the probes never told: {found}"
        await asyncio.sleep(0.1)


async def test_a_status_message_cannot_forge_a_log_line_or_flood_a_row(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    cluster.answers["GET /version"] = HostileAnswer(status_body(403, HOSTILE_TEXT), status=403)
    space = await make.register_on_standin(org.admin, cluster)

    found = await until(org, space["id"], lambda s: s["status"] == "INACTIVE")

    error = found["lastProbe"]["error"]
    assert error.startswith("403 forbidden") and FORGED in error
    for text in (error, found["statusReason"], found["statusEvents"][-1]["reason"]):
        assert_one_clean_line(text, 400)
    [logged] = [line for line in server.log().splitlines() if f"space {space['id']}: " in line]
    assert "UNKNOWN -> INACTIVE" in logged and FORGED in logged, "logged, on one line"
    assert_log_not_forged(server)


async def test_a_listing_error_returns_the_message_as_one_bounded_line(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    cluster.answers["GET /api/v1/namespaces"] = HostileAnswer(
        status_body(503, HOSTILE_TEXT), status=503
    )
    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})
    [error] = response["errors"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR"
    assert error["message"].startswith("HTTP 503 from the API server: denied")
    assert_one_clean_line(error["message"], 400)
    assert_log_not_forged(server)


async def test_a_git_version_is_stored_clean_and_short(org: Org, cluster: KubeStandIn) -> None:
    version = {"gitVersion": f"v1.31.2\n{FORGED}\x00\u202e" + "9" * 1000}
    cluster.answers["GET /version"] = HostileAnswer(json.dumps(version).encode())
    space = await make.register_on_standin(org.admin, cluster)

    found = await until(org, space["id"], lambda s: s["lastProbe"] is not None)

    assert found["lastProbe"]["ok"] is True
    stored = found["lastProbe"]["version"]
    assert stored.startswith("v1.31.2 2026-01-01")
    assert_one_clean_line(stored, 64)
