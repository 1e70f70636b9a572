"""The cloud stand-ins answer the real SDKs as the clouds do: google-auth
service-account credentials against the GCP stand-in, azure-identity's async
ClientSecretCredential against the Azure stand-in, boto3/aioboto3 against moto
for EKS and STS. Every switch (throttling, bad credentials, a revoked key) is
shown to bite, and a Kubernetes stand-in accepts exactly the tokens each cloud
would make it accept."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
import requests
from google.auth.exceptions import RefreshError
from google.auth.transport import _aiohttp_requests
from google.auth.transport import requests as google_requests
from google.oauth2 import _service_account_async, service_account

from providers import kube
from providers.credentials import ClusterCredentials
from providers.errors import PermanentError
from tests.support.gcp_standin import CLOUD_PLATFORM_SCOPE, GcpStandIn
from tests.support.kube_standin import KubeStandIn


@pytest.fixture(scope="module")
def kube_cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        standin.tokens.clear()  # only cloud-minted tokens open it
        yield standin


# -- GCP ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def gcp(kube_cluster: KubeStandIn) -> Iterator[GcpStandIn]:
    with GcpStandIn() as standin:
        standin.add_cluster("proj-a", "europe-west1", "prod", kube_cluster.url, kube_cluster.ca_pem)
        standin.add_cluster(
            "proj-a", "us-central1-b", "edge", kube_cluster.url, kube_cluster.ca_pem
        )
        standin.add_cluster(
            "proj-b", "europe-west1", "other", kube_cluster.url, kube_cluster.ca_pem
        )
        kube_cluster.accept_tokens_when(standin.is_valid_access_token)
        yield standin


@pytest.fixture
async def gcp_session(gcp: GcpStandIn) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=gcp.client_ssl_context())
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        yield session
    gcp.heal()


async def refreshed_gcp_credentials(
    session: aiohttp.ClientSession, info: dict[str, str], scopes: list[str]
) -> Any:
    """What spacedock's GKE adapter does: the async service-account refresh."""
    credentials = _service_account_async.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
        info, scopes=scopes
    )
    await credentials.refresh(_aiohttp_requests.Request(session))  # type: ignore[no-untyped-call]
    return credentials


async def gcp_token(
    session: aiohttp.ClientSession, info: dict[str, str], scopes: list[str] | None = None
) -> str:
    credentials = await refreshed_gcp_credentials(session, info, scopes or [CLOUD_PLATFORM_SCOPE])
    token: str = credentials.token
    return token


