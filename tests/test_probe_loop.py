"""The probe loop in-process, where the server process cannot show it: two loops (two
replicas) sharing one database, a probe that fails for a reason other than its
cluster, a database outage, what stop() keeps and drops, and the deny list applied
to resolved addresses. Tests wait on conditions and assert order and counts, never
how long something took.

Each test gets a fresh database (SQLite, and Postgres when
SPACEDOCK_TEST_DATABASE_URL is set) and real stand-in clusters.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import asyncpg  # type: ignore[import-untyped]
import pytest

from core.common.events import InProcessBus
from core.common.rbac import Role, Viewer
from core.common.secrets import SecretBox
from core.common.services import Services, utcnow
from core.orgs.bootstrap import create_token
from core.probing.loop import ProbeLoop, ProbeSettings
from core.spaces.health import HealthRule
from core.spaces.lifecycle import RegisterSpaceRequest, deregister, register
from db import owned
from db.engine import Database
from db.tables import Space
from providers.cluster_credentials import ClusterCredentials
from providers.probe import ProbeOutcome, VersionProber
from sim.kube_standin import KubeStandIn
from tests.conftest import POSTGRES_URL
from tests.support.factories import unique
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


async def until(condition: Callable[[], bool], what: str, within_s: float = 30) -> None:
    """Polls `condition` (bounded): a condition that never holds fails the test by name."""
    deadline = asyncio.get_running_loop().time() + within_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)


async def rows_of(services: Services, ids: list[str]) -> dict[str, Space]:
    async with services.read() as session:
        return {row.id: row for row in await owned.by_ids(session, Space, None, ids)}


@dataclass
class Recorder:
    """Wraps the real prober and notes, in order, each probe's start and end per server."""

    inner: VersionProber
    name: str
    log: list[tuple[str, str, str]] = field(default_factory=list)  # (what, server, replica)

    async def probe(self, credentials: ClusterCredentials) -> ProbeOutcome:
        self.log.append(("start", credentials.server, self.name))
        try:
            return await self.inner.probe(credentials)
        finally:
            self.log.append(("end", credentials.server, self.name))

    async def close(self) -> None:
        await self.inner.close()


async def test_two_loops_share_the_fleet_and_never_probe_a_space_twice_at_once(
    replicas: list[Services],
) -> None:
    settings = ProbeSettings(interval_s=0.5, timeout_s=0.25, failure_threshold=3, concurrency=2)
    log: list[tuple[str, str, str]] = []
    with KubeStandIn() as cluster:
        # Slow enough answers that neither loop can do the whole fleet alone.
        cluster.delay_s = 0.05
        servers = await register_spaces(replicas[0], cluster, 20)
        loops = [
            ProbeLoop(services, Recorder(VersionProber(0.25), f"replica-{i}", log), settings)
            for i, services in enumerate(replicas)
        ]
        started = asyncio.get_running_loop().time()
        for loop in loops:
            loop.start()

        def starts() -> Counter[str]:
            return Counter(server for what, server, _ in log if what == "start")

        await until(
            lambda: set(starts()) == set(servers.values()) and min(starts().values()) >= 3,
            "every space probed three times",
        )
        for loop in loops:
            await loop.stop()
        elapsed = asyncio.get_running_loop().time() - started

    # A space claimed by both loops would be probed by both at once.
    running: Counter[str] = Counter()
    for what, server, _ in log:
        running[server] += 1 if what == "start" else -1
        assert running[server] <= 1, f"{server} probed twice at once"
    # And claimed more than once per interval, it would be probed more often than this
    # (a busy machine only makes fewer probes, never more).
    most = elapsed / (settings.interval_s * (1 - settings.jitter)) + 1
    assert max(starts().values()) <= most, (starts(), elapsed)
    assert {replica for _, _, replica in log} == {"replica-0", "replica-1"}
    assert all(loop.stats.errors == 0 for loop in loops)


