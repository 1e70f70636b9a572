"""Issue 7: what the server writes down and what /metrics tells.

A GET request carries its variables in the query string, and uvicorn's access log wrote
them out (a mutation's secrets included). Logged paths now end at the `?`. /metrics
exposes process-wide figures only, nothing per org (labels name operations, steps and
outcomes, never an org's objects), and asks for SPACEDOCK_METRICS_TOKEN when it is set.
"""

from __future__ import annotations

import json
import secrets

import aiohttp
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Org
from tests.support import factories as make
from tests.support.attack import PROTOCOL, send
from tests.support.server import Server

METRICS_TOKEN = secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_METRICS_TOKEN": METRICS_TOKEN}


async def test_get_variables_never_reach_the_log(server: Server, org: Org) -> None:
    canary = f"canary-{secrets.token_hex(8)}"
    mutation = make.CREATE_CLOUD_ACCOUNT
    variables = {
        "input": {
            "name": "aws",
            "provider": "AWS",
            "credentials": {**make.AWS_CREDENTIALS, "secretAccessKey": canary},
        }
    }
    refused = await send(
        server,
        method="GET",
        content_type=None,
        token=org.tokens["admin"],
        params={"query": mutation, "variables": json.dumps(variables)},
    )
    assert refused.status in (400, 405) and refused.codes == ["BAD_REQUEST"]
    read = await send(
        server,
        method="GET",
        content_type=None,
        token=org.tokens["viewer"],
        params={
            "query": "query($id: ID!) { space(id: $id) { id } }",
            "variables": json.dumps({"id": canary}),
        },
    )
    assert read.body == {"data": {"space": None}}
    async with websockets.connect(f"{server.ws_url}?token={canary}", subprotocols=[PROTOCOL]):
        pass
    log = server.log()
    assert '"GET /graphql HTTP/1.1" 200' in log  # the access log is on
    assert canary not in log


async def metrics(server: Server, authorization: str | None) -> tuple[int, str]:
    headers = {"Authorization": authorization} if authorization else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.base}/metrics", headers=headers) as reply,
    ):
        return reply.status, await reply.text()


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Basic {METRICS_TOKEN}", f"Bearer {METRICS_TOKEN}x"],
    ids=["missing", "wrong", "not-bearer", "longer"],
)
async def test_metrics_ask_for_the_metrics_token(server: Server, authorization: str | None) -> None:
    status, body = await metrics(server, authorization)
    assert status == 401
    assert json.loads(body)["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


# Every label /metrics has: the histograms' (bounded: names of operations, steps, reason
# codes and outcomes) and prometheus-client's process and Python ones. None names an org,
# a space or an account.
LABELS = {"operation", "type", "transport", "outcome", "step", "le"}
PYTHON_LABELS = {"generation", "implementation", "major", "minor", "patchlevel", "version"}


async def test_metrics_tell_nothing_about_any_org(server: Server, org: Org) -> None:
    space = await make.register_generic_space(org.admin)
    account = await make.create_cloud_account(org.admin)
    status, body = await metrics(server, f"Bearer {METRICS_TOKEN}")
    assert status == 200
    assert "spacedock_event_subscribers" in body
    for private in (org.name, space["id"], space["name"], account["id"], account["name"]):
        assert private not in body
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            assert set(sample.labels) <= LABELS | PYTHON_LABELS, sample
            if not sample.name.startswith("spacedock_"):
                assert not set(sample.labels) & LABELS, sample
