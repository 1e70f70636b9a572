"""App delivery survives its process and shares its work: a server killed (SIGKILL) while a
revision is APPLYING is restarted, resumes the revision and writes nothing twice; on
Postgres, two servers on one database deliver many apps without either writing any
app's objects a second time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.host_standin import HostStandIn
from tests.conftest import Org, new_org, stop_checked
from tests.support import apps as support
from tests.support import factories as make
from tests.support.cloudspaces import eventually
from tests.support.graphql import GraphQL
from tests.support.server import Backend, Server

KUSTOMIZATIONS = "kustomizations.kustomize.toolkit.fluxcd.io"
GIT_REPOSITORIES = "gitrepositories.source.toolkit.fluxcd.io"
ENV = {
    "SPACEDOCK_PROBE_INTERVAL_S": "1",
    "SPACEDOCK_PROBE_TIMEOUT_S": "0.5",
    "SPACEDOCK_APP_STATUS_INTERVAL_S": "0.3",
    "SPACEDOCK_APP_RETRY_INTERVAL_S": "0.5",
}


@pytest.fixture(scope="module")
def host(backend: Backend) -> Iterator[HostStandIn]:
    """A host of this backend's own: its counts are of this database's servers alone."""
    with HostStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def server(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    running = Server(backend=backend, log_path=log_path, env=dict(ENV)).start()
    yield running
    stop_checked(running)


async def environment(server: Server, host: HostStandIn, namespace: str) -> tuple[Org, str]:
    org = await new_org(server, "deliver")
    space = await make.register_generic_space(
        org.admin, server=host.url, ca=host.ca_pem, token=host.token
    )
    made = await make.create_environment(org.admin, space["id"], namespace=namespace)
    return org, made["id"]


async def test_a_server_killed_mid_applying_resumes_and_applies_nothing_twice(
    server: Server, host: HostStandIn
) -> None:
    url = "https://git.example/survivor.git"
    host.flux.git(url).commit(
        {"deploy/app.yaml": support.manifests(support.deployment("survivor"))}
    )
    org, environment_id = await environment(server, host, "survivor")
    host.api.hold_applies(kind="Kustomization", name="survivor")  # the apply waits, unanswered
    created = await support.create(
        org.editor, "survivor", {"environmentId": environment_id}, support.git_input(url)
    )
    app_id = created["app"]["id"]
    await support.until_revision(org.viewer, app_id, 1, "APPLYING")

    async def held() -> bool:
        return host.api.applies_held() == 1

    await eventually(held, 30)
    assert server.process is not None
    server.process.kill()  # SIGKILL: no shutdown, no lease handed back
    server.process.wait()
    host.api.release_applies()  # the apply the dead process sent lands now

    async def landed() -> bool:
        found = host.api.find(
            "kustomizations", "survivor", "survivor", group="kustomize.toolkit.fluxcd.io"
        )
        return (
            found is not None and found["metadata"]["annotations"]["spacedock.dev/revision"] == "1"
        )

    await eventually(landed, 10)
    server.start()  # the same database: APPLYING, leased to the dead process until it runs out
    revision = await support.until_revision(org.viewer, app_id, 1, "READY", timeout_s=90)
    assert revision["tries"] == 0
    # The resumed delivery read what was there and wrote none of it again.
    assert host.api.count(verb="apply", resource=KUSTOMIZATIONS, name="survivor") == 1
    assert host.api.count(verb="apply", resource=GIT_REPOSITORIES, name="survivor") == 1
    found = host.api.find(
        "kustomizations", "survivor", "survivor", group="kustomize.toolkit.fluxcd.io"
    )
    assert found is not None and found["metadata"]["generation"] == 1
    states = [r["state"] for r in (await support.app(org.viewer, app_id))["revisions"]["nodes"]]
    assert states == ["READY"]


@pytest.fixture(scope="module")
def replica(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if server.backend.name != "postgres":
        pytest.skip("replicas share a database on Postgres; SQLite serves one process")
    log_path = Path(tmp_path_factory.mktemp("replica")) / "server.log"
    running = Server(backend=server.backend, log_path=log_path, env=dict(server.env)).start()
    yield running
    stop_checked(running)


async def test_two_replicas_never_apply_the_same_revision(
    server: Server, replica: Server, host: HostStandIn
) -> None:
    org, environment_id = await environment(server, host, "fleet")
    names = [f"fleet-{n}" for n in range(16)]
    for name in names:
        host.flux.git(f"https://git.example/{name}.git").commit(
            {"deploy/app.yaml": support.manifests(support.deployment(name))}
        )
    metric = "spacedock_delivery_revisions_applied_total"
    before = {each.url: each.metric(metric) for each in (server, replica)}
    created = []
    # Half through each replica: each wakes its own worker, and both claim from one queue.
    through = [org.editor, GraphQL(replica.url, replica.ws_url, org.editor.token)]
    for index, name in enumerate(names):
        payload = await support.create(
            through[index % 2],
            name,
            {"environmentId": environment_id},
            support.git_input(f"https://git.example/{name}.git"),
        )
        created.append(payload["app"]["id"])
    for app_id in created:
        await support.until_revision(org.viewer, app_id, 1, "READY", timeout_s=90)
    for name in names:
        assert host.api.count(verb="apply", resource=KUSTOMIZATIONS, name=name) == 1, name
        assert host.api.count(verb="apply", resource=GIT_REPOSITORIES, name=name) == 1, name
    applied = {each.url: each.metric(metric) - before[each.url] for each in (server, replica)}
    assert sum(applied.values()) == len(names)
    # Both took part (the claims are shared, not won by one).
    assert all(count > 0 for count in applied.values()), applied
