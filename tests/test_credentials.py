"""Cluster credentials: cached until shortly before they expire, built only on a miss,
minted once for concurrent callers, evicted when bounded, and minted with no database
connection held (a slow mint, as a cloud round trip can be, leaves a pool of one free).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest

from core.common.events import InProcessBus
from core.common.rbac import Role, Viewer
from core.common.secrets import SecretBox
from core.common.services import Services
from core.orgs.bootstrap import create_token
from core.spaces.health import HealthRule
from core.spaces.lifecycle import RegisterSpaceRequest, register
from core.spaces.namespaces import list_namespaces
from db import owned
from db.engine import Database
from db.tables import Space
from providers.cluster_credentials import REFRESH_MARGIN, ClusterCredentials, ClusterTarget
from providers.credentials import CredentialCache, mint
from resolvers.common.context import Context
from resolvers.spaces import namespaces as namespace_resolvers
from sim.kube_standin import KubeStandIn
from sim.pki import CertificateAuthority
from tests.support.factories import unique
from tests.support.server import Backend

CA = CertificateAuthority().pem


def generic_target(space_id: str, token: str) -> ClusterTarget:
    return ClusterTarget(
        space_id=space_id,
        provider="GENERIC",
        config={"clusterName": "dev", "server": "https://127.0.0.1:6443"},
        secret={"caCert": CA, "serviceAccountToken": token},
    )


def test_a_credential_is_fresh_until_the_refresh_margin_before_expiry() -> None:
    now = datetime.now(UTC)
    static = ClusterCredentials(server="https://x", ca_pem=CA, token="t")
    assert static.fresh(now + timedelta(days=365))
    expiring = ClusterCredentials(
        server="https://x", ca_pem=CA, token="t", expires_at=now + timedelta(minutes=14)
    )
    assert expiring.fresh(now)
    assert expiring.fresh(now + timedelta(minutes=14) - REFRESH_MARGIN - timedelta(seconds=1))
    assert not expiring.fresh(now + timedelta(minutes=14) - REFRESH_MARGIN)


async def test_the_cache_builds_the_target_only_on_a_miss_and_forgets_on_request() -> None:
    cache = CredentialCache()
    built: list[str] = []

    def target(token: str) -> ClusterTarget:
        built.append(token)
        return generic_target("spc_1", token)

    first = await cache.get("spc_1", lambda: target("one"))
    again = await cache.get("spc_1", lambda: target("two"))
    assert first is again and first.token == "one"
    assert built == ["one"]  # no decryption or minting while the credential is fresh

    cache.forget("spc_1")  # e.g. the cluster grant was revoked
    renewed = await cache.get("spc_1", lambda: target("three"))
    assert renewed.token == "three"
    assert built == ["one", "three"]


def test_a_credential_never_shows_its_secrets_in_repr() -> None:
    credentials = ClusterCredentials(
        server="https://x",
        ca_pem=CA,
        token="sekret-token",
        client_certificate_pem="CERT",
        client_key_pem="-----BEGIN PRIVATE KEY-----",
    )
    shown = repr(credentials) + repr(generic_target("spc_1", "sekret-token"))
    assert "sekret-token" not in shown
    assert "PRIVATE KEY" not in shown
    assert "BEGIN CERTIFICATE" not in shown


class GatedMint:
    """The real GENERIC minting, held at a gate like a slow cloud token endpoint."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.calls = 0

    async def __call__(self, target: ClusterTarget) -> ClusterCredentials:
        self.calls += 1
        self.started.set()
        await self.gate.wait()
        return await mint(target)


async def test_concurrent_misses_share_one_mint_and_a_caller_giving_up_cancels_none() -> None:
    minting = GatedMint()
    cache = CredentialCache(mint=minting)
    callers = [asyncio.create_task(cache.get("spc_1", lambda: generic_target("spc_1", "t")))]
    await minting.started.wait()
    callers += [
        asyncio.create_task(cache.get("spc_1", lambda: generic_target("spc_1", "t")))
        for _ in range(4)
    ]
    await asyncio.sleep(0)  # the late callers reach the mint in flight
    callers[0].cancel()  # the caller that started the mint gives up
    minting.gate.set()
    results = await asyncio.gather(*callers[1:])
    assert minting.calls == 1
    assert all(result is results[0] for result in results)
    assert await cache.get("spc_1", lambda: generic_target("spc_1", "other")) is results[0]


