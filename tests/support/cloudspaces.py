"""A platform for CloudSpace tests: a spacedock server whose platform org registered a host
cluster and was restarted with it as SPACEDOCK_DEFAULT_HOST_SPACE, as an operator sets it
up, plus the GraphQL documents and waits the CloudSpace tests share."""

from __future__ import annotations

import asyncio
import secrets
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gql.graphql_request import GraphQLRequest

from sim.host_standin import HostStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.graphql import GraphQL
from tests.support.server import Backend, Server, mint_token

T = TypeVar("T")

# Where the host stand-in's Flux finds the vCluster chart and Flux's manifests: a mirror,
# as an air-gapped site sets them, so the settings are seen to be followed.
CHART_URL = "https://charts.mirror.example/loft"
FLUX_MANIFESTS_URL = "oci://registry.mirror.example/fluxcd/flux-manifests"
FLUX_MANIFESTS_TAG = "v2.9.4"
IMAGE_REGISTRY = "registry.mirror.example:5000/loft"

CLOUD_SPACE = """
  id name phase message isDefault createdAt
  quota { cpu memoryMiB } usage { cpu memoryMiB }
  hostSpace { id name }
  vclusters { name ready }
"""
CREATE = f"""
mutation($input: CreateCloudSpaceInput!) {{
  createCloudSpace(input: $input) {{ cloudSpace {{ {CLOUD_SPACE} }} {make.USER_ERRORS} }}
}}"""
UPDATE = f"""
mutation($input: UpdateCloudSpaceQuotaInput!) {{
  updateCloudSpaceQuota(input: $input) {{ cloudSpace {{ {CLOUD_SPACE} }} {make.USER_ERRORS} }}
}}"""
DELETE = f"""
mutation($input: DeleteCloudSpaceInput!) {{
  deleteCloudSpace(input: $input) {{ cloudSpace {{ {CLOUD_SPACE} }} {make.USER_ERRORS} }}
}}"""
LIST = f"{{ cloudSpaces(first: 50) {{ totalCount nodes {{ {CLOUD_SPACE} }} }} }}"
ONE = f"""
query($id: ID!) {{
  cloudSpace(id: $id) {{ {CLOUD_SPACE} }}
  node(id: $id) {{ id ... on CloudSpace {{ name }} }}
}}"""
EVENTS = """
subscription($id: ID) {
  cloudSpacePhaseChanged(cloudSpaceId: $id) {
    cloudSpaceId previous phase message at cloudSpace { id phase }
  }
}"""


@dataclass
class Platform:
    server: Server
    host_id: str
    host_name: str
    admin: GraphQL

    async def tenant(self, prefix: str = "tenant") -> Org:
        """A new org, made the way `spacedock token create` makes one (with the host set)."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        tokens = {
            role: await mint_token(self.server.backend.url, name, role, self.host_id)
            for role in ("admin", "editor", "viewer")
        }
        clients = {
            role: GraphQL(self.server.url, self.server.ws_url, token)
            for role, token in tokens.items()
        }
        return Org(name=name, tokens=tokens, **clients)


def start_platform(
    backend: Backend,
    log_path: Path,
    host_url: str,
    host_ca: str,
    host_token: str,
    env: dict[str, str],
) -> Platform:
    """Registers the host as the platform org's space, then serves with it as the default."""
    settings = {"SPACEDOCK_PROBE_INTERVAL_S": "3600", **env}
    first = Server(backend=backend, log_path=log_path, env=dict(settings)).start()
    try:
        token = asyncio.run(mint_token(backend.url, "platform", "admin"))
        admin = GraphQL(first.url, first.ws_url, token)
        space = asyncio.run(
            make.register_generic_space(
                admin, name="platform-east", server=host_url, ca=host_ca, token=host_token
            )
        )
    finally:
        first.stop()
    settings["SPACEDOCK_DEFAULT_HOST_SPACE"] = space["id"]
    settings["SPACEDOCK_SECRET_KEY"] = first.secret_key
    running = Server(backend=backend, log_path=log_path, env=settings).start()
    return Platform(
        running, space["id"], space["name"], GraphQL(running.url, running.ws_url, token)
    )


