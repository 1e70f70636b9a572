"""Issue 7, defect 3: a huge cluster answer cannot block the server or fill its memory.

A hostile API server answers the namespace list with 60 MB (streamed without a
length, or announced with one), a 60 MB error body, or a 60 MB /version. Each is a
clear PROVIDER_ERROR ("unexpected answer from the API server: too large"), the server stops reading at
SPACEDOCK_CLUSTER_MAX_BODY_BYTES (4 MiB by default) instead of taking all of it,
and another client's /healthz answers while the attack is under way. A list just
under the limit is still decoded and answered (off the event loop), and the call's
timeout covers the reading of a body that drips in.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from providers import kube
from providers.cluster_credentials import ClusterCredentials
from providers.errors import TemporaryError
from sim.kube_standin import HostileAnswer, KubeStandIn, huge_namespace_list
from tests.conftest import Org
from tests.support import factories as make
from tests.support.server import Server

TOO_LARGE = "unexpected answer from the API server: too large, more than 4,194,304 bytes"
HUGE = 60 * 10**6
LIMIT = 4 * 2**20
NAMESPACES = "query($id: ID!) { space(id: $id) { name namespaces { name } } }"
LAST_PROBE = "query($id: ID!) { space(id: $id) { lastProbe { ok error } } }"
LIST_HEAD = b'{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":['


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # Time is not the point here (and a loaded machine decodes slowly): size is.
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600", "SPACEDOCK_LIVE_FIELD_TIMEOUT_S": "20"}


@pytest.fixture(scope="module")
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


@pytest.fixture
def cluster(standin: KubeStandIn) -> Iterator[KubeStandIn]:
    yield standin
    standin.heal()


class Metered:
    """A stream that counts what the stand-in took from it to send."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.taken = 0
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.taken += len(chunk)
            yield chunk


def healthz(server: Server) -> int:
    with urllib.request.urlopen(f"{server.base}/healthz", timeout=10) as response:
        status: int = response.status
        return status


async def healthz_answers_during(server: Server, attack: asyncio.Task[Any]) -> int:
    """How many /healthz calls of another client were answered while `attack` ran."""
    answered = 0
    while not attack.done():
        if await asyncio.to_thread(healthz, server) == 200 and not attack.done():
            answered += 1
    return answered


async def wait_for_call(cluster: KubeStandIn, call: str, before: int) -> None:
    deadline = time.monotonic() + 10
    while cluster.requests[call] == before:
        assert time.monotonic() < deadline, f"{call} never reached the cluster"
        await asyncio.sleep(0.005)


async def test_a_streamed_60_mb_list_is_refused_and_others_are_served(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    stream = Metered(huge_namespace_list(HUGE))
    # A short pause between chunks keeps the attack going long enough to watch others.
    cluster.answers["GET /api/v1/namespaces"] = HostileAnswer(
        LIST_HEAD, stream=iter(stream), pause_s=0.002
    )
    before = cluster.requests["GET /api/v1/namespaces"]

    attack = asyncio.create_task(org.viewer.call(NAMESPACES, {"id": space["id"]}))
    await wait_for_call(cluster, "GET /api/v1/namespaces", before)
    answered = await healthz_answers_during(server, attack)
    response = await attack

    assert response["data"]["space"] == {"name": space["name"], "namespaces": None}
    [error] = response["errors"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR"
    assert error["message"].startswith(TOO_LARGE), error["message"]
    assert "SPACEDOCK_CLUSTER_MAX_BODY_BYTES" in error["message"]
    assert answered >= 1, "no other client was answered while the huge list streamed"
    # The server stopped reading near the limit; socket buffers hold a little more.
    assert stream.taken < 4 * LIMIT, f"the server took {stream.taken:,} bytes of {HUGE:,}"


async def test_an_announced_60_mb_list_is_refused_before_it_is_read(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    cluster.answers["GET /api/v1/namespaces"] = HostileAnswer(LIST_HEAD + b" " * HUGE)
    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})
    assert make.top_level_codes(response) == ["PROVIDER_ERROR"]
    assert response["errors"][0]["message"].startswith(TOO_LARGE)


async def test_a_60_mb_error_body_is_refused_too(org: Org, cluster: KubeStandIn) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    cluster.answers["GET /api/v1/namespaces"] = HostileAnswer(
        b'{"kind":"Status","message":"', status=500, stream=iter([b"x" * 2**20] * 60)
    )
    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})
    assert make.top_level_codes(response) == ["PROVIDER_ERROR"]
    assert response["errors"][0]["message"].startswith(TOO_LARGE)


