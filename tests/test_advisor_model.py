"""The App Advisor's explanations from a model, against a local chat-completions stand-in
that records every request: explanations arrive on findings with the real names put
back, while no request ever held a real name (namespace, object, pod, container, image,
CloudSpace, org) or a secret (a Secret's data, an environment value, what an application
wrote); a throttled model is retried with backoff; with the model down or hanging,
findings still arrive on time; the API key is never logged or returned. In process, the
explainer keeps to its hourly budget and its concurrency."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.advisor import findings as advice
from core.advisor.analysis import analyze
from core.advisor.explainer import Explainer
from core.advisor.ownership import AppIndex
from core.advisor.settings import ModelSettings
from core.common.events import InProcessBus
from core.common.ids import new_id
from core.common.rbac import Role, Viewer
from core.common.secrets import SecretBox
from core.common.services import Services
from core.orgs.bootstrap import create_token
from core.spaces.health import HealthRule
from core.spaces.lifecycle import RegisterSpaceRequest, register
from db.advisor_tables import AdvisorFinding
from db.cloudspace_tables import CloudSpace
from db.engine import Database
from sim import workloads as w
from sim.chat_standin import ChatStandIn
from sim.host_standin import HostStandIn
from tests.conftest import Org
from tests.support.advisor import Tenant, advice_of, watching
from tests.support.cloudspaces import CREATE, ONE, Platform, eventually, serve_platform
from tests.support.factories import generic_config, unique
from tests.support.server import Backend

NAMESPACE = "payments-prod"
WORKLOAD = "checkout-api"
CONTAINER = "checkout"
IMAGE = "registry.acme-corp.example/payments/checkout:2.3.1"
SECRETS = ("s3cr3t-CANARY-db-7731", "CANARY-ENV-4242", "CANARY-LOG-5550")


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatStandIn]:
    with ChatStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("32", "128Gi"), ("32", "128Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host: HostStandIn, chat: ChatStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    env = {
        "SPACEDOCK_ADVISOR_INTERVAL_S": "0.5",
        "SPACEDOCK_ADVISOR_MODEL_URL": chat.base_url,
        "SPACEDOCK_ADVISOR_MODEL": chat.model,
        "SPACEDOCK_ADVISOR_MODEL_API_KEY": chat.api_key,
        "SPACEDOCK_ADVISOR_MODEL_TIMEOUT_S": "2",
        **chat.trust_env,
    }
    yield from serve_platform(backend, host, log_path, env)


@pytest.fixture(scope="module")
def space(platform: Platform) -> tuple[Org, str]:
    async def made() -> tuple[Org, str]:
        org = await platform.tenant("acme-payments")
        payload = await org.editor.mutate(
            CREATE, {"input": {"name": "acme-ledger", "cpu": 4, "memoryMiB": 4096}}
        )
        assert payload["userErrors"] == []
        cloud_space_id: str = payload["cloudSpace"]["id"]

        async def ready() -> bool:
            data = await org.viewer.data(ONE, {"id": cloud_space_id})
            return bool(data["cloudSpace"]["phase"] == "READY")

        await eventually(ready, 90)
        return org, cloud_space_id

    return asyncio.run(made())


async def failing_workload(
    tenant: Tenant, namespace: str, name: str, image: str, exit_code: int = 1
) -> list[dict[str, Any]]:
    """A crash-looping Deployment whose env holds a secret value and whose container wrote
    a secret into its termination message, beside a Secret."""
    await tenant.namespace(namespace)
    await tenant.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db-credentials", "namespace": namespace},
            "data": {"password": base64.b64encode(SECRETS[0].encode()).decode()},
        }
    )
    spec = w.container(CONTAINER, image=image, env={"API_TOKEN": SECRETS[1]})
    made = await tenant.create(w.deployment(namespace, name, [spec]))
    replica_set = await tenant.create(w.replica_set(made))
    pods = []
    for _ in range(2):
        pod = await tenant.create(w.pod_of(replica_set))
        message = f"fatal: token {SECRETS[2]} refused"
        status = w.crash_looping(pod, CONTAINER, "Error", exit_code, message=message)
        pods.append(await tenant.status(pod, status))
    return pods


async def test_explanations_arrive_and_no_request_holds_a_real_name_or_a_secret(
    platform: Platform, space: tuple[Org, str], host: HostStandIn, chat: ChatStandIn
) -> None:
    org, cloud_space_id = space
    tenant = Tenant(host, cloud_space_id)
    async with watching(platform, org, cloud_space_id) as changes, tenant.connected():
        pods = await failing_workload(tenant, NAMESPACE, WORKLOAD, IMAGE)
        await changes.until("crash-loop", WORKLOAD, "NEW")
        explained = (await changes.until("crash-loop", WORKLOAD, "EXPLAINED"))["finding"]
    text = explained["explanation"]
    assert text is not None and explained["explainedAt"]
    assert WORKLOAD in text and NAMESPACE in text  # the placeholders were given back
    assert "<object-" not in text and "<namespace-" not in text
    assert chat.received, "the model was asked"
    real = [
        NAMESPACE,
        WORKLOAD,
        CONTAINER,
        IMAGE,
        "acme-ledger",
        org.name,
        *(p["metadata"]["name"] for p in pods),
    ]
    for body in chat.received:
        for name in real:
            assert name not in body, f"{name!r} reached the model"
        for secret in SECRETS:
            assert secret not in body, "a secret reached the model"
        assert "db-credentials" not in body  # Secrets are never read
    assert "<object-1>" in chat.received[0] and "<namespace-1>" in chat.received[0]
    # The key is a bearer header, never text anyone reads back.
    assert chat.api_key not in platform.server.log()
    listed = await advice_of(org, cloud_space_id)
    assert chat.api_key not in repr(listed)


async def test_a_throttled_model_is_retried_with_backoff(
    platform: Platform, space: tuple[Org, str], host: HostStandIn, chat: ChatStandIn
) -> None:
    org, cloud_space_id = space
    tenant = Tenant(host, cloud_space_id)
    chat.fail(429, times=2)
    before = len(chat.received)
    async with watching(platform, org, cloud_space_id) as changes, tenant.connected():
        await tenant.namespace("throttled")
        made = await tenant.create(
            w.deployment("throttled", "solo", [w.container(probes=False)], replicas=1)
        )
        assert made["metadata"]["uid"]
        await changes.until("readiness-probe-missing", "solo", "EXPLAINED")
    sent = chat.received[before:]
    assert len(sent) > len(set(sent))  # a request refused with 429 was sent again


async def test_with_the_model_down_or_hanging_findings_still_arrive_on_time(
    platform: Platform, space: tuple[Org, str], host: HostStandIn, chat: ChatStandIn
) -> None:
    org, cloud_space_id = space
    tenant = Tenant(host, cloud_space_id)
    try:
        async with watching(platform, org, cloud_space_id) as changes, tenant.connected():
            # Exit codes of their own: no explanation of an earlier finding fits (the cache).
            for mode, namespace, exit_code in (("down", "no-model", 2), ("hang", "slow-model", 3)):
                if mode == "down":
                    chat.down()
                else:
                    chat.up()
                    chat.hang()
                started = asyncio.get_running_loop().time()
                await failing_workload(tenant, namespace, f"{mode}-web", IMAGE, exit_code)
                found = await changes.until("crash-loop", f"{mode}-web", "NEW", timeout_s=20)
                assert found["finding"]["explanation"] is None
                # On time: a few of the 0.5 s runs, not the model's 2 s timeout and retries.
                assert asyncio.get_running_loop().time() - started < 15
    finally:
        chat.hang(False)
        chat.up()


# -- the explainer alone, in this process -------------------------------------------------
@pytest.fixture
async def services(empty_backend: Backend) -> AsyncIterator[Services]:
    made = Services(
        database=Database(empty_backend.url),
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(3600),
    )
    await made.database.migrate()
    try:
        yield made
    finally:
        await made.database.dispose()


async def seeded(services: Services, count: int) -> str:
    """A CloudSpace with `count` findings that each mask to different words."""
    async with services.unit() as unit:
        org, _ = await create_token(unit, unique("org"), "ADMIN")
    viewer = Viewer(org.id, org.name, Role.ADMIN)
    request = RegisterSpaceRequest(
        unique("host"), "GENERIC", "KUBERNETES", None, generic_config(), False
    )
    async with services.unit() as unit:
        host = await register(unit, viewer, services.secrets, request, ())
        row = CloudSpace(
            id=new_id("cs"),
            org_id=org.id,
            name="shop",
            host_space_id=host.id,
            cpu=4,
            memory_mib=4096,
            phase="READY",
            step="refresh",
            next_attempt_at=unit.now,
            created_at=unit.now,
        )
        unit.session.add(row)
    objects: list[Any] = []
    for index in range(count):  # a different exit code each: different words to explain
        deployment, replica_set, pods = w.healthy(f"web-{index}", replicas=1)
        pods[0]["status"] = w.crash_looping(pods[0], "web", "Error", 10 + index)
        objects += [deployment, replica_set, *pods]
    found = [
        f
        for f in analyze(w.snapshot(*objects), frozenset(), AppIndex())
        if f.finding.rule.id == "crash-loop"
    ]
    async with services.unit() as unit:
        await advice.merge(unit, row, found, complete=True, explain=True)
    return row.id


async def explained(services: Services) -> int:
    async with services.read() as session:
        rows = (await session.scalars(sa.select(AdvisorFinding))).all()
    return sum(1 for row in rows if row.explanation is not None)


async def test_the_explainer_keeps_to_its_budget_and_its_concurrency(services: Services) -> None:
    with ChatStandIn(tls=False) as chat:
        await seeded(services, 8)
        budgeted = ModelSettings(
            chat.base_url, chat.model, chat.api_key, concurrency=2, timeout_s=2, calls_per_hour=4
        )
        explainer = Explainer(services, budgeted)
        explainer.start()
        try:
            await eventually(lambda: _at_least(services, 4), 30)
            # The hour's budget is spent: the explainer claims nothing until it frees up.
            assert explainer._budget_left() == 0
            assert explainer.stats.calls == 4 and len(chat.received) == 4
        finally:
            await explainer.stop()
        assert await explained(services) == 4

        chat.hang()  # four findings left; two calls at a time, each waiting on the model
        explainer = Explainer(services, replace(budgeted, calls_per_hour=100))
        explainer.start()
        try:
            await eventually(lambda: _received(chat, 4 + 2), 10)
            assert explainer.loop.stats.in_flight == 2  # the other two wait their turn
        finally:
            chat.hang(False)
            await explainer.stop()


async def _at_least(services: Services, count: int) -> bool:
    return await explained(services) >= count


async def _received(chat: ChatStandIn, count: int) -> bool:
    return len(chat.received) >= count
