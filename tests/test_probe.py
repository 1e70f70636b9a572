"""The reachability probe loop, end to end: a real server probing a Kubernetes API
stand-in registered as a GENERIC space, observed through GraphQL queries and a real
gql WebSocket subscriber.

The server probes every 0.3 s with a 0.5 s timeout and goes INACTIVE after 3
failures in a row, so each transition takes about a second and tests poll with
deadlines instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from gql import gql

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support.factories import (
    REGISTER_SPACE,
    deregister_space,
    register_generic_space,
    set_space_status,
    unique,
)
from tests.support.graphql import GraphQL
from tests.support.server import Server

INTERVAL_S = 0.3
TIMEOUT_S = 0.5
THRESHOLD = 3
WAIT_S = 15.0

STATE = """
query($id: ID!) {
  space(id: $id) {
    status held consecutiveFailures
    lastProbe { at ok version latencyMs error }
    statusEvents(first: 50) { previous status reason at }
  }
}"""
EVENTS = """
subscription {
  spaceStatusChanged { spaceId previous status reason at }
}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": str(INTERVAL_S),
        "SPACEDOCK_PROBE_TIMEOUT_S": str(TIMEOUT_S),
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": str(THRESHOLD),
    }


@pytest.fixture
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


async def register(client: GraphQL, cluster: KubeStandIn) -> str:
    """A GENERIC space for the stand-in; the path prefix makes each server URL unique."""
    space = await register_generic_space(
        client, server=f"{cluster.url}/{unique('c')}", ca=cluster.ca_pem, token=cluster.token
    )
    space_id: str = space["id"]
    return space_id


async def state(client: GraphQL, space_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await client.data(STATE, {"id": space_id}))["space"]
    return found