def namespace_list(names: list[str]) -> bytes:
    items = [{"metadata": {"name": n, "creationTimestamp": "2026-01-01T00:00:00Z"}} for n in names]
    return json.dumps({"kind": "NamespaceList", "items": items}).encode()


async def test_a_list_under_the_limits_is_decoded_off_the_loop_and_answered(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    names = [f"ns-{i:06d}" for i in range(4_500)]  # under the 5,000 results an operation gets
    body = namespace_list(names)
    assert kube.DECODE_ON_LOOP_BYTES < len(body) < LIMIT
    cluster.answers["GET /api/v1/namespaces"] = HostileAnswer(body)
    before = cluster.requests["GET /api/v1/namespaces"]

    listing = asyncio.create_task(org.viewer.call(NAMESPACES, {"id": space["id"]}))
    await wait_for_call(cluster, "GET /api/v1/namespaces", before)
    await healthz_answers_during(server, listing)
    response = await listing

    assert not response["errors"], response["errors"]
    assert [n["name"] for n in response["data"]["space"]["namespaces"]] == names


async def test_more_namespaces_than_an_operation_may_return_are_refused(
    org: Org, cluster: KubeStandIn
) -> None:
    """20,000 tiny namespaces fit in 3 MiB, but rendering them would hold the event loop
    for about half a second: SPACEDOCK_LIVE_ITEMS_PER_REQUEST (5,000) refuses them."""
    space = await make.register_on_standin(org.admin, cluster)
    cluster.answers["GET /api/v1/namespaces"] = HostileAnswer(
        namespace_list([f"n{i}" for i in range(20_000)])
    )
    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})
    assert response["data"]["space"] == {"name": space["name"], "namespaces": None}
    [error] = response["errors"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR"
    assert error["message"].startswith("too many live results in one request: 20,000")


async def test_a_60_mb_version_fails_the_probe_as_too_large(org: Org, cluster: KubeStandIn) -> None:
    stream = Metered(iter([b" " * 2**20] * 60))
    cluster.answers["GET /version"] = HostileAnswer(b'{"gitVersion":"v1', stream=iter(stream))
    space = await make.register_on_standin(org.admin, cluster)
    deadline = time.monotonic() + 15
    while (
        probe := (await org.viewer.data(LAST_PROBE, {"id": space["id"]}))["space"]["lastProbe"]
    ) is None:
        assert time.monotonic() < deadline, "the first probe never ran"
        await asyncio.sleep(0.05)
    assert probe["ok"] is False
    assert probe["error"].startswith(
        "unexpected answer from the API server: too large, more than 65,536 bytes"
    ), probe["error"]
    # Socket buffers and the stand-in's own writes hold some more; the rest was never sent.
    assert stream.taken < HUGE / 2, f"the probe took {stream.taken:,} bytes of {HUGE:,}"


async def test_the_timeout_covers_a_body_that_drips_in(cluster: KubeStandIn) -> None:
    """The headers come at once, the body one namespace a second: the call ends at its
    timeout with a timeout, not when the cluster pleases."""
    cluster.answers["GET /api/v1/namespaces"] = HostileAnswer(
        LIST_HEAD, stream=huge_namespace_list(HUGE), pause_s=1.0
    )
    credentials = ClusterCredentials(server=cluster.url, ca_pem=cluster.ca_pem, token=cluster.token)
    with pytest.raises(TemporaryError) as failed:
        await kube.list_namespaces(credentials, timeout_s=0.5)
    assert failed.value.reason.startswith("timeout")
