"""The server gives every org its default CloudSpace, whatever made the org (issue 22, 6).

An org made before the host was configured gets it once a server runs with
SPACEDOCK_DEFAULT_HOST_SPACE; an org made by a `spacedock token create` whose environment
lacks the setting, and first used through SSO, gets it too; one its admin deleted is not
made again; the platform's own org gets none; and two servers on one Postgres database
make exactly one per org.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sim.host_standin import HostStandIn
from sim.oidc_standin import OidcStandIn
from tests.support import factories as make
from tests.support.cloudspaces import DELETE, LIST, default_of, eventually
from tests.support.graphql import GraphQL
from tests.support.server import Backend, Server, mint_token

MADE = "spacedock_default_cloudspaces_made_total"


@dataclass
class Setup:
    server: Server
    platform: GraphQL
    early: GraphQL  # an org made while no host was configured


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("64", "256Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def oidc() -> Iterator[OidcStandIn]:
    with OidcStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def setup(
    backend: Backend,
    host: HostStandIn,
    oidc: OidcStandIn,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    """A server without a host, where the platform registers its host and an org is made;
    then the server restarted with that host as SPACEDOCK_DEFAULT_HOST_SPACE."""
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    env = {
        "SPACEDOCK_PROBE_INTERVAL_S": "3600",
        "SPACEDOCK_VCLUSTER_URL_TEMPLATE": host.vcluster_url_template,
        "SPACEDOCK_DEFAULT_CLOUDSPACE_CPU": "0.5",
        "SPACEDOCK_DEFAULT_CLOUDSPACE_MEMORY_MIB": "256",
        **oidc.server_env(),
    }
    first = Server(backend=backend, log_path=log_path, env=dict(env)).start()
    try:
        platform_token = asyncio.run(mint_token(backend.url, "platform", "admin"))
        early_token = asyncio.run(mint_token(backend.url, f"early-{secrets.token_hex(4)}", "admin"))
        early = GraphQL(first.url, first.ws_url, early_token)
        assert asyncio.run(early.data(LIST))["cloudSpaces"]["totalCount"] == 0
        platform = GraphQL(first.url, first.ws_url, platform_token)
        space = asyncio.run(
            make.register_generic_space(
                platform, name="platform-east", server=host.url, ca=host.ca_pem, token=host.token
            )
        )
    finally:
        first.stop()
    env |= {"SPACEDOCK_DEFAULT_HOST_SPACE": space["id"], "SPACEDOCK_SECRET_KEY": first.secret_key}
    running = Server(backend=backend, log_path=log_path, env=env).start()
    yield Setup(
        running,
        GraphQL(running.url, running.ws_url, platform_token),
        GraphQL(running.url, running.ws_url, early_token),
    )
    running.stop()


async def default_cloud_space(client: GraphQL) -> dict[str, Any] | None:
    """The org's default CloudSpace once it has one (at most one, and named default)."""
    nodes = (await client.data(LIST))["cloudSpaces"]["nodes"]
    defaults = [node for node in nodes if node["isDefault"]]
    assert len(defaults) <= 1, defaults
    return defaults[0] if defaults else None


async def org_made_elsewhere(backend: Backend, role: str = "admin") -> tuple[str, str]:
    """An org made by a `spacedock token create` whose environment has no host set."""
    name = f"elsewhere-{secrets.token_hex(4)}"
    return name, await mint_token(backend.url, name, role)


async def test_an_org_made_before_the_host_was_configured_gets_its_default(setup: Setup) -> None:
    made = await eventually(partial(default_cloud_space, setup.early), 30)
    assert (made["name"], made["quota"]) == ("default", {"cpu": 0.5, "memoryMiB": 256})
    assert made["hostSpace"] is None  # the platform's space, not the tenant's
    # The platform's own org, which owns the host, is no tenant and gets none.
    assert (await setup.platform.data(LIST))["cloudSpaces"]["totalCount"] == 0


async def test_an_org_first_used_through_sso_gets_its_default(
    setup: Setup, backend: Backend, oidc: OidcStandIn
) -> None:
    name, _ = await org_made_elsewhere(backend)
    signed_in = GraphQL(setup.server.url, setup.server.ws_url, oidc.token(org=name))
    made = await eventually(partial(default_cloud_space, signed_in), 30)
    assert made["name"] == "default"
    assert (await signed_in.data(LIST))["cloudSpaces"]["totalCount"] == 1


async def test_a_deleted_default_is_not_made_again(setup: Setup, backend: Backend) -> None:
    _, token = await org_made_elsewhere(backend)
    admin = GraphQL(setup.server.url, setup.server.ws_url, token)
    made = await eventually(partial(default_cloud_space, admin), 30)
    deleted = await admin.mutate(DELETE, {"input": {"id": made["id"], "confirmName": "default"}})
    assert deleted["userErrors"] == []

    async def gone() -> bool:
        return bool((await admin.data(LIST))["cloudSpaces"]["totalCount"] == 0)

    await eventually(gone, 60)
    # Another org given its default after that proves a pass ran since.
    _, later_token = await org_made_elsewhere(backend)
    later = GraphQL(setup.server.url, setup.server.ws_url, later_token)
    await eventually(partial(default_cloud_space, later), 30)
    assert (await admin.data(LIST))["cloudSpaces"]["totalCount"] == 0


async def test_the_cli_with_the_setting_and_the_server_make_one_between_them(
    setup: Setup, backend: Backend
) -> None:
    name = f"cli-{secrets.token_hex(4)}"
    host_id = setup.server.env["SPACEDOCK_DEFAULT_HOST_SPACE"]
    token = await mint_token(backend.url, name, "viewer", host_id)  # made at once
    client = GraphQL(setup.server.url, setup.server.ws_url, token)
    first = default_of(await client.data(LIST))
    # A second token of the org (the org exists: nothing new) and a later pass of the
    # server's leave it with the one.
    await mint_token(backend.url, name, "admin", host_id)
    _, later_token = await org_made_elsewhere(backend)
    later = GraphQL(setup.server.url, setup.server.ws_url, later_token)
    await eventually(partial(default_cloud_space, later), 30)
    listed = (await client.data(LIST))["cloudSpaces"]
    assert listed["totalCount"] == 1 and listed["nodes"][0]["id"] == first["id"]


async def test_two_servers_on_postgres_make_one_default_per_org(
    setup: Setup, backend: Backend, tmp_path: Path
) -> None:
    if backend.name != "postgres":
        pytest.skip("two servers share a database on Postgres")
    second = Server(backend=backend, log_path=tmp_path / "second.log", env=dict(setup.server.env))
    second.start()
    try:
        before = sum(s.metric(MADE) for s in (setup.server, second))
        orgs = await asyncio.gather(*(org_made_elsewhere(backend, "viewer") for _ in range(12)))
        clients = [GraphQL(second.url, second.ws_url, token) for _, token in orgs]
        for client in clients:
            await eventually(partial(default_cloud_space, client), 60)
        for client in clients:
            assert (await client.data(LIST))["cloudSpaces"]["totalCount"] == 1
        made = sum(s.metric(MADE) for s in (setup.server, second)) - before
        assert made == len(orgs)
    finally:
        second.stop()
