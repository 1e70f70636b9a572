"""Ambient credentials: the server's own cloud identity, for the orgs listed in
SPACEDOCK_AMBIENT_CREDENTIAL_ORGS only.

The server runs with an identity of its own on each cloud (AWS keys in its
environment, a GCP application-default key file, an Azure service principal in
the environment variables `DefaultAzureCredential` reads), as it would with an
instance profile, workload identity or managed identity.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim.clouds import Clouds
from tests.conftest import Org, new_org
from tests.support import factories as make
from tests.support.graphql import GraphQL
from tests.support.server import Server, mint_token

PLATFORM = f"platform-{make.unique('org')}"
AMBIENT: dict[str, dict[str, Any]] = {
    "AWS": {"ambient": True},
    "GCP": {"ambient": True, "projectId": make.GCP_PROJECT},
    "AZURE": {"ambient": True, "subscriptionId": make.AZURE_SUBSCRIPTION},
}
REGIONS = {"AWS": "us-east-1", "GCP": "europe-west1", "AZURE": "westeurope"}
CLUSTERS = "query($id: ID!) { cloudAccount(id: $id) { clusters { name } } }"


@pytest.fixture(scope="module")
def server_env(
    clouds: Clouds, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    keys = clouds.aws_user(make.unique("server-identity"))
    adc = Path(tmp_path_factory.mktemp("adc")) / "application_default_credentials.json"
    adc.write_text(json.dumps(clouds.gcp.service_account(make.GCP_PROJECT)))
    principal = clouds.credentials("AZURE")
    yield {
        "SPACEDOCK_AMBIENT_CREDENTIAL_ORGS": f"some-other-org, {PLATFORM}",
        "AWS_ACCESS_KEY_ID": keys["accessKeyId"],
        "AWS_SECRET_ACCESS_KEY": keys["secretAccessKey"],
        "GOOGLE_APPLICATION_CREDENTIALS": str(adc),
        "AZURE_TENANT_ID": principal["tenantId"],
        "AZURE_CLIENT_ID": principal["clientId"],
        "AZURE_CLIENT_SECRET": principal["clientSecret"],
    }


@pytest.fixture
async def platform(server: Server) -> GraphQL:
    """The admin of the org listed in SPACEDOCK_AMBIENT_CREDENTIAL_ORGS."""
    token = await mint_token(server.backend.url, PLATFORM, "admin")
    return GraphQL(server.url, server.ws_url, token)


@pytest.mark.parametrize("provider", list(AMBIENT))
async def test_a_listed_org_uses_the_servers_own_identity(
    platform: GraphQL, clouds: Clouds, provider: str
) -> None:
    cluster = make.unique("ambient")
    config = make.cloud_config(provider, cluster, REGIONS[provider])
    clouds.add_cluster(provider, cluster, REGIONS[provider], config.get("resourceGroup"))
    account = await make.create_cloud_account(platform, provider, credentials=AMBIENT[provider])
    data = await platform.data(CLUSTERS, {"id": account["id"]})
    assert cluster in [c["name"] for c in data["cloudAccount"]["clusters"]]


@pytest.mark.parametrize("provider", list(AMBIENT))
async def test_any_other_org_is_forbidden_with_the_setting_named(
    server: Server, provider: str
) -> None:
    other: Org = await new_org(server, "tenant")
    payload = await other.admin.mutate(
        make.CREATE_CLOUD_ACCOUNT,
        {
            "input": {
                "name": make.unique("ambient"),
                "provider": provider,
                "credentials": AMBIENT[provider],
            }
        },
    )
    assert payload["cloudAccount"] is None
    assert make.error_fields(payload) == {(("input", "credentials", "ambient"), "FORBIDDEN")}
    assert "SPACEDOCK_AMBIENT_CREDENTIAL_ORGS" in payload["userErrors"][0]["message"]


async def test_ambient_accounts_take_no_keys(platform: GraphQL) -> None:
    payload = await platform.mutate(
        make.CREATE_CLOUD_ACCOUNT,
        {
            "input": {
                "name": make.unique("ambient"),
                "provider": "AWS",
                "credentials": {"ambient": True, "secretAccessKey": "s"},
            }
        },
    )
    assert make.error_fields(payload) == {(("input", "credentials", "secretAccessKey"), "INVALID")}