def request(query: str, variables: dict[str, Any] | None = None) -> GraphQLRequest:
    return GraphQLRequest(query, variable_values=variables or {})


async def wait_for_subscribers(server: Server, count: int) -> None:
    deadline = asyncio.get_running_loop().time() + 20
    while server.metric("spacedock_event_subscribers") < count:
        assert asyncio.get_running_loop().time() < deadline, "the subscription never started"
        await asyncio.sleep(0.05)


def default_of(data: dict[str, Any]) -> dict[str, Any]:
    (found,) = [cs for cs in data["cloudSpaces"]["nodes"] if cs["name"] == "default"]
    result: dict[str, Any] = found
    return result


CHART_ENV = {
    "SPACEDOCK_VCLUSTER_CHART_URL": CHART_URL,
    "SPACEDOCK_FLUX_MANIFESTS_URL": FLUX_MANIFESTS_URL,
    "SPACEDOCK_FLUX_MANIFESTS_TAG": FLUX_MANIFESTS_TAG,
    "SPACEDOCK_VCLUSTER_IMAGE_REGISTRY": IMAGE_REGISTRY,
}


def serve_chart_and_flux(host: HostStandIn) -> None:
    """The host's Flux can fetch the vCluster chart 0.36.1 and Flux's manifests."""
    host.flux.serve_vcluster_chart(CHART_URL)
    host.flux.serve_flux_manifests(FLUX_MANIFESTS_URL, tag=FLUX_MANIFESTS_TAG)


def serve_platform(
    backend: Backend, host: HostStandIn, log_path: Path, env: dict[str, str]
) -> Iterator[Platform]:
    """A module's platform on the host stand-in, reaching vClusters through its gateway,
    the vCluster chart and Flux's manifests served by its Flux from a mirror, READY
    re-checked every 0.2 s."""
    serve_chart_and_flux(host)
    running = start_platform(
        backend,
        log_path,
        host.url,
        host.ca_pem,
        host.token,
        {
            "SPACEDOCK_VCLUSTER_URL_TEMPLATE": host.vcluster_url_template,
            **CHART_ENV,
            "SPACEDOCK_RECONCILE_INTERVAL_S": "0.2",
            **env,
        },
    )
    yield running
    running.server.stop()


async def eventually(check: Callable[[], Awaitable[T | None]], timeout_s: float = 60.0) -> T:
    """Polls `check` until it gives something truthy; bounded."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        found = await check()
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.05)


def key(cloud_space_id: str) -> str:
    """The `<key>` that names a CloudSpace's objects (host namespace `cs-<key>`)."""
    return cloud_space_id.lower().removeprefix("cs_").replace("_", "-")


async def ready_cloud_space(
    org: Org, name: str, cpu: float, memory_mib: int, timeout_s: float = 60.0
) -> dict[str, Any]:
    """A CloudSpace created by the org's editor, once it is READY."""
    payload = await org.editor.mutate(
        CREATE, {"input": {"name": name, "cpu": cpu, "memoryMiB": memory_mib}}
    )
    assert payload["userErrors"] == [], payload["userErrors"]
    created: dict[str, Any] = payload["cloudSpace"]

    async def ready() -> dict[str, Any] | None:
        found: dict[str, Any] = (await org.viewer.data(ONE, {"id": created["id"]}))["cloudSpace"]
        assert found["phase"] != "FAILED", found["message"]
        return found if found["phase"] == "READY" else None

    return await eventually(ready, timeout_s)


def download(
    server: Server, cloud_space_id: str, vcluster: str, token: str | None, query: str = ""
) -> tuple[int, dict[str, str], str]:
    """GET the kubeconfig route as a person's script does: status, headers, body."""
    url = f"{server.base}/api/v1/cloudspaces/{cloud_space_id}/vclusters/{vcluster}/kubeconfig"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url + query, headers=headers), timeout=30
        ) as answer:
            found = {k.lower(): v for k, v in answer.headers.items()}
            return answer.status, found, answer.read().decode()
    except urllib.error.HTTPError as failed:
        found = {k.lower(): v for k, v in failed.headers.items()}
        return failed.code, found, failed.read().decode()
