"""`spacedock demo`: a spacedock server on SQLite beside a simulated fleet, seeded so that
GraphiQL shows something in seconds: spaces in every state, the three clouds' discovered
clusters, and a READY default CloudSpace whose kubeconfig works with kubectl.

The server is a real `spacedock serve` process; the fleet runs in this process (sim/).
It is set up the way an operator sets up a platform: the host cluster is registered by
the platform org, the server is restarted with it as SPACEDOCK_DEFAULT_HOST_SPACE, and the
demo org's first token is made with `spacedock token create`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from sim import fleet as simulated
from sim.fleet import Fleet

READY_TIMEOUT_S = 120.0
USER_ERRORS = "userErrors { field message code }"

REGISTER_SPACE = f"""
mutation($input: RegisterSpaceInput!) {{
  registerSpace(input: $input) {{ space {{ id name }} {USER_ERRORS} }}
}}"""
CREATE_CLOUD_ACCOUNT = f"""
mutation($input: CreateCloudAccountInput!) {{
  createCloudAccount(input: $input) {{ cloudAccount {{ id name }} {USER_ERRORS} }}
}}"""
GRANT_CLUSTER_ACCESS = f"""
mutation($input: ClusterAccessInput!) {{
  grantClusterAccess(input: $input) {{ clusterAccess {{ clusterName }} {USER_ERRORS} }}
}}"""
CLOUD_SPACES = "{ cloudSpaces(first: 10) { nodes { id name phase message vclusters { name } } } }"

FIRST_QUERY = """{
  spaces(first: 20, orderBy: {field: STATUS, direction: DESC}) {
    nodes { name provider status statusReason statusReasonCode }
  }
  cloudAccounts(first: 5) { nodes { name provider clusters { name region } } }
  cloudSpaces(first: 5) { nodes { name phase quota { cpu memoryMiB } vclusters { name } } }
}"""
FIRST_SUBSCRIPTION = """subscription {
  spaceStatusChanged { previous status reason at space { id name status } }
}"""


class DemoError(RuntimeError):
    """The demo could not start; the message says what to do."""


class Server:
    """`spacedock serve` as a child process, its log in the demo's folder."""

    def __init__(self, port: int, env: dict[str, str], log_path: Path) -> None:
        self.port = port
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "api", "serve", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DemoError(f"the server exited early; its log:\n{self._tail()}")
            try:
                with urllib.request.urlopen(f"{self.base}/readyz", timeout=1) as answer:
                    if answer.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        raise DemoError(f"the server was not ready in {READY_TIMEOUT_S:.0f} s:\n{self._tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def token(self, org: str) -> str:
        """An admin token of `org`, made as an operator makes one (`spacedock token create`)."""
        made = subprocess.run(
            [sys.executable, "-m", "api", "token", "create", "--org", org, "--role", "admin"],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            raise DemoError(f"`spacedock token create` failed:\n{made.stderr}")
        return made.stdout.strip().splitlines()[-1]

    def _tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])


