"""The strict quota's ledger on both databases, in-process: what a pod list ends of the
reservations (the pods it saw; those admitted long enough before it that it should have
seen them), what it keeps (pods admitted while it was being taken), an older list never
replacing a newer one, and in-use as observed plus held."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.cloudspaces import admission
from core.cloudspaces.settings import CloudSpaceSettings
from core.common.events import InProcessBus
from core.common.secrets import SecretBox
from core.common.services import Services
from core.spaces.health import HealthRule
from db import admission as rows
from db.admission_tables import QuotaReservation
from db.cloudspace_tables import CloudSpace
from db.engine import Database
from db.tables import Org, Space
from tests.support.server import Backend

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
MIB = 2**20


async def seeded(services: Services) -> None:
    async with services.unit() as unit:
        unit.session.add(Org(id="org_l", name="ledger", created_at=T0))
        unit.session.add(
            Space(
                id="spc_l",
                org_id="org_l",
                name="host",
                provider="GENERIC",
                space_type="KUBERNETES",
                config_json="{}",
                identity_key="GENERIC/ledger",
                next_probe_at=T0,
                created_at=T0,
            )
        )
        await unit.session.flush()
        unit.session.add(
            CloudSpace(
                id="cs_l",
                org_id="org_l",
                name="ledger",
                host_space_id="spc_l",
                cpu=4.0,
                memory_mib=4096,
                step="refresh",
                next_attempt_at=T0,
                created_at=T0,
            )
        )
    # The key is made once, whoever asks first; the configuration carries its secret.
    first = await admission.webhook_configuration(services, "cs_l", "main")
    again = await admission.webhook_configuration(services, "cs_l", "main")
    assert first is not None and first == again


def held(name: str, cpu_m: int, made_at: datetime) -> QuotaReservation:
    return QuotaReservation(
        cloud_space_id="cs_l",
        vcluster="main",
        namespace="ns",
        name=name,
        cpu_m=cpu_m,
        memory_bytes=cpu_m * MIB,
        made_at=made_at,
    )


async def test_a_pod_list_ends_the_reservations_it_accounts_for(empty_backend: Backend) -> None:
    services = Services(
        database=Database(empty_backend.url),
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(60),
        cloudspaces=CloudSpaceSettings(admission_url="https://spacedock.example"),
    )
    try:
        await services.database.migrate()
        await seeded(services)
        async with services.unit() as unit:
            for reservation in (
                held("seen", 1000, T0),  # in the list: now observed
                held("refused-later", 500, T0 - timedelta(minutes=5)),  # never stored
                held("just-admitted", 250, T0 + timedelta(seconds=1)),  # after the list began
                held("in-flight", 125, T0 - timedelta(seconds=10)),  # maybe not stored yet
            ):
                await rows.reserve(unit.session, reservation)
            await rows.reserve(unit.session, held("in-flight", 100, T0))  # the same pod again
        async with services.read() as session:
            standing = await rows.standing(session, "cs_l")
        assert standing is not None
        assert standing.quota == (4000, 4096 * MIB)
        assert standing.in_use == (1850, 1850 * MIB)

        listed_at = T0 + timedelta(seconds=0.5)
        async with services.unit() as unit:
            recorded = await rows.observe(
                unit.session,
                "cs_l",
                "main",
                (1000, 1000 * MIB),
                listed_at,
                {("ns", "seen"), ("ns", "other")},
                listed_at - admission.UNSEEN_GRACE,
            )
        assert recorded
        async with services.read() as session:
            standing = await rows.standing(session, "cs_l")
            assert await rows.observed(session, "cs_l") == (1000, 1000 * MIB)
        assert standing is not None
        # Observed 1000, still held: just-admitted 250 and in-flight 100.
        assert standing.in_use == (1350, 1350 * MIB)

        # A list taken earlier than the one recorded changes nothing.
        async with services.unit() as unit:
            stale = await rows.observe(
                unit.session, "cs_l", "main", (0, 0), T0, set(), T0 + timedelta(hours=1)
            )
        assert not stale
        async with services.read() as session:
            standing = await rows.standing(session, "cs_l")
        assert standing is not None and standing.in_use == (1350, 1350 * MIB)
    finally:
        await services.database.dispose()


async def test_a_secret_sealed_with_a_lost_key_is_replaced(empty_backend: Backend) -> None:
    """A changed SPACEDOCK_SECRET_KEY (or a restored database): the next configuration
    carries a new secret, and only the new one authenticates."""

    def services_with(key: str) -> Services:
        return Services(
            database=Database(empty_backend.url),
            bus=InProcessBus(),
            secrets=SecretBox(key),
            health=HealthRule(60),
            cloudspaces=CloudSpaceSettings(admission_url="https://spacedock.example"),
        )

    before, after = services_with(SecretBox.generate_key()), services_with(SecretBox.generate_key())
    try:
        await before.database.migrate()
        await seeded(before)
        old = await admission.webhook_configuration(before, "cs_l", "main")
        new = await admission.webhook_configuration(after, "cs_l", "main")
        assert old is not None and new is not None
        secret_of = {
            "old": old["webhooks"][0]["clientConfig"]["url"].rsplit("/", 1)[1],
            "new": new["webhooks"][0]["clientConfig"]["url"].rsplit("/", 1)[1],
        }
        assert secret_of["old"] != secret_of["new"]
        assert await admission.webhook_configuration(after, "cs_l", "main") == new  # kept
        assert await admission.authenticated(after, "cs_l", "main", secret_of["new"])
        assert not await admission.authenticated(after, "cs_l", "main", secret_of["old"])
    finally:
        await before.database.dispose()
        await after.database.dispose()
