"""Rotating the sealing key without downtime (issue 25), as an operator does it, on SQLite
and on Postgres: secrets of every kind sealed under key A (cloud account credentials of
the three clouds, a space's token, an imported kubeconfig's client certificate and key);
the server restarted with `B,A`; `spacedock secrets reseal` run while it serves and while
an admin keeps rotating an account's credentials; then the server restarted with B alone,
where every secret still works through the API and the last rotation is the one in force.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from core.common.events import InProcessBus
from core.common.reseal import reseal
from core.common.secrets import SecretBox
from core.common.services import Services
from core.spaces.health import HealthRule
from db import app_tables, cloudspace_tables, sealed, tables
from db.admission_tables import AdmissionKey
from db.engine import Database
from sim import clouds as cloud_standins
from sim.kube_standin import KubeStandIn
from tests.conftest import Org, new_org, stop_checked
from tests.support import factories as make
from tests.support.graphql import GraphQL
from tests.support.server import REPO, Backend, Server

CLUSTERS = "query($id: ID!) { cloudAccount(id: $id) { clusters { name region } } }"
NAMESPACES = "query($id: ID!) { space(id: $id) { namespaces { name } } }"
RESEALED = """
{ auditEvents(first: 10, filter: { action: "resealSecrets" }) {
    nodes { actorKind via input targetIds } } }"""
PROGRESS = re.compile(r"^([a-z ]+): (\d+)/(\d+) checked", re.M)


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


def spacedock(backend: Backend, keys: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api", *args],
        cwd=REPO,
        env={**os.environ, "SPACEDOCK_DATABASE_URL": backend.url, "SPACEDOCK_SECRET_KEY": keys},
        capture_output=True,
        text=True,
        timeout=120,
    )


def serve(backend: Backend, keys: str, clouds: cloud_standins.Clouds, log: Path) -> Server:
    # A live namespace list mints a cloud token first: on a busy machine that may take
    # longer than the default 2 s, which would say nothing about the keys.
    env = {**clouds.env, "SPACEDOCK_SECRET_KEY": keys, "SPACEDOCK_LIVE_FIELD_TIMEOUT_S": "20"}
    return Server(backend=backend, log_path=log, env=env).start()


def imported_kubeconfig(kube: KubeStandIn, path: Path) -> Path:
    pair = kube.client_certificate("rotation")

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "lab",
                        "cluster": {
                            "server": f"{kube.url}/imported",
                            "certificate-authority-data": b64(kube.ca_pem),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "lab",
                        "user": {
                            "client-certificate-data": b64(pair.certificate_pem),
                            "client-key-data": b64(pair.key_pem),
                        },
                    }
                ],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}],
                "current-context": "lab",
            }
        )
    )
    return path


def at(org: Org, server: Server) -> Org:
    """The org's callers, pointed at another server process on the same database."""
    clients = {
        role: GraphQL(server.url, server.ws_url, token) for role, token in org.tokens.items()
    }
    return Org(name=org.name, tokens=org.tokens, **clients)


async def regions_seen(org: Org, account_id: str) -> set[str]:
    data = await org.viewer.data(CLUSTERS, {"id": account_id})
    return {cluster["region"] for cluster in data["cloudAccount"]["clusters"]}


async def rotate_regions(org: Org, account_id: str, regions: list[str]) -> None:
    credentials = {**make.credentials_for("AWS"), "regions": regions}
    rotated = await org.admin.mutate(
        make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS,
        {"input": {"id": account_id, "credentials": credentials}},
    )
    make.succeeded(rotated)


async def everything_works(org: Org, accounts: dict[str, str], spaces: list[str]) -> None:
    """Every sealed secret, used through the API: discovery opens the accounts'
    credentials, a live namespace list opens a space's (or mints with its account's)."""
    for provider, account_id in accounts.items():
        response = await org.viewer.call(CLUSTERS, {"id": account_id})
        assert not response["errors"], (provider, response["errors"])
    for space_id in spaces:
        data = await org.viewer.data(NAMESPACES, {"id": space_id})
        assert {"name": "default"} in data["space"]["namespaces"], space_id