class Client:
    """One org's GraphQL calls over HTTP; a refusal stops the demo with its message."""

    def __init__(self, server: Server, token: str) -> None:
        self.url = f"{server.base}/graphql"
        self.token = token

    def data(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            found: dict[str, Any] = json.loads(answer.read())
        if found.get("errors"):
            raise DemoError(f"the server refused a demo call: {found['errors'][0]['message']}")
        return dict(found["data"])

    def mutate(self, document: str, payload: dict[str, Any]) -> dict[str, Any]:
        (result,) = self.data(document, {"input": payload}).values()
        if result["userErrors"]:
            raise DemoError(f"the server refused a demo call: {result['userErrors']}")
        return dict(result)


def _register_generic(client: Client, fleet: Fleet) -> None:
    for cluster in fleet.generic_clusters:
        config = {
            "clusterName": cluster.name,
            "server": cluster.server,
            "caCert": cluster.ca_pem,
            "serviceAccountToken": cluster.token,
        }
        client.mutate(
            REGISTER_SPACE, {"name": cluster.name, "provider": "GENERIC", "config": config}
        )


def _connect_clouds(client: Client, fleet: Fleet) -> None:
    for cluster in simulated.CLOUD_CLUSTERS:
        provider = cluster.provider
        account = client.mutate(
            CREATE_CLOUD_ACCOUNT,
            {
                "name": f"{provider.lower()}-demo",
                "provider": provider,
                "credentials": fleet.clouds.credentials(provider),
            },
        )["cloudAccount"]
        where = {"region": cluster.region, "clusterName": cluster.name}
        if cluster.resource_group:
            where["resourceGroup"] = cluster.resource_group
        client.mutate(GRANT_CLUSTER_ACCESS, {"cloudAccountId": account["id"], **where})
        client.mutate(
            REGISTER_SPACE,
            {
                "name": cluster.name,
                "provider": provider,
                "cloudAccountId": account["id"],
                "config": where,
            },
        )


def _until_cloud_space_ready(client: Client) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for cloud_space in client.data(CLOUD_SPACES)["cloudSpaces"]["nodes"]:
            if cloud_space["phase"] == "FAILED":
                raise DemoError(f"the default CloudSpace failed: {cloud_space['message']}")
            if cloud_space["phase"] == "READY":
                return dict(cloud_space)
        time.sleep(0.5)
    raise DemoError("the default CloudSpace was not READY in time; see the server log")


def _say(text: str) -> None:
    print(f"demo: {text}", flush=True)


def run(
    port: int, folder: Path | None = None, flap_period_s: float = simulated.FLAP_PERIOD_S
) -> int:
    """Runs the demo until SIGINT or SIGTERM; 0 once everything stopped cleanly."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="spacedock-demo-") as scratch:
        where = folder or Path(scratch)
        try:
            return _run(port, where, stop, flap_period_s)
        except DemoError as error:
            print(f"demo: {error}", file=sys.stderr, flush=True)
            return 1


def _run(port: int, folder: Path, stop: threading.Event, flap_period_s: float) -> int:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's line per request
    _say("starting the simulated fleet (12 clusters, AWS, GCP, Azure and a host cluster)")
    with simulated.running(flap_period_s) as fleet:
        env = {
            **os.environ,
            "SPACEDOCK_DATABASE_URL": f"sqlite+aiosqlite:///{folder / 'spacedock.db'}",
            "SPACEDOCK_SECRET_KEY": Fernet.generate_key().decode(),
            "SPACEDOCK_PROBE_INTERVAL_S": os.environ.get("SPACEDOCK_PROBE_INTERVAL_S", "10"),
            **fleet.server_env,
            **fleet.cloudspace_env,
        }
        log_path = folder / "server.log"
        _say(f"registering the host cluster as the platform's (server log: {log_path})")
        first = Server(port, env, log_path).start()
        try:
            platform = Client(first, first.token("platform"))
            host = fleet.host
            config = {
                "clusterName": "host-east",
                "server": host.url,
                "caCert": host.ca_pem,
                "serviceAccountToken": host.token,
            }
            space = platform.mutate(
                REGISTER_SPACE, {"name": "host-east", "provider": "GENERIC", "config": config}
            )["space"]
        finally:
            first.stop()
        env["SPACEDOCK_DEFAULT_HOST_SPACE"] = space["id"]
        server = Server(port, env, log_path).start()
        try:
            token = server.token("demo")
            client = Client(server, token)
            _say("registering 12 GENERIC spaces and connecting the three clouds")
            _register_generic(client, fleet)
            _connect_clouds(client, fleet)
            _say("waiting for the default CloudSpace (vCluster, quota, Flux) to be READY")
            cloud_space = _until_cloud_space_ready(client)
            _banner(server, token, cloud_space, flap_period_s)
            stop.wait()
            _say("stopping")
        finally:
            server.stop()
    return 0


def _banner(server: Server, token: str, cloud_space: dict[str, Any], flap_period_s: float) -> None:
    kubeconfig = (
        f"{server.base}/api/v1/cloudspaces/{cloud_space['id']}/vclusters/"
        f"{cloud_space['vclusters'][0]['name']}/kubeconfig"
    )
    print(
        f"""
demo: ready. Everything below runs on 127.0.0.1; every cluster and cloud is simulated.

  GraphiQL   {server.base}/graphql
  headers    {{"Authorization": "Bearer {token}"}}
  token      {token}

A first query:

{FIRST_QUERY}

A first subscription (the "flaky" space goes down and up every {flap_period_s:g} s):

{FIRST_SUBSCRIPTION}

The default CloudSpace's kubeconfig:

  curl -H "Authorization: Bearer $TOKEN" {kubeconfig} > demo.kubeconfig
  kubectl --kubeconfig demo.kubeconfig get namespaces

Ctrl-C stops the server and the fleet.
""",
        flush=True,
    )
