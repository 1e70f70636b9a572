"""The reconciler survives its process and shares its work: a server killed (SIGKILL)
mid-PROVISIONING is restarted and the CloudSpace reaches READY with no object created
twice; on Postgres, two servers on one database share the CloudSpaces without running
any step twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sim.host_standin import HostStandIn
from tests.conftest import POSTGRES_URL
from tests.support.cloudspaces import CREATE, ONE, Platform, eventually, key, serve_platform
from tests.support.graphql import GraphQL
from tests.support.server import Backend, Server

T = TypeVar("T")


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("64", "256Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host: HostStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    yield from serve_platform(backend, host, tmp_path_factory.mktemp("server") / "server.log", {})


async def create(client: GraphQL, name: str) -> dict[str, Any]:
    payload = await client.mutate(CREATE, {"input": {"name": name, "cpu": 0.5, "memoryMiB": 256}})
    assert payload["userErrors"] == [], payload["userErrors"]
    created: dict[str, Any] = payload["cloudSpace"]
    return created


async def phase(client: GraphQL, cloud_space_id: str) -> str:
    data = await client.data(ONE, {"id": cloud_space_id})
    found: str = data["cloudSpace"]["phase"]
    return found


async def test_a_server_killed_mid_provisioning_resumes_and_creates_nothing_twice(
    platform: Platform, host: HostStandIn
) -> None:
    tenant = await platform.tenant()
    # The chart's StatefulSet never gets ready while the server runs: Helm keeps waiting.
    host.api.stall("survivor")
    created = await create(tenant.editor, "survivor")
    namespace = f"cs-{key(created['id'])}"

    async def statefulset_written() -> bool:
        return host.api.find("statefulsets", "survivor", namespace, group="apps") is not None

    await eventually(statefulset_written, 90)
    assert await phase(tenant.viewer, created["id"]) == "PROVISIONING"
    server = platform.server
    assert server.process is not None
    server.process.kill()  # SIGKILL: no shutdown, no lease released
    server.process.wait()

    server.start()  # the same database, key and settings
    host.api.unstall("survivor")

    async def ready() -> bool:
        return await phase(tenant.viewer, created["id"]) == "READY"

    await eventually(ready, 90)
    assert host.api.created_twice() == []
    assert host.vcluster(namespace, "survivor").created_twice() == []
    # The steps before the kill were not run again: one apply of its namespace, and one
    # Helm install (a release applied again unchanged is no upgrade).
    assert host.api.count(verb="apply", resource="namespaces", name=namespace) == 1
    assert host.api.find("secrets", "sh.helm.release.v1.survivor.v1", namespace) is not None
    assert host.api.find("secrets", "sh.helm.release.v1.survivor.v2", namespace) is None


@pytest.mark.skipif(POSTGRES_URL is None, reason="replicas share work through Postgres")
async def test_two_servers_on_postgres_share_the_work_and_run_no_step_twice(
    platform: Platform, host: HostStandIn, backend: Backend, tmp_path: Path
) -> None:
    if backend.name != "postgres":
        pytest.skip("two servers need the Postgres database")
    first = platform.server
    second = Server(backend=backend, log_path=tmp_path / "second.log", env=dict(first.env))
    second.start()
    try:
        tenant = await platform.tenant()
        clients = [
            GraphQL(first.url, first.ws_url, tenant.tokens["editor"]),
            GraphQL(second.url, second.ws_url, tenant.tokens["editor"]),
        ]
        steps_before = [s.metric("spacedock_reconcile_steps_total") for s in (first, second)]
        created = [await create(clients[i % 2], f"shared-{i}") for i in range(8)]

        async def all_ready() -> bool:
            phases = [await phase(tenant.viewer, c["id"]) for c in created]
            return all(p == "READY" for p in phases)

        await eventually(all_ready, 90)
        steps = [
            s.metric("spacedock_reconcile_steps_total") - before
            for s, before in zip((first, second), steps_before, strict=True)
        ]
        assert all(done > 0 for done in steps), f"one server did all the work: {steps}"
        assert host.api.created_twice() == []
        for cloud_space in created:
            namespace = f"cs-{key(cloud_space['id'])}"
            # Each provisioning step ran once, whichever server ran it; Helm installed once.
            assert host.api.count(verb="apply", resource="namespaces", name=namespace) == 1
            release = f"sh.helm.release.v1.{cloud_space['name']}.v2"
            assert host.api.find("secrets", release, namespace) is None
            vcluster = host.vcluster(namespace, cloud_space["name"])
            assert vcluster.created_twice() == []
    finally:
        second.stop()