async def test_a_key_is_rotated_while_the_server_serves(
    backend: Backend,
    clouds: cloud_standins.Clouds,
    kube: KubeStandIn,
    tmp_path: Path,
) -> None:
    old, new = SecretBox.generate_key(), SecretBox.generate_key()
    first = serve(backend, old, clouds, tmp_path / "old.log")
    try:
        org = await new_org(first)
        accounts = {
            provider: (await make.create_cloud_account(org.admin, provider))["id"]
            for provider in ("GCP", "AZURE")
        }
        accounts["AWS"] = (
            await make.create_cloud_account(
                org.admin,
                "AWS",
                credentials={**make.credentials_for("AWS"), "regions": ["us-east-1"]},
            )
        )["id"]
        # A cluster in each region, so discovery tells which regions the credentials hold.
        clouds.add_cluster("AWS", make.unique("home"), "us-east-1")
        clouds.add_cluster("AWS", make.unique("away"), "eu-west-1")
        gke = make.unique("gke")
        clouds.add_cluster("GCP", gke, "europe-west1")
        gcp_space = await make.register_cloud_space(
            org.admin, "GCP", account_id=accounts["GCP"], cluster_name=gke, region="europe-west1"
        )
        token_space = await make.register_on_standin(org.editor, kube)
        imported = spacedock(
            backend,
            old,
            "space",
            "import-kubeconfig",
            str(imported_kubeconfig(kube, tmp_path / "kubeconfig")),
            "--org",
            org.name,
        )
        assert imported.returncode == 0, imported.stderr
        imported_id = re.search(r"id=(\S+)", imported.stdout)
        assert imported_id is not None
        spaces = [token_space["id"], imported_id.group(1), gcp_space["id"]]
        await everything_works(org, accounts, spaces)
    finally:
        stop_checked(first)

    # The new key alone opens nothing yet: reseal says which secrets, and writes nothing.
    blind = spacedock(backend, new, "secrets", "reseal")
    assert blind.returncode == 1
    assert "open with none of the keys" in blind.stderr
    assert accounts["AWS"] in blind.stderr and token_space["id"] in blind.stderr

    both = serve(backend, f"{new},{old}", clouds, tmp_path / "both.log")
    org = at(org, both)
    try:
        await everything_works(org, accounts, spaces)
        resealing = asyncio.create_task(
            asyncio.to_thread(
                spacedock, backend, f"{new},{old}", "secrets", "reseal", "--batch-size", "1"
            )
        )
        # An admin rotates the AWS account's credentials the whole time.
        rotations = 0
        regions = ["us-east-1"]
        while not resealing.done() or rotations < 3:
            regions = ["eu-west-1"] if regions == ["us-east-1"] else ["us-east-1"]
            await rotate_regions(org, accounts["AWS"], regions)
            rotations += 1
        resealed = await resealing
        assert resealed.returncode == 0, resealed.stderr
        assert "Every secret is sealed under the first key" in resealed.stdout
        progress = PROGRESS.findall(resealed.stdout)
        done = {what: int(checked) for what, checked, _ in progress}
        assert done["cloud account credentials"] >= 3 and done["space secrets"] >= 2, done
        events = (await org.admin.data(RESEALED))["auditEvents"]["nodes"]
        assert len(events) == 1 and (events[0]["actorKind"], events[0]["via"]) == ("OS_USER", "CLI")
        # (The AWS account may have been rotated under the new key before the re-seal came.)
        assert set(events[0]["targetIds"]) >= {accounts["GCP"], accounts["AZURE"], *spaces[:2]}
        assert events[0]["input"] == {"resealed": len(events[0]["targetIds"])}
        # Run again: it resumes, finding nothing left to do.
        again = spacedock(backend, f"{new},{old}", "secrets", "reseal")
        assert again.returncode == 0, again.stderr
        assert "re-sealed" in again.stdout and " 0 re-sealed under" in again.stdout
    finally:
        stop_checked(both)

    last = serve(backend, new, clouds, tmp_path / "new.log")
    org = at(org, last)
    try:
        await everything_works(org, accounts, spaces)
        # The last rotation is the one in force: none was undone by the re-seal.
        assert await regions_seen(org, accounts["AWS"]) == set(regions)
    finally:
        stop_checked(last)
    for log in ("old.log", "both.log", "new.log"):
        text = (tmp_path / log).read_text()
        assert old not in text and new not in text
        assert "cannot be decrypted" not in text


def test_several_keys_open_what_any_sealed_and_the_first_seals() -> None:
    old, new = SecretBox.generate_key(), SecretBox.generate_key()
    sealed_old = SecretBox(old).seal({"token": "t"})
    both = SecretBox([new, old])
    assert both.open(sealed_old) == {"token": "t"}
    assert not both.sealed_with_first(sealed_old)
    resealed = both.resealed(sealed_old)
    assert both.sealed_with_first(resealed)
    assert SecretBox(new).open(resealed) == {"token": "t"}
    assert SecretBox(new).open(both.seal({"a": 1})) == {"a": 1}
    with pytest.raises(RuntimeError, match="does not hold the key"):
        SecretBox(new).open(sealed_old)


