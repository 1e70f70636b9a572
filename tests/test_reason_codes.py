"""Reasons for programs: every StatusReasonCode the probe loop can give against the
Kubernetes stand-in (and cloud accounts without a reachable cloud), with one wording and
one code per reason across the space, its events and its last probe; deregistration as a
transition that subscribers receive.

The probe loop runs fast here (threshold 2), with a timeout that a loaded machine's
answers stay well within.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sim import clouds
from sim.kube_standin import HostileAnswer, KubeStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.live import next_item, subscription

WAIT_S = 40.0
STATE = """
query($id: ID!) {
  space(id: $id) {
    status statusReason statusReasonCode held consecutiveFailures deregisteredAt
    lastProbe { ok error errorCode }
    statusEvents(first: 50) { id previous status reason reasonCode }
  }
}"""
EVENTS = """
subscription($ids: [ID!]) {
  spaceStatusChanged(spaceIds: $ids) { id spaceId previous status reason reasonCode }
}"""
DEREGISTER = f"""
mutation($input: DeregisterSpaceInput!) {{
  deregisterSpace(input: $input) {{
    space {{ id status statusReason statusReasonCode deregisteredAt lastProbe {{ ok version }} }}
    {make.USER_ERRORS}
  }}
}}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "0.3",
        "SPACEDOCK_PROBE_TIMEOUT_S": "1.5",
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "2",
    }


@pytest.fixture
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


async def register(org: Org, cluster: KubeStandIn) -> str:
    space_id: str = (await make.register_on_standin(org.editor, cluster))["id"]
    return space_id


async def until(
    org: Org, space_id: str, done: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        space: dict[str, Any] = (await org.viewer.data(STATE, {"id": space_id}))["space"]
        if done(space):
            return space
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S}s: {space}"
        await asyncio.sleep(0.05)


def one_wording(space: dict[str, Any]) -> None:
    """The space, its latest event and its last probe name a failure the same way."""
    latest = space["statusEvents"][0]
    assert space["statusReason"] == latest["reason"] == space["lastProbe"]["error"]
    assert space["statusReasonCode"] == latest["reasonCode"] == space["lastProbe"]["errorCode"]


FAULTS: dict[str, tuple[Callable[[KubeStandIn], None], str, str]] = {
    "wrong CA": (lambda k: k.present_wrong_ca(), "TLS", "TLS"),
    "rejected token": (
        lambda k: setattr(k, "status_code", 401),
        "401 unauthorized",
        "UNAUTHORIZED",
    ),
    "forbidden": (lambda k: setattr(k, "status_code", 403), "403 forbidden", "FORBIDDEN"),
    "slow answer": (lambda k: setattr(k, "delay_s", 4.0), "timeout", "TIMEOUT"),
    "nothing listening": (lambda k: k.refuse(), "connection refused", "CONNECTION_REFUSED"),
    "server error": (lambda k: setattr(k, "status_code", 503), "HTTP 503", "HTTP_ERROR"),
    "not found": (lambda k: setattr(k, "status_code", 404), "HTTP 404", "HTTP_ERROR"),
    "not a version": (
        lambda k: k.answers.__setitem__("GET /version", HostileAnswer(b'{"kind": "Status"}')),
        "HTTP 200",
        "BAD_RESPONSE",
    ),
}


@pytest.mark.parametrize("fault", FAULTS)
async def test_each_failure_has_one_wording_and_one_code(
    org: Org, cluster: KubeStandIn, fault: str
) -> None:
    inject, words, code = FAULTS[fault]
    inject(cluster)
    space_id = await register(org, cluster)
    down = await until(org, space_id, lambda s: s["status"] == "INACTIVE", "INACTIVE")
    assert down["statusReason"].startswith(words), down
    assert down["statusReasonCode"] == code
    one_wording(down)
    assert [e["reasonCode"] for e in reversed(down["statusEvents"])] == ["REGISTERED", code]


async def test_unknown_with_failures_counting_says_why(org: Org, cluster: KubeStandIn) -> None:
    cluster.refuse()
    space_id = await register(org, cluster)
    fresh = (await org.viewer.data(STATE, {"id": space_id}))["space"]
    if fresh["consecutiveFailures"] == 0:
        assert (fresh["statusReason"], fresh["statusReasonCode"]) == ("registered", "REGISTERED")
    counting = await until(
        org,
        space_id,
        lambda s: s["status"] == "UNKNOWN" and s["consecutiveFailures"] >= 1,
        "a failure below the threshold",
    )
    assert counting["statusReason"].startswith("connection refused")
    assert counting["statusReasonCode"] == "CONNECTION_REFUSED"
    assert counting["statusReason"] == counting["lastProbe"]["error"]