async def container_get(
    session: aiohttp.ClientSession, gcp: GcpStandIn, token: str, path: str
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    async with session.get(f"{gcp.url}/v1/{path}", headers=headers) as response:
        return response.status, await response.json()


async def test_gcp_service_account_lists_and_describes_its_clusters(
    gcp: GcpStandIn, gcp_session: aiohttp.ClientSession
) -> None:
    token = await gcp_token(gcp_session, gcp.service_account("proj-a"))

    code, listed = await container_get(
        gcp_session, gcp, token, "projects/proj-a/locations/-/clusters"
    )
    assert code == 200
    assert [(c["name"], c["location"]) for c in listed["clusters"]] == [
        ("prod", "europe-west1"),
        ("edge", "us-central1-b"),
    ]
    code, one = await container_get(
        gcp_session, gcp, token, "projects/proj-a/locations/europe-west1/clusters/prod"
    )
    assert code == 200
    assert one["currentMasterVersion"] == "1.31.2-gke.1000"
    server = f"https://{one['endpoint']}"
    ca_pem = base64.b64decode(one["masterAuth"]["clusterCaCertificate"]).decode()
    namespaces = await kube.list_namespaces(ClusterCredentials(server, ca_pem, token=token))
    assert "default" in [n.name for n in namespaces]

    code, missing = await container_get(
        gcp_session, gcp, token, "projects/proj-a/locations/europe-west1/clusters/nope"
    )
    assert (code, missing["error"]["status"]) == (404, "NOT_FOUND")
    code, foreign = await container_get(
        gcp_session, gcp, token, "projects/proj-b/locations/-/clusters"
    )
    assert (code, foreign["error"]["status"]) == (403, "PERMISSION_DENIED")
    code, empty = await container_get(
        gcp_session, gcp, token, "projects/proj-a/locations/asia-east1/clusters"
    )
    assert (code, empty) == (200, {})


async def test_gcp_container_api_and_cluster_refuse_tokens_it_did_not_issue(
    gcp: GcpStandIn, kube_cluster: KubeStandIn, gcp_session: aiohttp.ClientSession
) -> None:
    code, body = await container_get(
        gcp_session, gcp, "ya29.made-up", "projects/proj-a/locations/-/clusters"
    )
    assert (code, body["error"]["status"]) == (401, "UNAUTHENTICATED")
    credentials = ClusterCredentials(kube_cluster.url, kube_cluster.ca_pem, token="ya29.made-up")
    with pytest.raises(PermanentError, match="401"):
        await kube.list_namespaces(credentials)


async def test_gcp_token_endpoint_checks_signature_scope_and_key(
    gcp: GcpStandIn, gcp_session: aiohttp.ClientSession
) -> None:
    info = gcp.service_account("proj-a")
    forged = dict(info, private_key=gcp.service_account("proj-a")["private_key"])
    with pytest.raises(RefreshError, match="Invalid JWT Signature"):
        await gcp_token(gcp_session, forged)
    with pytest.raises(RefreshError, match="invalid_scope"):
        await gcp_token(gcp_session, info, ["https://www.googleapis.com/auth/userinfo.email"])

    before = await gcp_token(gcp_session, info)
    gcp.revoke_key(info)
    with pytest.raises(RefreshError, match="Invalid JWT Signature"):
        await gcp_token(gcp_session, info)
    code, _ = await container_get(gcp_session, gcp, before, "projects/proj-a/locations/-/clusters")
    assert code == 200  # as at Google: a token outlives the key that got it


async def test_gcp_switches_bad_credentials_and_throttling(
    gcp: GcpStandIn, gcp_session: aiohttp.ClientSession
) -> None:
    info = gcp.service_account("proj-a")
    token = await gcp_token(gcp_session, info)
    gcp.reject_credentials = True
    with pytest.raises(RefreshError, match="invalid_grant"):
        await gcp_token(gcp_session, info)
    gcp.heal()

    gcp.throttle(times=2)
    path = "projects/proj-a/locations/-/clusters"
    codes = [(await container_get(gcp_session, gcp, token, path))[0] for _ in range(3)]
    assert codes == [429, 429, 200]
    gcp.throttle()
    code, body = await container_get(gcp_session, gcp, token, path)
    assert (code, body["error"]["status"]) == (429, "RESOURCE_EXHAUSTED")


async def test_gcp_access_tokens_expire_as_announced(
    gcp: GcpStandIn, kube_cluster: KubeStandIn, gcp_session: aiohttp.ClientSession
) -> None:
    gcp.token_lifetime_s = 0
    try:
        credentials = await refreshed_gcp_credentials(
            gcp_session, gcp.service_account("proj-a"), [CLOUD_PLATFORM_SCOPE]
        )
        assert not credentials.valid  # google-auth read expires_in
        assert not gcp.is_valid_access_token(credentials.token)
    finally:
        gcp.token_lifetime_s = 3599


def test_gcp_sync_transport_trusts_requests_ca_bundle(
    gcp: GcpStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(gcp.ca_file))
    credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
        gcp.service_account("proj-b"), scopes=[CLOUD_PLATFORM_SCOPE]
    )
    with requests.Session() as session:
        credentials.refresh(google_requests.Request(session))
        listed = session.get(
            f"{gcp.url}/v1/projects/proj-b/locations/-/clusters",
            headers={"Authorization": f"Bearer {credentials.token}"},
        )
    assert [c["name"] for c in listed.json()["clusters"]] == ["other"]


AIOHTTP_CLIENT = """
import asyncio, json, sys
import aiohttp
from google.auth.transport import _aiohttp_requests
from google.oauth2 import _service_account_async

async def main():
    info = json.loads(sys.argv[1])
    credentials = _service_account_async.Credentials.from_service_account_info(
        info, scopes=["https://www.googleapis.com/auth/cloud-platform"])
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        await credentials.refresh(_aiohttp_requests.Request(session))
    print("token" if credentials.token.startswith("ya29.") else "none")

asyncio.run(main())
"""


def test_gcp_async_transport_trusts_ssl_cert_file_set_before_start(gcp: GcpStandIn) -> None:
    """How a spacedock server process gets to trust the stand-in."""
    info = json.dumps(gcp.service_account("proj-a"))
    env = {**os.environ, "SSL_CERT_FILE": str(gcp.ca_file)}
    done = subprocess.run(
        [sys.executable, "-c", AIOHTTP_CLIENT, info], env=env, capture_output=True, text=True
    )
    assert done.stdout.strip() == "token", done.stderr[-2000:]
    untrusted = subprocess.run(
        [sys.executable, "-c", AIOHTTP_CLIENT, info],
        env={k: v for k, v in env.items() if k != "SSL_CERT_FILE"},
        capture_output=True,
        text=True,
    )
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
