"""Runs `spacedock serve` as a real process on a free port, on SQLite or Postgres."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from core.common.secrets import SecretBox
from sim.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def listens_on(pid: int, port: int, host: str = "127.0.0.1") -> bool:
    """Whether process `pid` holds the listening socket on `host`:`port` (IPv4, Linux /proc)."""
    wanted = f"{socket.inet_aton(host)[::-1].hex().upper()}:{port:04X}"
    listening = {
        fields[9]
        for fields in (line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:])
        if fields[1] == wanted and fields[3] == "0A"  # 0A: LISTEN
    }
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:  # exited
        return False
    for descriptor in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[len("socket:[") : -1] in listening:
            return True
    return False


@dataclass
class Backend:
    """A fresh, empty database for one server."""

    name: str
    url: str
    drop: str | None = None  # Postgres database to drop afterwards

    @classmethod
    def sqlite(cls, directory: Path) -> Backend:
        return cls("sqlite", f"sqlite+aiosqlite:///{directory / 'spacedock.db'}")

    @classmethod
    def postgres(cls, admin_url: str) -> Backend:
        name = f"spacedock_{secrets.token_hex(6)}"
        asyncio.run(_postgres(admin_url, f'CREATE DATABASE "{name}"'))
        base, _, _ = admin_url.rpartition("/")
        return cls("postgres", f"{base}/{name}", drop=name)

    def dispose(self, admin_url: str | None) -> None:
        if self.drop and admin_url:
            asyncio.run(_postgres(admin_url, f'DROP DATABASE IF EXISTS "{self.drop}" WITH (FORCE)'))


async def _postgres(admin_url: str, statement: str) -> None:
    connection = await asyncpg.connect(admin_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


PORT_ATTEMPTS = 5
# What asyncio logs for work that failed or was dropped with nobody awaiting it (issue 19).
UNAWAITED = ("exception was never retrieved", "Task was destroyed but it is pending")
# Every server a test started in this process, for the log check of tests/conftest.py.
STARTED: list[Server] = []


class PortTaken(RuntimeError):
    """The server exited because its port was bound by someone else first."""


@dataclass
class Server:
    backend: Backend
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    # The checkout whose code the server runs (bench/soak.py --before runs one replica on
    # another commit, with this checkout's packages).
    repo: Path = REPO

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/graphql"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def secret_key(self) -> str:
        return self.env["SPACEDOCK_SECRET_KEY"]

    def start(self) -> Server:
        self.env = {
            **os.environ,
            "SPACEDOCK_DATABASE_URL": self.backend.url,
            "SPACEDOCK_SECRET_KEY": SecretBox.generate_key(),
            # Test servers stop within seconds even with work in flight (held stand-ins).
            "SPACEDOCK_SHUTDOWN_GRACE_S": "3",
            **self.env,
        }
        if not any(started is self for started in STARTED):
            STARTED.append(self)
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start_once()
            except PortTaken:
                # Another process took the port between free_port() and the bind.
                self.port = free_port()
        return self._start_once()

    def _start_once(self) -> Server:
        logged_before = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "api", "serve", "--port", str(self.port)],
                cwd=self.repo,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self.wait_ready()
        except RuntimeError:
            this_attempt = self.log_path.read_bytes()[logged_before:].decode(errors="replace")
            if self.process.poll() is not None and "address already in use" in this_attempt.lower():
                raise PortTaken(self.port) from None
            self.stop()  # not left running, unready, after its test has failed
            raise
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.base}/readyz", timeout=1) as response:
                    # Another test worker's server may hold the port (ours then exits with
                    # "address in use" and start() retries): only our own answer counts.
                    if response.status == 200 and listens_on(self.process.pid, self.port):
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready in {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def unawaited_failures(self, since: int = 0) -> list[str]:
        """asyncio's words for a task or future nobody awaited, in the log from `since`."""
        if not self.log_path.exists():
            return []
        with self.log_path.open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
        return [line for line in text.splitlines() if any(word in line for word in UNAWAITED)]

    def metrics(self, token: str | None = None) -> list[Metric]:
        """/metrics as prometheus-client's own parser reads it."""
        request = urllib.request.Request(f"{self.base}/metrics")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=5) as response:
            return list(text_string_to_metric_families(response.read().decode()))

    def metric(self, name: str, **labels: str) -> float:
        """The value of the sample `name` (e.g. spacedock_probes_total, or a histogram's
        spacedock_probe_duration_seconds_count) with exactly these labels."""
        for family in self.metrics():
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        raise KeyError(name)


async def mint_token(
    database_url: str, org: str, role: str, default_host_space: str | None = None
) -> str:
    """A token for `org` (created if needed), written the way `spacedock token create` does;
    a new org gets its default CloudSpace on `default_host_space` when one is given."""
    from core.cloudspaces.settings import CloudSpaceSettings
    from core.common.events import InProcessBus
    from core.common.services import Services
    from core.orgs.bootstrap import create_token
    from core.spaces.health import HealthRule
    from db.engine import Database

    database = Database(database_url)
    services = Services(
        database=database,
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(60),
        cloudspaces=CloudSpaceSettings(default_host_space=default_host_space),
    )
    try:
        async with services.unit() as unit:
            _, token = await create_token(unit, org, role.upper(), services)
    finally:
        await database.dispose()
    return token