async def test_success_hold_and_lifting_have_their_codes(org: Org, cluster: KubeStandIn) -> None:
    space_id = await register(org, cluster)
    up = await until(org, space_id, lambda s: s["status"] == "ACTIVE", "ACTIVE")
    assert (up["statusReason"], up["statusReasonCode"]) == (None, None), "healthy needs no why"
    assert up["lastProbe"] == {"ok": True, "error": None, "errorCode": None}
    await make.set_space_status(org.editor, space_id, "INACTIVE")
    held = (await org.viewer.data(STATE, {"id": space_id}))["space"]
    assert (held["statusReason"], held["statusReasonCode"]) == ("operator hold", "OPERATOR_HOLD")
    await make.set_space_status(org.editor, space_id, "ACTIVE")
    lifted = (await org.viewer.data(STATE, {"id": space_id}))["space"]
    assert [(e["reason"], e["reasonCode"]) for e in reversed(lifted["statusEvents"])] == [
        ("registered", "REGISTERED"),
        ("probe ok (v1.31.2)", "PROBE_OK"),
        ("operator hold", "OPERATOR_HOLD"),
        ("hold lifted", "HOLD_LIFTED"),
    ]


async def test_cloud_credentials_unavailable_then_access_revoked(org: Org) -> None:
    account = await make.create_cloud_account(org.admin)
    space = await make.register_cloud_space(org.admin, account_id=account["id"])
    await until(org, space["id"], lambda s: s["status"] == "ACTIVE", "ACTIVE")  # minted, held
    # The cluster goes away on the cloud: the held credential is refused (UNAUTHORIZED), so
    # it is dropped, and minting another fails from then on.
    clouds.active().remove_cluster("AWS", space["config"]["clusterName"], space["config"]["region"])
    unavailable = await until(
        org,
        space["id"],
        # A later probe may time out minting on a loaded machine (the cloud stand-in is slow
        # to answer), naming a different failure: wait for a probe that names this one.
        lambda s: (
            s["statusReasonCode"] == "CREDENTIALS_UNAVAILABLE"
            and (s["lastProbe"] or {}).get("errorCode") == "CREDENTIALS_UNAVAILABLE"
        ),
        "INACTIVE without a credential",
    )
    assert unavailable["status"] == "INACTIVE"
    one_wording(unavailable)
    config = space["config"]
    revoked = await org.admin.mutate(
        make.REVOKE_CLUSTER_ACCESS,
        {
            "input": {
                "cloudAccountId": account["id"],
                "region": config["region"],
                "clusterName": config["clusterName"],
            }
        },
    )
    make.succeeded(revoked)
    gone = await until(
        org, space["id"], lambda s: s["statusReasonCode"] == "ACCESS_REVOKED", "ACCESS_REVOKED"
    )
    assert gone["statusReason"].startswith("cluster access revoked")
    assert gone["lastProbe"]["errorCode"] == "ACCESS_REVOKED"


# -- deregistration ---------------------------------------------------------------------------


async def test_deregistration_is_a_transition_subscribers_receive(
    org: Org, cluster: KubeStandIn
) -> None:
    space_id = await register(org, cluster)
    await until(org, space_id, lambda s: s["status"] == "ACTIVE", "ACTIVE")
    async with subscription(org.viewer, EVENTS, {"ids": [space_id]}) as received:
        # The subscription is live once it has seen an event: a hold and its lifting.
        for _ in range(50):
            await make.set_space_status(org.editor, space_id, "INACTIVE")
            await make.set_space_status(org.editor, space_id, "ACTIVE")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(received.get(), 0.5)
                break
        payload = await org.admin.mutate(DEREGISTER, {"input": {"id": space_id}})
        while (event := await next_item(received))["reasonCode"] != "DEREGISTERED":
            pass
    space = make.succeeded(payload)["space"]
    assert space["status"] == "INACTIVE"
    assert (space["statusReason"], space["statusReasonCode"]) == ("deregistered", "DEREGISTERED")
    assert space["lastProbe"]["ok"] is True, "the last probe stays as history"
    assert event["status"] == "INACTIVE" and event["reason"] == "deregistered"
    after = (await org.viewer.data(STATE, {"id": space_id}))["space"]
    assert after["statusEvents"][0]["id"] == event["id"]
    assert after["status"] == "INACTIVE" and after["statusReasonCode"] == "DEREGISTERED"
    listed = await org.viewer.data(
        "query { spaces(filter: {includeDeregistered: true, status: [INACTIVE]}) { nodes { id } } }"
    )
    assert {"id": space_id} in listed["spaces"]["nodes"]


async def test_a_held_space_deregistered_says_deregistered(org: Org, cluster: KubeStandIn) -> None:
    space_id = await register(org, cluster)
    await make.set_space_status(org.editor, space_id, "INACTIVE")
    payload = await org.admin.mutate(DEREGISTER, {"input": {"id": space_id}})
    space = make.succeeded(payload)["space"]
    assert (space["status"], space["statusReasonCode"]) == ("INACTIVE", "DEREGISTERED")
    events = (await org.viewer.data(STATE, {"id": space_id}))["space"]["statusEvents"]
    assert (events[0]["previous"], events[0]["status"], events[0]["reasonCode"]) == (
        "INACTIVE",
        "INACTIVE",
        "DEREGISTERED",
    )
