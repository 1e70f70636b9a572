"""The `spacedock` command as an operator runs it: tokens, the development key, bad settings."""

from __future__ import annotations

import asyncio
import getpass
import os
import secrets
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from core.common.secrets import SecretBox
from tests.support.graphql import GraphQL
from tests.support.server import REPO, Server

# Every process on one database holds verified tokens as long (core/common/token_cache.py): the
# server and each command alike. Longer than the default, so that a revocation that did
# not wait out the server's copy would be seen to work on.
TOKEN_CACHE = {"SPACEDOCK_TOKEN_CACHE_TTL_S": "5"}


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return TOKEN_CACHE


def spacedock(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api", *args],
        cwd=REPO,
        env={**os.environ, **TOKEN_CACHE, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_token_create_prints_a_working_token_last_and_stores_only_its_hash(
    server: Server,
) -> None:
    env = {"SPACEDOCK_DATABASE_URL": server.backend.url, "SPACEDOCK_SECRET_KEY": server.secret_key}
    made = spacedock("token", "create", "--org", "cli-org", "--role", "editor", env=env)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    again = spacedock("token", "create", "--org", "cli-org", "--role", "viewer", env=env)
    second = again.stdout.strip().splitlines()[-1]
    assert token != second

    caller = GraphQL(server.url, server.ws_url, token)
    viewer = (await caller.data("{ viewer { org { id name } role } }"))["viewer"]
    assert viewer["org"]["name"] == "cli-org"
    assert viewer["role"] == "EDITOR"
    # The second token joined the same org rather than making another of that name.
    other = GraphQL(server.url, server.ws_url, second)
    assert (await other.data("{ viewer { org { id } role } }"))["viewer"] == {
        "org": {"id": viewer["org"]["id"]},
        "role": "VIEWER",
    }
    if server.backend.name == "sqlite":
        path = server.backend.url.split("///", 1)[1]
        with sqlite3.connect(path) as stored:
            hashes = [row[0] for row in stored.execute("SELECT token_hash FROM api_tokens")]
        assert token not in hashes and all(token not in h for h in hashes)


def test_an_unknown_role_is_refused_and_creates_nothing(server: Server) -> None:
    env = {"SPACEDOCK_DATABASE_URL": server.backend.url, "SPACEDOCK_SECRET_KEY": server.secret_key}
    refused = spacedock("token", "create", "--org", "x-org", "--role", "owner", env=env)
    assert refused.returncode == 2
    assert "The org x-org has no role owner." in refused.stderr
    assert "Traceback" not in refused.stderr
    listed = spacedock("token", "list", "--org", "x-org", env=env)
    assert listed.returncode == 2, "the refused call left no org behind"
    assert "there is no org 'x-org'" in listed.stderr


async def test_token_list_and_revoke_end_a_token_at_once(server: Server) -> None:
    env = {"SPACEDOCK_DATABASE_URL": server.backend.url, "SPACEDOCK_SECRET_KEY": server.secret_key}
    made = spacedock(
        "token",
        "create",
        "--org",
        "ci-org",
        "--role",
        "viewer",
        "--name",
        "ci deploy",
        "--expires-in-days",
        "30",
        env=env,
    )
    assert made.returncode == 0, made.stderr
    assert "expiring in 30 days" in made.stdout
    token = made.stdout.strip().splitlines()[-1]
    caller = GraphQL(server.url, server.ws_url, token)
    assert (await caller.data("{ viewer { subject } }"))["viewer"]["subject"] == "ci deploy"

    listed = spacedock("token", "list", "--org", "ci-org", env=env)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.strip().splitlines()
    assert header.split()[:3] == ["ID", "NAME", "ROLE"]
    token_id = row.split()[0]
    assert "ci deploy" in row and "VIEWER" in row
    assert token not in listed.stdout, "the secret is shown once, at creation"

    revoked = spacedock("token", "revoke", "--org", "ci-org", token_id, env=env)
    assert revoked.returncode == 0, revoked.stderr
    status, body = await caller.post("{ viewer { subject } }")
    assert status == 401
    assert "revoked" in body["errors"][0]["message"]
    relisted = spacedock("token", "list", "--org", "ci-org", env=env)
    assert relisted.stdout.strip().splitlines()[1].split()[-1] != "-", "REVOKED is set"
    unknown = spacedock("token", "revoke", "--org", "ci-org", "tok_nope", env=env)
    assert unknown.returncode == 2
    assert "has no token tok_nope" in unknown.stderr


async def test_a_token_in_use_is_refused_once_the_revoke_command_returns(server: Server) -> None:
    """The server holds a verified token in memory (core/common/token_cache.py) and it is in use
    while `spacedock token revoke` runs in another process: once the command returns, the
    server refuses it."""
    env = {"SPACEDOCK_DATABASE_URL": server.backend.url, "SPACEDOCK_SECRET_KEY": server.secret_key}
    made = spacedock("token", "create", "--org", "busy-org", "--role", "viewer", env=env)
    assert made.returncode == 0, made.stderr
    caller = GraphQL(server.url, server.ws_url, made.stdout.strip().splitlines()[-1])
    token_id = spacedock("token", "list", "--org", "busy-org", env=env).stdout.splitlines()[1]
    returned = asyncio.Event()

    async def keep_using() -> None:
        while not returned.is_set():
            await caller.post("{ viewer { role } }")

    using = asyncio.create_task(keep_using())
    revoked = await asyncio.to_thread(
        spacedock, "token", "revoke", "--org", "busy-org", token_id.split()[0], env=env
    )
    returned.set()
    await using
    assert revoked.returncode == 0, revoked.stderr
    status, body = await caller.post("{ viewer { role } }")
    assert status == 401
    assert "revoked" in body["errors"][0]["message"]


CLI_EVENTS = """
{
  auditEvents(first: 10, filter: { via: CLI }) {
    nodes { action outcome actor actorKind via actorTokenId targetIds input requestId }
  }
}"""


def token_ids(org: str, env: dict[str, str]) -> dict[str, str]:
    """{name: id} of the org's tokens, as `token list` prints them."""
    listed = spacedock("token", "list", "--org", org, env=env)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    return {row[1]: row[0] for row in rows}


async def test_token_create_and_revoke_are_audit_events_of_the_os_user(server: Server) -> None:
    env = {"SPACEDOCK_DATABASE_URL": server.backend.url, "SPACEDOCK_SECRET_KEY": server.secret_key}
    org = f"audited-{secrets.token_hex(3)}"
    made = spacedock("token", "create", "--org", org, "--role", "admin", "--name", "ops", env=env)
    assert made.returncode == 0, made.stderr
    admin = GraphQL(server.url, server.ws_url, made.stdout.strip().splitlines()[-1])
    args = ("--org", org, "--role", "viewer", "--name", "ci", "--expires-in-days", "7")
    assert spacedock("token", "create", *args, env=env).returncode == 0
    ids = token_ids(org, env)
    assert spacedock("token", "revoke", "--org", org, ids["ci"], env=env).returncode == 0

    events = (await admin.data(CLI_EVENTS))["auditEvents"]["nodes"]
    assert [(e["action"], e["targetIds"], e["outcome"]) for e in events] == [
        ("createApiToken", [ids["ops"]], "OK"),
        ("createApiToken", [ids["ci"]], "OK"),
        ("revokeApiToken", [ids["ci"]], "OK"),
    ]
    assert [e["input"] for e in events] == [
        {"name": "ops", "role": "ADMIN", "expiresInDays": None},
        {"name": "ci", "role": "VIEWER", "expiresInDays": 7},
        {"id": ids["ci"]},
    ]
    for event in events:
        assert event["actor"] == getpass.getuser()
        assert (event["actorKind"], event["via"], event["actorTokenId"]) == ("OS_USER", "CLI", None)
    # One id per command, each its own.
    assert len({event["requestId"] for event in events}) == 3
    api_only = await admin.data(CLI_EVENTS.replace("via: CLI", "via: API"))
    assert api_only["auditEvents"]["nodes"] == []


def test_without_a_secret_key_a_development_key_is_kept_beside_the_database(
    tmp_path: Path,
) -> None:
    database = tmp_path / "dev.db"
    env = {"SPACEDOCK_DATABASE_URL": f"sqlite+aiosqlite:///{database}", "SPACEDOCK_SECRET_KEY": ""}
    first = spacedock("token", "create", "--org", "dev", "--role", "admin", env=env)
    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "dev.key"
    assert "SPACEDOCK_SECRET_KEY is unset: development mode" in first.stderr
    assert str(key_file) in first.stderr
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert SecretBox.is_valid_key(key)
    second = spacedock("token", "create", "--org", "dev", "--role", "viewer", env=env)
    assert second.returncode == 0
    assert key_file.read_text().strip() == key  # reused, so sealed credentials stay readable
    assert "development mode" not in second.stderr  # said once, when the key was made
    assert key not in first.stdout + first.stderr + second.stdout + second.stderr


def test_a_malformed_secret_key_is_refused_before_anything_starts(tmp_path: Path) -> None:
    env = {
        "SPACEDOCK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'x.db'}",
        "SPACEDOCK_SECRET_KEY": "not-a-fernet-key",
    }
    refused = spacedock("serve", "--port", "0", env=env)
    assert refused.returncode == 2
    assert "SPACEDOCK_SECRET_KEY must be a Fernet key" in refused.stderr
    assert "not-a-fernet-key" not in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "x.db").exists()


def test_a_malformed_number_setting_names_the_variable(tmp_path: Path) -> None:
    env = {
        "SPACEDOCK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'x.db'}",
        "SPACEDOCK_PROBE_INTERVAL_S": "soon",
    }
    refused = spacedock("serve", env=env)
    assert refused.returncode == 2
    assert "SPACEDOCK_PROBE_INTERVAL_S must be a number" in refused.stderr