async def test_a_probe_that_fails_on_our_side_leaves_the_others_going(
    replicas: list[Services],
) -> None:
    services = replicas[0]
    # A timeout a loaded machine keeps: a healthy probe that timed out would fail the
    # check below for the wrong reason (CI run 4 of stop 28, at 0.1 s).
    settings = ProbeSettings(interval_s=0.2, timeout_s=2.0, failure_threshold=3, concurrency=8)
    with KubeStandIn() as cluster:
        healthy, broken = await register_spaces(services, cluster, 2)
        async with services.unit() as unit:
            # Sealed with another key: its credential cannot be opened (a rotated secret key).
            row = await owned.by_id(unit.session, Space, None, broken)
            assert row is not None
            row.secret_ciphertext = SecretBox(SecretBox.generate_key()).seal({"caCert": "x"})
            unit.session.add(row)
        loop = ProbeLoop(services, VersionProber(settings.timeout_s), settings)
        loop.start()
        await until(
            lambda: loop.stats.errors >= 3 and loop.stats.probes >= 3,
            "three failed lookups of the broken space, three probes of the healthy one",
        )
        await loop.stop()

    rows = await rows_of(services, [healthy, broken])
    assert rows[healthy].probe_status == "ACTIVE"
    assert rows[healthy].last_probe_ok is True
    # No result at all for the broken one: it is not its cluster's fault, so no failure counts.
    assert rows[broken].last_probe_at is None
    assert rows[broken].consecutive_failures == 0


async def test_the_loop_outlives_a_database_outage(
    empty_backend: Backend, replicas: list[Services]
) -> None:
    if empty_backend.name != "postgres":
        pytest.skip("a database outage is staged with Postgres' ALLOW_CONNECTIONS")
    assert POSTGRES_URL is not None
    services = replicas[0]
    settings = ProbeSettings(interval_s=0.2, timeout_s=0.1, failure_threshold=3, concurrency=8)
    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg", "postgresql"))
    database = empty_backend.drop
    try:
        with KubeStandIn() as cluster:
            (space_id,) = await register_spaces(services, cluster, 1)
            loop = ProbeLoop(services, VersionProber(settings.timeout_s), settings)
            loop.start()
            await until(lambda: loop.stats.probes >= 1, "a first probe")
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                database,
            )
            await until(lambda: loop.stats.errors >= 2, "the loop noticing the outage")
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
            outage_ended = utcnow()
            written = loop.stats.probes + 2
            # Results written after the outage: a probe's result that lands in the database.
            await until(lambda: loop.stats.probes >= written, "probing resumed", within_s=60)
            await loop.stop()
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
    row = (await rows_of(services, [space_id]))[space_id]
    # The stored result is a probe made after the outage, not one from before it.
    assert row.last_probe_at is not None and row.last_probe_at > outage_ended
    assert row.last_probe_ok is True
    assert row.probe_status == "ACTIVE"


@dataclass
class GatedProber:
    """Answers ok (a fixed version), but for a gated server only once its gate opens."""

    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    answered: list[str] = field(default_factory=list)

    async def probe(self, credentials: ClusterCredentials) -> ProbeOutcome:
        if (gate := self.gates.get(credentials.server)) is not None:
            await gate.wait()
        self.answered.append(credentials.server)
        return ProbeOutcome(True, 1.0, version="v1.31.2")

    async def close(self) -> None:
        pass


async def test_stop_writes_the_results_in_and_drops_those_of_deregistered_spaces(
    replicas: list[Services],
) -> None:
    services = replicas[0]
    settings = ProbeSettings(interval_s=3600, timeout_s=5, failure_threshold=3, concurrency=8)
    with KubeStandIn() as cluster:
        made = await register_spaces(services, cluster, 3)
    answered, gone, abandoned = made
    prober = GatedProber({made[gone]: asyncio.Event(), made[abandoned]: asyncio.Event()})
    loop = ProbeLoop(services, prober, settings)
    loop.start()
    await until(lambda: prober.answered == [made[answered]], "the ungated probe answering")
    async with services.unit() as unit:
        org_id = (await rows_of(services, [gone]))[gone].org_id
        await deregister(unit, Viewer(org_id, "org", Role.ADMIN), gone)
    prober.gates[made[gone]].set()  # its result lands after the deregistration
    await until(lambda: loop.stats.probes == 2, "the deregistered space's probe answering")
    stopped_at = utcnow()
    await loop.stop(grace_s=0.1)  # the third probe is still waiting on its gate: abandoned

    rows = await rows_of(services, list(made))
    assert rows[answered].last_probe_ok is True
    assert rows[answered].probe_status == "ACTIVE"
    assert rows[gone].last_probe_at is None
    assert rows[gone].probe_status == "UNKNOWN"
    assert rows[abandoned].last_probe_at is None
    # Handed back: due again now for whoever claims next, not an interval (an hour) on.
    assert rows[abandoned].next_probe_at <= utcnow()
    assert rows[abandoned].next_probe_at >= stopped_at
    assert loop.stats.in_flight == 0


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
    assert refused.error == "denied: the address 127.0.0.1 is in the denied network 127.0.0.0/8"
    assert not metadata.ok
    assert metadata.error is not None and "169.254.0.0/16" in metadata.error