async def until(
    client: GraphQL, space_id: str, wanted: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not wanted(current := await state(client, space_id)):
        assert asyncio.get_running_loop().time() < deadline, f"no {what} in {WAIT_S}s: {current}"
        await asyncio.sleep(0.03)
    return current


def history(space: dict[str, Any]) -> list[tuple[str | None, str, str]]:
    """The status events, oldest first, as (previous, status, reason)."""
    return [(e["previous"], e["status"], e["reason"]) for e in reversed(space["statusEvents"])]


class Subscriber:
    """A gql WebSocket subscriber to the org's status events, read in the background."""

    def __init__(self, session: Any) -> None:
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task = asyncio.create_task(self._read(session))

    async def _read(self, session: Any) -> None:
        async for result in session.subscribe(gql(EVENTS)):
            self.events.put_nowait(result["spaceStatusChanged"])

    async def take(self, count: int) -> list[dict[str, Any]]:
        return [await asyncio.wait_for(self.events.get(), WAIT_S) for _ in range(count)]


@contextlib.asynccontextmanager
async def subscribed(server: Server, client: GraphQL) -> AsyncIterator[Subscriber]:
    """A listening subscriber: the server's subscriber gauge shows it before we go on."""
    before = server.metric("spacedock_event_subscribers")
    async with client.websocket() as session:
        subscriber = Subscriber(session)
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while await asyncio.to_thread(server.metric, "spacedock_event_subscribers") <= before:
            assert asyncio.get_running_loop().time() < deadline, "the subscription never started"
            await asyncio.sleep(0.02)
        try:
            yield subscriber
        finally:
            subscriber.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await subscriber.task


def probe_ok(version: str = "v1.31.2") -> str:
    return f"probe ok ({version})"


async def test_a_cluster_goes_active_then_inactive_at_the_threshold_and_recovers(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    probes_before = server.metric("spacedock_probes_total")
    async with subscribed(server, org.viewer) as subscriber:
        space_id = await register(org.editor, cluster)

        active = await until(org.viewer, space_id, lambda s: s["status"] == "ACTIVE", "ACTIVE")
        assert active["consecutiveFailures"] == 0
        assert active["lastProbe"]["ok"] is True
        assert active["lastProbe"]["version"] == "v1.31.2"
        assert active["lastProbe"]["latencyMs"] > 0
        assert active["lastProbe"]["error"] is None

        cluster.refuse()
        failing = await until(
            org.viewer, space_id, lambda s: s["consecutiveFailures"] >= 1, "failure"
        )
        # Damping: below the threshold an ACTIVE space stays ACTIVE (caught whenever the
        # poll lands; the history below shows no transition before the third failure).
        below = failing["consecutiveFailures"] < THRESHOLD
        assert failing["status"] == ("ACTIVE" if below else "INACTIVE"), failing
        assert failing["lastProbe"]["ok"] is False
        assert failing["lastProbe"]["error"].startswith("connection refused")
        assert failing["lastProbe"]["version"] is None

        down = await until(org.viewer, space_id, lambda s: s["status"] == "INACTIVE", "INACTIVE")
        assert down["consecutiveFailures"] >= THRESHOLD
        assert not down["held"]

        cluster.heal()
        up = await until(org.viewer, space_id, lambda s: s["status"] == "ACTIVE", "recovery")
        assert up["consecutiveFailures"] == 0
        assert up["lastProbe"]["ok"] is True

        persisted = history(up)
        assert persisted[:2] == [(None, "UNKNOWN", "registered"), ("UNKNOWN", "ACTIVE", probe_ok())]
        previous, status, reason = persisted[2]
        assert (previous, status) == ("ACTIVE", "INACTIVE")
        assert reason.startswith("connection refused"), reason
        assert persisted[3:] == [("INACTIVE", "ACTIVE", probe_ok())]

        live = await subscriber.take(4)
    assert {event["spaceId"] for event in live} == {space_id}
    assert [(e["previous"], e["status"], e["reason"]) for e in live] == persisted
    assert [e["at"] for e in live] == [e["at"] for e in reversed(up["statusEvents"])]
    assert server.metric("spacedock_probes_total") > probes_before


async def test_a_new_space_that_fails_stays_unknown_until_the_threshold(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    cluster.refuse()
    async with subscribed(server, org.viewer) as subscriber:
        space_id = await register(org.editor, cluster)
        failing = await until(
            org.viewer, space_id, lambda s: s["consecutiveFailures"] >= 1, "failure"
        )
        below = failing["consecutiveFailures"] < THRESHOLD
        assert failing["status"] == ("UNKNOWN" if below else "INACTIVE"), failing
        down = await until(org.viewer, space_id, lambda s: s["status"] == "INACTIVE", "INACTIVE")
        live = await subscriber.take(2)
    assert [(e["previous"], e["status"], e["reason"]) for e in live] == history(down)
    (first, (previous, status, reason)) = history(down)
    assert first == (None, "UNKNOWN", "registered")
    assert (previous, status) == ("UNKNOWN", "INACTIVE")
    assert reason.startswith("connection refused")


FAULTS: dict[str, tuple[Callable[[KubeStandIn], None], str]] = {
    "wrong CA": (lambda k: k.present_wrong_ca(), "TLS"),
    "rejected token": (lambda k: setattr(k, "status_code", 401), "401 unauthorized"),
    "forbidden": (lambda k: setattr(k, "status_code", 403), "403 forbidden"),
    "slow answer": (lambda k: setattr(k, "delay_s", 2 * TIMEOUT_S), "timeout"),
    "nothing listening": (lambda k: k.refuse(), "connection refused"),
    "server error": (lambda k: setattr(k, "status_code", 503), "HTTP 503"),
}


@pytest.mark.parametrize("fault", FAULTS)
async def test_each_failure_names_its_reason(org: Org, cluster: KubeStandIn, fault: str) -> None:
    inject, word = FAULTS[fault]
    inject(cluster)
    space_id = await register(org.editor, cluster)
    down = await until(org.viewer, space_id, lambda s: s["status"] == "INACTIVE", "INACTIVE")
    assert down["lastProbe"]["ok"] is False
    assert down["lastProbe"]["error"].startswith(word), down["lastProbe"]
    assert down["lastProbe"]["latencyMs"] is not None
    _, status, reason = history(down)[-1]
    assert status == "INACTIVE"
    # One wording: the event says what lastProbe.error says.
    assert reason == down["lastProbe"]["error"], reason
    assert cluster.token not in reason


async def test_a_held_space_stays_inactive_while_probes_go_on(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    async with subscribed(server, org.viewer) as subscriber:
        space_id = await register(org.editor, cluster)
        await until(org.viewer, space_id, lambda s: s["status"] == "ACTIVE", "ACTIVE")
        held = await set_space_status(org.editor, space_id, "INACTIVE")
        assert (held["status"], held["held"]) == ("INACTIVE", True)
        at_hold = await state(org.viewer, space_id)

        # Healthy probes keep coming and keep lastProbe fresh, yet the space stays INACTIVE.
        later = await until(
            org.viewer,
            space_id,
            lambda s: s["lastProbe"]["at"] > at_hold["lastProbe"]["at"] and s["lastProbe"]["ok"],
            "a new successful probe",
        )
        assert (later["status"], later["held"]) == ("INACTIVE", True)

        # Failures past the threshold change nothing visible either, nor does recovery.
        cluster.refuse()
        failed = await until(
            org.viewer, space_id, lambda s: s["consecutiveFailures"] >= THRESHOLD, "failures"
        )
        assert failed["status"] == "INACTIVE"
        cluster.heal()
        healed = await until(
            org.viewer,
            space_id,
            lambda s: s["consecutiveFailures"] == 0 and s["lastProbe"]["ok"],
            "recovery",
        )
        assert healed["status"] == "INACTIVE"
        assert history(healed)[-1] == ("ACTIVE", "INACTIVE", "operator hold")

        # Lifting the hold shows what the probes say at once.
        lifted = await set_space_status(org.editor, space_id, "ACTIVE")
        assert (lifted["status"], lifted["held"]) == ("ACTIVE", False)
        after = await state(org.viewer, space_id)
        assert history(after)[-1] == ("INACTIVE", "ACTIVE", "hold lifted")

        # The subscriber saw the hold and its lifting, and no probe verdict in between.
        live = await subscriber.take(4)
        assert [(e["previous"], e["status"], e["reason"]) for e in live] == history(after)
        # Nor after: once healthy probes have landed since the lift, a second hold is the
        # very next event.
        await until(
            org.viewer,
            space_id,
            lambda s: s["lastProbe"]["at"] > after["lastProbe"]["at"],
            "a probe after the lift",
        )
        await set_space_status(org.editor, space_id, "INACTIVE")
        (marker,) = await subscriber.take(1)
    assert (marker["previous"], marker["status"], marker["reason"]) == (
        "ACTIVE",
        "INACTIVE",
        "operator hold",
    )


async def probed(witness: KubeStandIn, times: int) -> None:
    """Until the witness cluster's space has been probed `times` more times: rounds of
    the probe loop counted, not waited for."""
    wanted = witness.requests["GET /version"] + times
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while witness.requests["GET /version"] < wanted:
        assert asyncio.get_running_loop().time() < deadline, f"fewer than {times} probes"
        await asyncio.sleep(0.02)


async def test_a_deregistered_space_is_never_probed_again(org: Org, cluster: KubeStandIn) -> None:
    with KubeStandIn() as witness:  # a registered space whose probes count the loop's rounds
        await register(org.editor, witness)
        space_id = await register(org.editor, cluster)
        await until(org.viewer, space_id, lambda s: s["status"] == "ACTIVE", "ACTIVE")
        await deregister_space(org.admin, space_id)
        # A probe already in flight may still land: it ends within TIMEOUT_S, before the
        # witness's next two probes (INTERVAL_S apart) are done.
        await probed(witness, 1 + int(TIMEOUT_S // INTERVAL_S) + 1)
        requests = cluster.requests["GET /version"]
        last_probe = (await state(org.viewer, space_id))["lastProbe"]
        await probed(witness, 5)
    assert cluster.requests["GET /version"] == requests
    assert (await state(org.viewer, space_id))["lastProbe"] == last_probe


async def test_a_cloud_metadata_address_cannot_be_registered(
    org: Org, cluster: KubeStandIn
) -> None:
    payload = await org.editor.mutate(
        REGISTER_SPACE,
        {
            "input": {
                "name": unique("metadata"),
                "provider": "GENERIC",
                "config": {
                    "clusterName": unique("metadata"),
                    "server": "https://169.254.169.254",
                    "caCert": cluster.ca_pem,
                    "serviceAccountToken": cluster.token,
                },
            }
        },
    )
    assert payload["space"] is None
    assert [(e["field"], e["code"]) for e in payload["userErrors"]] == [
        (["input", "config", "server"], "INVALID")
    ]
    assert "169.254.0.0/16" in payload["userErrors"][0]["message"]
