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
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aioboto3
import aiohttp
import pytest
import requests
import yaml
from azure.core.exceptions import ClientAuthenticationError
from azure.identity.aio import ClientSecretCredential
from botocore.config import Config
from botocore.exceptions import ClientError
from google.auth.exceptions import RefreshError
from google.auth.transport import _aiohttp_requests
from google.auth.transport import requests as google_requests
from google.oauth2 import _service_account_async, service_account

from providers import kube
from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError
from sim.azure_standin import AKS_SERVER_APP, AzureStandIn, ServicePrincipal
from sim.eks import AccessKey, EksStandIn, token_problem
from sim.gcp_standin import CLOUD_PLATFORM_SCOPE, GcpStandIn
from sim.kube_standin import KubeStandIn


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


GCP_CLIENT = """
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
    print("token" if credentials.token else "none")

asyncio.run(main())
"""


def run_client(script: str, argument: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter started with `env`, as a spacedock server process is."""
    inherited = {
        k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
    }
    return subprocess.run(
        [sys.executable, "-c", script, argument],
        env={**inherited, **env},
        capture_output=True,
        text=True,
    )


def without_trust(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")}


def test_gcp_async_transport_trusts_the_standin_through_its_env(gcp: GcpStandIn) -> None:
    info = json.dumps(gcp.service_account("proj-a"))
    trusted = run_client(GCP_CLIENT, info, gcp.env)
    assert trusted.stdout.strip() == "token", trusted.stderr[-2000:]
    assert (
        "CERTIFICATE_VERIFY_FAILED" in run_client(GCP_CLIENT, info, without_trust(gcp.env)).stderr
    )


# -- Azure -------------------------------------------------------------------

ARM_SCOPE = "https://management.azure.com/.default"
AKS_SCOPE = f"{AKS_SERVER_APP}/.default"
API_VERSION = "2024-09-01"


@pytest.fixture(scope="module")
def azure() -> Iterator[AzureStandIn]:
    with AzureStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def azure_principal(azure: AzureStandIn, kube_cluster: KubeStandIn) -> ServicePrincipal:
    principal = azure.service_principal()
    for group, name in (("rg-1", "aks-1"), ("rg-2", "aks-2")):
        azure.add_cluster(
            principal.subscription_id, group, name, kube_cluster.url, kube_cluster.ca_pem
        )
    kube_cluster.accept_tokens_when(azure.is_valid_aks_token)
    return principal


@pytest.fixture
async def arm(azure: AzureStandIn) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=azure.client_ssl_context())
    async with aiohttp.ClientSession(azure.url, connector=connector) as session:
        yield session
    azure.heal()


@pytest.fixture
def authority(azure: AzureStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", azure.url)


async def azure_token(azure: AzureStandIn, principal: ServicePrincipal, scope: str) -> str:
    """What spacedock's AKS adapter does, the authority coming from AZURE_AUTHORITY_HOST."""
    async with ClientSecretCredential(
        principal.tenant_id,
        principal.client_id,
        principal.client_secret,
        connection_verify=str(azure.ca_file),
    ) as credential:
        token = await credential.get_token(scope)
    return token.token


async def arm_call(
    arm: aiohttp.ClientSession, method: str, path: str, token: str, api_version: bool = True
) -> tuple[int, Any]:
    query = {"api-version": API_VERSION} if api_version else {}
    headers = {"Authorization": f"Bearer {token}"}
    async with arm.request(method, path, params=query, headers=headers) as response:
        return response.status, await response.json()


@pytest.mark.usefixtures("authority")
async def test_azure_principal_discovers_aks_clusters_and_reaches_one(
    azure: AzureStandIn,
    azure_principal: ServicePrincipal,
    arm: aiohttp.ClientSession,
) -> None:
    calls_before = sum(azure.requests.values())
    arm_token = await azure_token(azure, azure_principal, ARM_SCOPE)
    aks_token = await azure_token(azure, azure_principal, AKS_SCOPE)
    token_path = f"/{azure_principal.tenant_id}/oauth2/v2.0/token"
    assert azure.requests[f"POST {token_path}"] == 2
    assert sum(azure.requests.values()) - calls_before == 2  # no discovery calls at all

    subscription = f"/subscriptions/{azure_principal.subscription_id}"
    code, listed = await arm_call(
        arm,
        "GET",
        f"{subscription}/providers/Microsoft.ContainerService/managedClusters",
        arm_token,
    )
    assert code == 200
    assert [c["name"] for c in listed["value"]] == ["aks-1", "aks-2"]
    code, body = await arm_call(
        arm, "POST", listed["value"][0]["id"] + "/listClusterUserCredential", arm_token
    )
    assert code == 200
    kubeconfig = yaml.safe_load(base64.b64decode(body["kubeconfigs"][0]["value"]))
    cluster = kubeconfig["clusters"][0]["cluster"]
    ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
    credentials = ClusterCredentials(cluster["server"], ca_pem, token=aks_token)
    assert "default" in [n.name for n in await kube.list_namespaces(credentials)]

    arm_credentials = ClusterCredentials(cluster["server"], ca_pem, token=arm_token)
    with pytest.raises(PermanentError, match="401"):
        await kube.list_namespaces(arm_credentials)  # an ARM token is no AKS token
    code, body = await arm_call(
        arm,
        "GET",
        f"{subscription}/providers/Microsoft.ContainerService/managedClusters",
        aks_token,
    )
    assert (code, body["error"]["code"]) == (401, "InvalidAuthenticationTokenAudience")
    code, body = await arm_call(
        arm,
        "GET",
        f"{subscription}/resourceGroups/rg-1/providers/Microsoft.ContainerService/managedClusters/nope",
        arm_token,
    )
    assert (code, body["error"]["code"]) == (404, "ResourceNotFound")
    code, body = await arm_call(
        arm,
        "GET",
        f"{subscription}/providers/Microsoft.ContainerService/managedClusters",
        arm_token,
        api_version=False,
    )
    assert (code, body["error"]["code"]) == (400, "MissingApiVersionParameter")


@pytest.mark.usefixtures("authority")
async def test_azure_authority_checks_tenant_client_secret_and_scope(
    azure: AzureStandIn, azure_principal: ServicePrincipal, arm: aiohttp.ClientSession
) -> None:
    wrong_secret = ServicePrincipal(
        azure_principal.tenant_id,
        azure_principal.client_id,
        "not-it",
        azure_principal.subscription_id,
    )
    with pytest.raises(ClientAuthenticationError, match="AADSTS7000215"):
        await azure_token(azure, wrong_secret, ARM_SCOPE)
    stranger = azure.service_principal()  # another tenant and subscription
    foreign = ServicePrincipal(
        stranger.tenant_id,
        azure_principal.client_id,
        azure_principal.client_secret,
        stranger.subscription_id,
    )
    with pytest.raises(ClientAuthenticationError, match="AADSTS700016"):
        await azure_token(azure, foreign, ARM_SCOPE)
    unknown_tenant = ServicePrincipal(
        "00000000-0000-0000-0000-000000000000",
        azure_principal.client_id,
        azure_principal.client_secret,
        stranger.subscription_id,
    )
    with pytest.raises(ClientAuthenticationError, match="AADSTS90002"):
        await azure_token(azure, unknown_tenant, ARM_SCOPE)
    with pytest.raises(ClientAuthenticationError, match="AADSTS500011"):
        await azure_token(azure, azure_principal, "https://vault.azure.net/.default")

    stranger_token = await azure_token(azure, stranger, ARM_SCOPE)
    subscription = f"/subscriptions/{azure_principal.subscription_id}"
    code, body = await arm_call(
        arm,
        "GET",
        f"{subscription}/providers/Microsoft.ContainerService/managedClusters",
        stranger_token,
    )
    assert (code, body["error"]["code"]) == (401, "InvalidAuthenticationTokenTenant")


@pytest.mark.usefixtures("authority")
async def test_azure_switches_bad_secret_rotation_and_throttling(
    azure: AzureStandIn, arm: aiohttp.ClientSession
) -> None:
    principal = azure.service_principal()
    azure.reject_secrets = True
    with pytest.raises(ClientAuthenticationError, match="AADSTS7000215"):
        await azure_token(azure, principal, ARM_SCOPE)
    azure.heal()
    rotated = azure.rotate_secret(principal)
    with pytest.raises(ClientAuthenticationError, match="AADSTS7000215"):
        await azure_token(azure, principal, ARM_SCOPE)
    token = await azure_token(azure, rotated, ARM_SCOPE)

    path = f"/subscriptions/{principal.subscription_id}/providers/Microsoft.ContainerService/managedClusters"
    azure.throttle(times=1)
    code, body = await arm_call(arm, "GET", path, token)
    assert (code, body["error"]["code"]) == (429, "TooManyRequests")
    code, body = await arm_call(arm, "GET", path, token)
    assert (code, body) == (200, {"value": []})


@pytest.mark.usefixtures("authority")
async def test_azure_lists_clusters_in_pages_with_next_links(
    azure: AzureStandIn, arm: aiohttp.ClientSession, kube_cluster: KubeStandIn
) -> None:
    principal = azure.service_principal()
    for name in ("a1", "a2", "a3"):
        azure.add_cluster(
            principal.subscription_id, "rg", name, kube_cluster.url, kube_cluster.ca_pem
        )
    token = await azure_token(azure, principal, ARM_SCOPE)
    azure.page_size = 2
    try:
        path = f"/subscriptions/{principal.subscription_id}/providers/Microsoft.ContainerService/managedClusters"
        _, first = await arm_call(arm, "GET", path, token)
        async with arm.get(
            first["nextLink"], headers={"Authorization": f"Bearer {token}"}
        ) as response:
            second = await response.json()
    finally:
        azure.page_size = 100
    assert [c["name"] for c in first["value"]] == ["a1", "a2"]
    assert [c["name"] for c in second["value"]] == ["a3"]
    assert "nextLink" not in second


@pytest.mark.usefixtures("authority")
async def test_azure_tokens_expire_as_announced(
    azure: AzureStandIn, azure_principal: ServicePrincipal, kube_cluster: KubeStandIn
) -> None:
    azure.token_lifetime_s = 0
    try:
        async with ClientSecretCredential(
            azure_principal.tenant_id,
            azure_principal.client_id,
            azure_principal.client_secret,
            connection_verify=str(azure.ca_file),
        ) as credential:
            token = await credential.get_token_info(AKS_SCOPE)
    finally:
        azure.token_lifetime_s = 3599
    assert token.expires_on <= time.time()  # azure-identity read expires_in
    assert not azure.is_valid_aks_token(token.token)
    expired = ClusterCredentials(kube_cluster.url, kube_cluster.ca_pem, token=token.token)
    with pytest.raises(PermanentError, match="401"):
        await kube.list_namespaces(expired)


AZURE_CLIENT = """
import asyncio, json, sys
from azure.identity.aio import ClientSecretCredential

async def main():
    tenant, client, secret = json.loads(sys.argv[1])
    async with ClientSecretCredential(tenant, client, secret, retry_total=0) as credential:
        token = await credential.get_token("6dae42f8-4368-4678-94ff-3960e28e3630/.default")
    print("token" if token.token else "none")

asyncio.run(main())
"""


def test_azure_identity_trusts_the_standin_through_its_env(azure: AzureStandIn) -> None:
    principal = azure.service_principal()
    argument = json.dumps([principal.tenant_id, principal.client_id, principal.client_secret])
    trusted = run_client(AZURE_CLIENT, argument, azure.env)
    assert trusted.stdout.strip() == "token", trusted.stderr[-2000:]
    untrusted = run_client(AZURE_CLIENT, argument, without_trust(azure.env))
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


# -- AWS EKS -----------------------------------------------------------------


@pytest.fixture(scope="module")
def aws() -> Iterator[EksStandIn]:
    with EksStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def eks_clusters(aws: EksStandIn) -> Iterator[dict[str, KubeStandIn]]:
    """Two clusters in two regions, each its own Kubernetes stand-in that takes
    only EKS tokens naming it."""
    clusters: dict[str, KubeStandIn] = {}
    for region, name in (("eu-west-1", "prod"), ("us-east-1", "dev")):
        standin = KubeStandIn().start()
        standin.tokens.clear()
        standin.accept_tokens_when(aws.token_check(name))
        aws.add_cluster(region, name, standin.url, standin.ca_pem)
        clusters[name] = standin
    yield clusters
    for standin in clusters.values():
        standin.stop()


def aws_session(key: AccessKey, token: str | None = None) -> aioboto3.Session:
    return aioboto3.Session(
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
        aws_session_token=token,
    )


async def mint_eks_token(
    session: aioboto3.Session, aws: EksStandIn, region: str, cluster: str
) -> str:
    """What spacedock's EKS adapter does: presign GetCallerIdentity with x-k8s-aws-id."""
    async with session.client("sts", region_name=region, endpoint_url=aws.url) as sts:
        url = await sts._request_signer.generate_presigned_url(
            {
                "method": "GET",
                "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
                "body": {},
                "headers": {"x-k8s-aws-id": cluster},
                "context": {},
            },
            region_name=region,
            expires_in=60,
            operation_name="",
        )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


async def eks_call(
    session: aioboto3.Session, aws: EksStandIn, region: str, operation: str, **kwargs: Any
) -> dict[str, Any]:
    no_retries = Config(retries={"total_max_attempts": 1})
    async with session.client(
        "eks", region_name=region, endpoint_url=aws.url, config=no_retries
    ) as eks:
        answer: dict[str, Any] = await getattr(eks, operation)(**kwargs)
    return answer


async def test_eks_user_discovers_clusters_per_region_and_reaches_one_with_its_token(
    aws: EksStandIn, eks_clusters: dict[str, KubeStandIn]
) -> None:
    key = aws.user()
    session = aws_session(key)
    async with session.client("sts", region_name="eu-west-1", endpoint_url=aws.url) as sts:
        identity = await sts.get_caller_identity()
    assert identity["Arn"] == f"arn:aws:iam::123456789012:user/{key.user_name}"
    listed = await eks_call(session, aws, "eu-west-1", "list_clusters")
    assert listed["clusters"] == ["prod"]
    assert (await eks_call(session, aws, "us-east-1", "list_clusters"))["clusters"] == ["dev"]
    cluster = (await eks_call(session, aws, "eu-west-1", "describe_cluster", name="prod"))[
        "cluster"
    ]
    assert cluster["status"] == "ACTIVE"
    assert cluster["endpoint"] == eks_clusters["prod"].url

    token = await mint_eks_token(session, aws, "eu-west-1", "prod")
    ca_pem = base64.b64decode(cluster["certificateAuthority"]["data"]).decode()
    namespaces = await kube.list_namespaces(
        ClusterCredentials(cluster["endpoint"], ca_pem, token=token)
    )
    assert "default" in [n.name for n in namespaces]
    dev = eks_clusters["dev"]
    with pytest.raises(PermanentError, match="401"):  # a token names one cluster only
        await kube.list_namespaces(ClusterCredentials(dev.url, dev.ca_pem, token=token))
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        await eks_call(session, aws, "us-east-1", "describe_cluster", name="prod")


async def test_eks_token_problems_are_each_named(aws: EksStandIn) -> None:
    key = aws.user()
    token = await mint_eks_token(aws_session(key), aws, "eu-west-1", "prod")
    assert token_problem(token, "prod") is None
    url = base64.urlsafe_b64decode(token[11:] + "==").decode()

    def wrap(text: str) -> str:
        return "k8s-aws-v1." + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    assert token_problem(token[11:], "prod") == "no k8s-aws-v1. prefix"
    assert token_problem(
        wrap(url.replace("https://sts.", "https://sts.evil.example/")), "prod"
    ) == ("not an STS host")
    assert token_problem(token + "=", "prod") == "base64url padding in the token"
    assert token_problem(wrap(url.replace("GetCallerIdentity", "AssumeRole")), "prod") == (
        "not an STS GetCallerIdentity URL"
    )
    assert token_problem(wrap(url.replace("%3Bx-k8s-aws-id", "")), "prod") == (
        "x-k8s-aws-id is not a signed header"
    )
    later = datetime.now(UTC) + timedelta(minutes=16)
    assert token_problem(token, "prod", now=later) == "expired"
    mismatch = "signature does not match this cluster's name or a live key"
    assert token_problem(token, "dev") == mismatch
    assert (
        token_problem(wrap(url.replace("X-Amz-Expires=60", "X-Amz-Expires=900")), "prod")
        == mismatch
    )
    any_cluster = aws.token_check()
    assert any_cluster(token)
    assert not any_cluster(wrap(url.replace("X-Amz-Expires=60", "X-Amz-Expires=900")))
    aws.revoke(key)
    assert token_problem(token, "prod") == mismatch
    assert not any_cluster(token)


async def test_eks_refuses_bad_keys_and_missing_rights(aws: EksStandIn) -> None:
    key = aws.user()
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        await eks_call(
            aws_session(AccessKey(key.access_key_id, "wrong", key.user_name, key.account_id)),
            aws,
            "eu-west-1",
            "list_clusters",
        )
    unknown = AccessKey(
        "AKIAUNKNOWNUNKNOWN00", key.secret_access_key, key.user_name, key.account_id
    )
    async with aws_session(unknown).client(
        "sts", region_name="eu-west-1", endpoint_url=aws.url
    ) as sts:
        with pytest.raises(ClientError, match="InvalidClientTokenId"):
            await sts.get_caller_identity()
    powerless = aws.user(actions=["sts:GetCallerIdentity"])
    with pytest.raises(ClientError, match="AccessDenied"):
        await eks_call(aws_session(powerless), aws, "eu-west-1", "list_clusters")


async def test_eks_assumed_role_sees_its_own_accounts_clusters(
    aws: EksStandIn, eks_clusters: dict[str, KubeStandIn]
) -> None:
    prod = eks_clusters["prod"]
    aws.add_cluster("eu-west-1", "theirs", prod.url, prod.ca_pem, account_id="111122223333")
    role_arn = aws.role("111122223333")
    async with aws_session(aws.user()).client(
        "sts", region_name="eu-west-1", endpoint_url=aws.url
    ) as sts:
        assumed = (await sts.assume_role(RoleArn=role_arn, RoleSessionName="spacedock"))[
            "Credentials"
        ]
    session = aioboto3.Session(
        aws_access_key_id=assumed["AccessKeyId"],
        aws_secret_access_key=assumed["SecretAccessKey"],
        aws_session_token=assumed["SessionToken"],
    )
    assert (await eks_call(session, aws, "eu-west-1", "list_clusters"))["clusters"] == ["theirs"]
    token = await mint_eks_token(session, aws, "eu-west-1", "theirs")
    assert token_problem(token, "theirs") is None


async def test_eks_throttling_switch(aws: EksStandIn, eks_clusters: dict[str, KubeStandIn]) -> None:
    session = aws_session(aws.user())
    aws.throttle(times=1)
    try:
        with pytest.raises(ClientError, match="ThrottlingException"):
            await eks_call(session, aws, "eu-west-1", "list_clusters")
        assert (await eks_call(session, aws, "eu-west-1", "list_clusters"))["clusters"] == ["prod"]
        aws.throttle()
        async with session.client("sts", region_name="eu-west-1", endpoint_url=aws.url) as sts:
            assert (await sts.get_caller_identity())["Account"] == "123456789012"  # STS unthrottled
        with pytest.raises(ClientError, match="Rate exceeded"):
            await eks_call(session, aws, "eu-west-1", "list_clusters")
    finally:
        aws.heal()


async def test_eks_standins_in_one_process_leave_each_other_alone(
    aws: EksStandIn, eks_clusters: dict[str, KubeStandIn]
) -> None:
    """A session-wide stand-in and a module's own may run at once: stopping one
    removes only what it made and leaves authentication on for the other."""
    key = aws.user()
    with EksStandIn() as other:
        other_key = other.user()
        other.add_cluster("eu-west-1", "short-lived", aws.url, eks_clusters["prod"].ca_pem)
        listed = await eks_call(aws_session(other_key), other, "eu-west-1", "list_clusters")
        assert listed["clusters"] == ["prod", "short-lived"]
    listed = await eks_call(aws_session(key), aws, "eu-west-1", "list_clusters")
    assert listed["clusters"] == ["prod"]
    with pytest.raises(ClientError, match="InvalidClientTokenId"):
        await eks_call(aws_session(other_key), aws, "eu-west-1", "list_clusters")
    wrong = AccessKey(key.access_key_id, "wrong", key.user_name, key.account_id)
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        await eks_call(aws_session(wrong), aws, "eu-west-1", "list_clusters")