async def test_a_reseal_swaps_only_the_ciphertext_it_opened(empty_backend: Backend) -> None:
    """The compare-and-swap a re-seal writes with: a secret rotated by a replica after the
    re-seal read it is left as the replica wrote it (no lost update), on either database."""
    old, new = SecretBox.generate_key(), SecretBox.generate_key()
    both = SecretBox([new, old])
    database = Database(empty_backend.url)
    column = sealed.SEALED[0]
    now = datetime.now(UTC)
    try:
        await database.migrate()
        read = SecretBox(old).seal({"secret": "as read"})
        async with database.transaction() as session:
            session.add(tables.Org(id="org_swap", name="swap", created_at=now))
            await session.flush()
            session.add(
                tables.CloudAccount(
                    id="acct_swap",
                    org_id="org_swap",
                    name="swap",
                    provider="AWS",
                    credentials_ciphertext=read,
                    created_at=now,
                )
            )
        rotated = SecretBox(old).seal({"secret": "rotated by a replica"})
        async with database.transaction() as session:
            assert await sealed.swap(session, column, ("acct_swap",), read, rotated)
        async with database.transaction() as session:
            assert not await sealed.swap(session, column, ("acct_swap",), read, both.resealed(read))
            held = await sealed.ciphertext_of(session, column, ("acct_swap",))
        assert held == rotated
        async with database.transaction() as session:
            assert await sealed.swap(
                session, column, ("acct_swap",), rotated, both.resealed(rotated)
            )
            held = await sealed.ciphertext_of(session, column, ("acct_swap",))
        assert held is not None
        assert SecretBox(new).open(held) == {"secret": "rotated by a replica"}
    finally:
        await database.dispose()


async def test_every_sealed_column_is_resealed(empty_backend: Backend) -> None:
    """Each kind of sealed secret the database holds (cloud account credentials, a space's
    cluster secret, an app's Git credential, a vCluster's admission webhook secret, whose
    key is two columns and whose org is its CloudSpace's), re-sealed by the core step the
    command runs, on either database."""
    old, new = SecretBox.generate_key(), SecretBox.generate_key()
    database = Database(empty_backend.url)
    now = datetime.now(UTC)
    sealed_old = SecretBox(old)
    rows = [
        tables.Org(id="org_all", name="all", created_at=now),
        tables.CloudAccount(
            id="acct_all",
            org_id="org_all",
            name="all",
            provider="AWS",
            credentials_ciphertext=sealed_old.seal({"k": "account"}),
            created_at=now,
        ),
        tables.Space(
            id="spc_all",
            org_id="org_all",
            name="all",
            provider="GENERIC",
            space_type="KUBERNETES",
            config_json="{}",
            identity_key="GENERIC/all",
            secret_ciphertext=sealed_old.seal({"k": "space"}),
            next_probe_at=now,
            created_at=now,
        ),
        cloudspace_tables.CloudSpace(
            id="cs_all",
            org_id="org_all",
            name="all",
            host_space_id="spc_all",
            cpu=1,
            memory_mib=512,
            step="begin",
            next_attempt_at=now,
            created_at=now,
        ),
        app_tables.App(
            id="app_all",
            org_id="org_all",
            name="all",
            target_key="cs:cs_all/all",
            namespace="default",
            source_kind="GIT",
            credential_ciphertext=sealed_old.seal({"k": "app"}),
            status_due_at=now,
            created_at=now,
        ),
        AdmissionKey(
            cloud_space_id="cs_all",
            vcluster="all",
            secret_sealed=sealed_old.seal({"k": "admission"}),
            secret_sha256="-",
            observed_cpu_m=0,
            observed_memory_bytes=0,
        ),
    ]
    services = Services(
        database=database,
        bus=InProcessBus(),
        secrets=SecretBox([new, old]),
        health=HealthRule(60),
    )
    try:
        await database.migrate()
        async with database.transaction() as session:
            for row in rows:
                session.add(row)
                await session.flush()
        report = await reseal(services, batch_size=1)
        assert (report.checked, report.resealed, report.complete) == (4, 4, True)
        assert sorted(report.resealed_by_org["org_all"]) == [
            "acct_all",
            "app_all",
            "cs_all",
            "spc_all",
        ]
        opened = []
        async with database.transaction(read_only=True) as session:
            for column in sealed.SEALED:
                for stored in await sealed.batch(session, column, None, 10):
                    opened.append(SecretBox(new).open(stored.ciphertext)["k"])
        assert sorted(opened) == ["account", "admission", "app", "space"]
        again = await reseal(services)
        assert (again.checked, again.resealed) == (4, 0)
    finally:
        await database.dispose()
