"""Fixtures: a real spacedock server per test module (SQLite, and Postgres when
SPACEDOCK_TEST_DATABASE_URL is set) and orgs with a token per role."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sim import clouds as cloud_standins
from tests.support.chromium import chromium_available
from tests.support.graphql import GraphQL
from tests.support.server import REPO, STARTED, Backend, Server, mint_token
from tests.support.tcp_proxy import TcpProxy

POSTGRES_URL = os.environ.get("SPACEDOCK_TEST_DATABASE_URL")
BACKENDS = ["sqlite", *(["postgres"] if POSTGRES_URL else [])]


def fresh_backend(name: str, directory: Path) -> Backend:
    if name == "postgres":
        assert POSTGRES_URL is not None
        return Backend.postgres(POSTGRES_URL)
    return Backend.sqlite(directory)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    """An empty database for this module's server."""
    made = fresh_backend(request.param, tmp_path_factory.mktemp("sqlite"))
    yield made
    made.dispose(POSTGRES_URL)


@pytest.fixture(scope="module")
def postgres_database() -> Iterator[Backend]:
    """A Postgres database of this module's own, for tests that cut or drop its
    connections (the module skips without Postgres)."""
    assert POSTGRES_URL is not None
    made = Backend.postgres(POSTGRES_URL)
    yield made
    made.dispose(POSTGRES_URL)


@pytest.fixture(scope="module")
def postgres_proxy(postgres_database: Backend) -> Iterator[TcpProxy]:
    """A TCP proxy to it that a test can cut, restore or stall."""
    running = TcpProxy.to(postgres_database)
    yield running
    running.stop()


@pytest.fixture(params=BACKENDS)
def empty_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """An empty database for one test that runs spacedock's code in-process."""
    made = fresh_backend(request.param, tmp_path)
    yield made
    made.dispose(POSTGRES_URL)


@pytest.fixture(autouse=True)
def nothing_left_unawaited() -> Iterator[None]:
    """Fails a test during which a server logged a task or future that failed or was
    dropped with nobody awaiting it (issue 19): every task has an owner that awaits it."""
    logged = {id(started): started.log_size() for started in STARTED}
    yield
    found = [
        line
        for started in STARTED
        for line in started.unawaited_failures(logged.get(id(started), 0))
    ]
    if found:
        pytest.fail("a server logged unawaited work:\n" + "\n".join(found[:10]))


@pytest.fixture(scope="session")
def clouds() -> Iterator[cloud_standins.Clouds]:
    """moto, the GCP stand-in and a Kubernetes stand-in for every cloud cluster, for the
    whole session; every test server is pointed at them."""
    running = cloud_standins.Clouds().start()
    cloud_standins.activate(running)
    yield running
    cloud_standins.activate(None)
    running.stop()


def stop_checked(running: Server) -> None:
    """Stops a server; what it logs while shutting down is checked as during a test."""
    logged = running.log_size()
    running.stop()
    if found := running.unawaited_failures(logged):
        pytest.fail("the server logged unawaited work at shutdown:\n" + "\n".join(found[:10]))


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    """Extra SPACEDOCK_* settings for this module's server; modules override it."""
    return {}


@pytest.fixture(scope="module")
def server(
    backend: Backend,
    server_env: dict[str, str],
    clouds: cloud_standins.Clouds,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    env = {**clouds.env, **server_env}
    running = Server(backend=backend, log_path=log_path, env=env).start()
    yield running
    stop_checked(running)


@pytest.fixture(scope="module")
def replica(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A second server process on the module server's database and key: another replica
    (Postgres only; a module on SQLite skips what needs one)."""
    if server.backend.name != "postgres":
        pytest.skip("replicas share a database on Postgres; SQLite serves one process")
    log_path = Path(tmp_path_factory.mktemp("replica")) / "server.log"
    running = Server(backend=server.backend, log_path=log_path, env=dict(server.env)).start()
    yield running
    stop_checked(running)


@dataclass
class Org:
    name: str
    admin: GraphQL
    editor: GraphQL
    viewer: GraphQL
    tokens: dict[str, str]

    def as_role(self, role: str) -> GraphQL:
        return {"admin": self.admin, "editor": self.editor, "viewer": self.viewer}[role]


async def new_org(server: Server, prefix: str = "org") -> Org:
    name = f"{prefix}-{secrets.token_hex(4)}"
    tokens = {
        role: await mint_token(server.backend.url, name, role)
        for role in ("admin", "editor", "viewer")
    }
    clients = {role: GraphQL(server.url, server.ws_url, token) for role, token in tokens.items()}
    return Org(name=name, tokens=tokens, **clients)


@pytest.fixture
async def org(server: Server) -> Org:
    return await new_org(server, "acme")


@pytest.fixture
async def other_org(server: Server) -> Org:
    return await new_org(server, "rival")


@pytest.fixture(scope="session")
def chromium() -> None:
    """Debian's headless Chromium, installed by `make browser` when missing (root and the
    mirror needed); without it a browser test fails in CI and is skipped elsewhere."""
    if not chromium_available():
        subprocess.run(["make", "browser"], cwd=REPO, check=False, capture_output=True)
    if chromium_available():
        return
    reason = "Debian's chromium is not installed and `make browser` could not install it"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