async def test_a_failed_mint_reaches_every_waiter_and_is_not_cached() -> None:
    calls = 0

    async def refusing(target: ClusterTarget) -> ClusterCredentials:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        raise RuntimeError("token endpoint down")

    cache = CredentialCache(mint=refusing)
    outcomes = await asyncio.gather(
        *(cache.get("spc_1", lambda: generic_target("spc_1", "t")) for _ in range(3)),
        return_exceptions=True,
    )
    assert calls == 1
    assert all(isinstance(outcome, RuntimeError) for outcome in outcomes)
    with pytest.raises(RuntimeError):
        await cache.get("spc_1", lambda: generic_target("spc_1", "t"))
    assert calls == 2


async def test_the_cache_is_bounded_and_sweeps_expired_and_idle_credentials() -> None:
    now = datetime.now(UTC)
    expiring: dict[str, datetime] = {}

    async def minting(target: ClusterTarget) -> ClusterCredentials:
        return ClusterCredentials(
            server="https://x", ca_pem=CA, token="t", expires_at=expiring.get(target.space_id)
        )

    cache = CredentialCache(mint=minting, max_entries=3, idle=timedelta(0))
    for space_id in [f"spc_{n}" for n in range(5)]:
        await cache.get(space_id, partial(generic_target, space_id, "t"))
    assert len(cache) <= 3  # bounded, the least recently used gone first
    # A zero idle limit sweeps on every mint: what was not asked for since goes.
    expiring["spc_9"] = now + timedelta(hours=1)
    await cache.get("spc_9", lambda: generic_target("spc_9", "t"))
    assert len(cache) == 1

    cache = CredentialCache(mint=minting, max_entries=10, idle=timedelta(hours=1))
    expiring["spc_0"] = now + REFRESH_MARGIN / 2  # stale on arrival: never served
    first = await cache.get("spc_0", lambda: generic_target("spc_0", "t"))
    again = await cache.get("spc_0", lambda: generic_target("spc_0", "t"))
    assert first is not again


@pytest.fixture
async def pool_of_one(empty_backend: Backend) -> AsyncIterator[tuple[Services, GatedMint]]:
    """Services whose database pool holds one connection (a short wait for it), and a
    credential cache whose mints wait at a gate."""
    minting = GatedMint()
    services = Services(
        database=Database(empty_backend.url, pool_size=1, max_overflow=0, pool_timeout_s=5),
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(3600),
        credentials=CredentialCache(mint=minting),
        live_field_timeout_s=60,  # the listing waits on the gate, not on a clock
    )
    await services.database.migrate()
    yield services, minting
    minting.gate.set()
    await services.database.dispose()


async def test_a_slow_mint_holds_no_database_connection(
    pool_of_one: tuple[Services, GatedMint],
) -> None:
    services, minting = pool_of_one
    with KubeStandIn() as cluster:
        async with services.unit() as unit:
            org, _ = await create_token(unit, unique("org"), "ADMIN")
        viewer = Viewer(org.id, org.name, Role.ADMIN)
        config = {
            "clusterName": unique("cluster"),
            "server": cluster.url,
            "caCert": cluster.ca_pem,
            "serviceAccountToken": cluster.token,
        }
        async with services.unit() as unit:
            space = await register(
                unit,
                viewer,
                services.secrets,
                RegisterSpaceRequest(unique("space"), "GENERIC", "KUBERNETES", None, config, False),
                (),
            )
        # createNamespace and a namespace listing, both waiting on the same slow mint.
        name = unique("ns")
        creating = asyncio.create_task(
            namespace_resolvers.create(Context(services, viewer), space.id, name)
        )
        await minting.started.wait()
        listing = asyncio.create_task(
            list_namespaces(services, viewer, space, services.live_calls.budget())
        )

        async with services.read() as session:  # the pool's one connection is free
            found = await owned.by_id(session, Space, org.id, space.id)
        assert found is not None and found.name == space.name
        assert not creating.done() and not listing.done()

        minting.gate.set()
        created, refused = await creating
        listed = await listing
    assert refused == [] and created is not None and created.name == name
    assert "kube-system" in {namespace.name for namespace in listed}
    assert name in cluster.namespaces
    assert minting.calls == 1
