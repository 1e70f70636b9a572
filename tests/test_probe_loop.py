"""The probe loop in-process, where the server process cannot show it: two loops (two
replicas) sharing one database, a probe that fails for a reason other than its
cluster, a database outage, and the deny list applied to resolved addresses.

Each test gets a fresh database (SQLite, and Postgres when
SPACEDOCK_TEST_DATABASE_URL is set) and real stand-in clusters.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg  # type: ignore[import-untyped]
import pytest

from core.events import InProcessBus
from core.health import HealthRule
from core.probe_loop import ProbeLoop, ProbeSettings
from core.rbac import Role, Viewer
from core.secrets import SecretBox
from core.services import Services
from core.spaces import RegisterSpaceRequest, register
from core.tokens import create_token
from db import spaces as space_repo
from db.engine import Database
from providers.credentials import ClusterCredentials
from providers.probe import ProbeOutcome, VersionProber
from tests.conftest import POSTGRES_URL
from tests.support.factories import unique
from tests.support.kube_standin import KubeStandIn
from tests.support.server import Backend

KEY = SecretBox.generate_key()


def services_for(backend: Backend, interval_s: float) -> Services:
    return Services(
        database=Database(backend.url),
        bus=InProcessBus(),
        secrets=SecretBox(KEY),
        health=HealthRule(interval_s),
    )


@pytest.fixture
async def replicas(empty_backend: Backend) -> AsyncIterator[list[Services]]:
    """Two independent sets of services (engines, pools) on the same database."""
    made = [services_for(empty_backend, 0.5), services_for(empty_backend, 0.5)]
    await made[0].database.migrate()
    yield made
    for services in made:
        await services.database.dispose()


async def register_spaces(services: Services, cluster: KubeStandIn, count: int) -> dict[str, str]:
    """`count` GENERIC spaces on the stand-in: {space id: server URL}."""
    async with services.unit() as unit:
        org, _ = await create_token(unit, unique("org"), "ADMIN")
    viewer = Viewer(org.id, org.name, Role.ADMIN)
    made: dict[str, str] = {}
    async with services.unit() as unit:
        for _ in range(count):
            server = f"{cluster.url}/{unique('c')}"
            config = {
                "clusterName": unique("cluster"),
                "server": server,
                "caCert": cluster.ca_pem,
                "serviceAccountToken": cluster.token,
            }
            request = RegisterSpaceRequest(
                unique("space"), "GENERIC", "KUBERNETES", None, config, False
            )
            space = await register(unit, viewer, services.secrets, request, ())
            made[space.id] = server
    return made


@dataclass
class Recorder:
    """Wraps the real prober and notes which loop probed which server when."""

    inner: VersionProber
    name: str
    probes: list[tuple[str, str, float]] = field(default_factory=list)

    async def probe(self, credentials: ClusterCredentials) -> ProbeOutcome:
        self.probes.append((credentials.server, self.name, asyncio.get_running_loop().time()))
        return await self.inner.probe(credentials)

    async def close(self) -> None:
        await self.inner.close()


async def test_two_loops_share_the_fleet_and_never_probe_a_space_twice_an_interval(
    replicas: list[Services],
) -> None:
    settings = ProbeSettings(interval_s=0.5, timeout_s=0.3, failure_threshold=3, concurrency=2)
    probes: list[tuple[str, str, float]] = []
    with KubeStandIn() as cluster:
        # Slow enough answers that neither loop can do the whole fleet alone.
        cluster.delay_s = 0.05
        servers = await register_spaces(replicas[0], cluster, 20)
        loops = [
            ProbeLoop(services, Recorder(VersionProber(0.3), f"replica-{i}", probes), settings)
            for i, services in enumerate(replicas)
        ]
        for loop in loops:
            loop.start()
        await asyncio.sleep(2.5)
        for loop in loops:
            await loop.stop()

    times: dict[str, list[float]] = defaultdict(list)
    for server, _, at in probes:
        times[server].append(at)
    assert set(times) == set(servers.values())
    # Two loops claiming one space would probe it twice within one answer time (~50 ms);
    # half an interval leaves room for a busy machine delaying a probe after its claim.
    least_gap = settings.interval_s / 2
    for server, started in times.items():
        assert len(started) >= 2, (server, started)
        gaps = [later - earlier for earlier, later in itertools.pairwise(started)]
        assert min(gaps) >= least_gap, (server, gaps)
    assert {name for _, name, _ in probes} == {"replica-0", "replica-1"}
    assert all(loop.stats.errors == 0 for loop in loops)


async def test_a_probe_that_fails_on_our_side_leaves_the_others_going(
    replicas: list[Services],
) -> None:
    services = replicas[0]
    settings = ProbeSettings(interval_s=0.2, timeout_s=0.3, failure_threshold=3, concurrency=8)
    with KubeStandIn() as cluster:
        healthy, broken = await register_spaces(services, cluster, 2)
        async with services.unit() as unit:
            # Sealed with another key: its credential cannot be opened (a rotated secret key).
            foreign = SecretBox(SecretBox.generate_key()).seal({"caCert": "x"})
            await space_repo.update(unit.session, broken, secret_ciphertext=foreign)
        loop = ProbeLoop(services, VersionProber(settings.timeout_s), settings)
        loop.start()
        await asyncio.sleep(1.2)
        await loop.stop()

    async with services.read() as session:
        rows = {
            row.id: row for row in await space_repo.spaces_by_ids(session, None, [healthy, broken])
        }
    assert rows[healthy].probe_status == "ACTIVE"
    assert rows[healthy].last_probe_ok is True
    # No result at all for the broken one: it is not its cluster's fault, so no failure counts.
    assert rows[broken].last_probe_at is None
    assert rows[broken].consecutive_failures == 0
    assert loop.stats.errors >= 3
    assert loop.stats.probes >= 3


async def test_the_loop_outlives_a_database_outage(
    empty_backend: Backend, replicas: list[Services]
) -> None:
    if empty_backend.name != "postgres":
        pytest.skip("a database outage is staged with Postgres' ALLOW_CONNECTIONS")
    assert POSTGRES_URL is not None
    services = replicas[0]
    settings = ProbeSettings(interval_s=0.2, timeout_s=0.3, failure_threshold=3, concurrency=8)
    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg", "postgresql"))
    database = empty_backend.drop
    try:
        with KubeStandIn() as cluster:
            (space_id,) = await register_spaces(services, cluster, 1)
            loop = ProbeLoop(services, VersionProber(settings.timeout_s), settings)
            loop.start()
            await asyncio.sleep(0.5)
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                database,
            )
            await asyncio.sleep(1.5)
            errors_during_outage = loop.stats.errors
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
            before = loop.stats.probes
            deadline = asyncio.get_running_loop().time() + 40
            while loop.stats.probes <= before + 2:
                assert asyncio.get_running_loop().time() < deadline, "probing never resumed"
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)
            await loop.stop()
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
    assert errors_during_outage > 0
    async with services.read() as session:
        (row,) = await space_repo.spaces_by_ids(session, None, [space_id])
    assert row.last_probe_ok is True
    assert row.probe_status == "ACTIVE"


async def test_a_host_name_resolving_into_a_denied_network_is_never_contacted() -> None:
    with KubeStandIn() as cluster:
        by_name = ClusterCredentials(
            server=cluster.url.replace("127.0.0.1", "localhost"),
            ca_pem=cluster.ca_pem,
            token=cluster.token,
        )
        allowed = VersionProber(1.0)
        denying = VersionProber(1.0, deny=(ipaddress.ip_network("127.0.0.0/8"),))
        try:
            reached = await allowed.probe(by_name)
            contacts = cluster.requests["GET /version"]
            refused = await denying.probe(by_name)
            metadata = await denying.probe(
                ClusterCredentials(
                    server="https://169.254.169.254", ca_pem=cluster.ca_pem, token="t"
                )
            )
        finally:
            await allowed.close()
            await denying.close()
        assert cluster.requests["GET /version"] == contacts
    assert reached.ok and reached.version == "v1.31.2"
    assert not refused.ok
    assert (
        refused.error
        == "denied: the API server address 127.0.0.1 is in the denied network 127.0.0.0/8"
    )
    assert not metadata.ok
    assert metadata.error is not None and "169.254.0.0/16" in metadata.error
