"""A cloud account's whole life, per cloud, through the running server.

Create an account (verified by the cloud) → discover its clusters → grant one →
register it → ACTIVE from a real probe with a freshly minted token → list and
create namespaces → revoke → INACTIVE with "cluster access revoked" → grant
again → ACTIVE. The clouds are moto (AWS) and the GCP stand-in; every cluster
is the Kubernetes stand-in, which accepts only tokens those clouds' rules make.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from sim.clouds import Clouds, eks_token_url
from tests.conftest import Org
from tests.support import factories as make
from tests.support.graphql import GraphQL

WAIT_S = 20.0
REGIONS = {"AWS": "us-east-1", "GCP": "europe-west1", "AZURE": "westeurope"}
PROVIDERS = list(REGIONS)
CLUSTERS = """
query($id: ID!, $region: String) {
  cloudAccount(id: $id) {
    clusters(region: $region) {
      name region resourceGroup projectId endpoint version accessGranted space { id name }
    }
  }
}"""
SPACE = """
query($id: ID!) {
  space(id: $id) {
    status statusReason consecutiveFailures
    lastProbe { ok version error }
  }
}"""
NAMESPACES = "query($id: ID!) { space(id: $id) { namespaces { name managed } } }"
CREATE_NAMESPACE = """
mutation($input: CreateNamespaceInput!) {
  createNamespace(input: $input) { namespace { name managed } userErrors { field message code } }
}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "1",
        "SPACEDOCK_PROBE_TIMEOUT_S": "2",
        "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "2",
    }


async def until(
    client: GraphQL, space_id: str, wanted: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        space: dict[str, Any] = (await client.data(SPACE, {"id": space_id}))["space"]
        if wanted(space):
            return space
        assert asyncio.get_running_loop().time() < deadline, f"no {what} in {WAIT_S}s: {space}"
        await asyncio.sleep(0.1)


async def tokens_after(clouds: Clouds, seen: int, count: int) -> list[str]:
    """The next `count` (or more) tokens the cluster accepts after the first `seen`."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while len(clouds.tokens_seen) < seen + count:
        assert asyncio.get_running_loop().time() < deadline, "the probes stopped reaching it"
        await asyncio.sleep(0.1)
    return clouds.tokens_seen[seen:]


def active(space: dict[str, Any]) -> bool:
    return space["status"] == "ACTIVE" and space["lastProbe"] is not None


async def discovered(client: GraphQL, account_id: str, region: str | None) -> dict[str, Any]:
    data = await client.data(CLUSTERS, {"id": account_id, "region": region})
    return {cluster["name"]: cluster for cluster in data["cloudAccount"]["clusters"]}


async def register(org: Org, provider: str, account_id: str, cluster: str) -> dict[str, Any]:
    payload = await org.editor.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("space"),
                "provider": provider,
                "cloudAccountId": account_id,
                "config": make.cloud_config(provider, cluster, REGIONS[provider]),
            }
        },
    )
    space: dict[str, Any] = make.succeeded(payload)["space"]
    return space


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_account_to_active_space_and_back_through_revoke(
    org: Org, clouds: Clouds, provider: str
) -> None:
    region = REGIONS[provider]
    account = await make.create_cloud_account(org.admin, provider)
    cluster = make.unique("cluster")
    clouds.add_cluster(provider, cluster, region)

    listed = await discovered(org.viewer, account["id"], region)
    assert listed[cluster]["region"] == region
    # EKS and GKE report the API server; AKS its FQDN (the stand-in's is 127.0.0.1).
    expected = "https://127.0.0.1" if provider == "AZURE" else clouds.kube.url
    assert listed[cluster]["endpoint"] == expected
    assert listed[cluster]["version"]
    assert listed[cluster]["accessGranted"] is False
    assert listed[cluster]["space"] is None

    access = {"cloudAccountId": account["id"], "region": region, "clusterName": cluster}
    if provider == "AZURE":
        access["resourceGroup"] = make.cloud_config(provider, cluster)["resourceGroup"]
    make.succeeded(await org.admin.mutate(make.GRANT_CLUSTER_ACCESS, {"input": access}))
    assert (await discovered(org.viewer, account["id"], region))[cluster]["accessGranted"]

    tokens_before = len(clouds.tokens_seen)
    space = await register(org, provider, account["id"], cluster)
    probed = await until(org.viewer, space["id"], active, "ACTIVE")
    assert probed["lastProbe"] == {"ok": True, "version": clouds.kube.git_version, "error": None}
    minted = clouds.tokens_seen[tokens_before:]
    assert minted, "the probe reached the cluster with a token the cloud's rules accept"
    if provider == "AWS":
        assert all(eks_token_url(token) for token in minted)
    listed = await discovered(org.viewer, account["id"], region)
    assert listed[cluster]["space"] == {"id": space["id"], "name": space["name"]}

    names = (await org.viewer.data(NAMESPACES, {"id": space["id"]}))["space"]["namespaces"]
    assert {"name": "default", "managed": False} in names
    namespace = make.unique("ns")
    created = await org.editor.mutate(
        CREATE_NAMESPACE, {"input": {"spaceId": space["id"], "name": namespace}}
    )
    assert make.succeeded(created)["namespace"] == {"name": namespace, "managed": True}
    names = (await org.viewer.data(NAMESPACES, {"id": space["id"]}))["space"]["namespaces"]
    assert {"name": namespace, "managed": True} in names

    make.succeeded(await org.admin.mutate(make.REVOKE_CLUSTER_ACCESS, {"input": access}))
    revoked = await until(
        org.viewer, space["id"], lambda s: s["status"] == "INACTIVE", "INACTIVE after revoke"
    )
    assert revoked["statusReason"].startswith("cluster access revoked")
    assert revoked["lastProbe"]["error"].startswith("cluster access revoked")
    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})
    assert make.top_level_codes(response) == ["PRECONDITION_FAILED"]
    assert response["data"]["space"]["namespaces"] is None
    refused = await org.editor.mutate(
        CREATE_NAMESPACE, {"input": {"spaceId": space["id"], "name": make.unique("ns")}}
    )
    assert make.error_fields(refused) == {(("input", "spaceId"), "PRECONDITION_FAILED")}
    assert (await discovered(org.viewer, account["id"], region))[cluster]["accessGranted"] is False

    tokens_before = len(clouds.tokens_seen)
    make.succeeded(await org.admin.mutate(make.GRANT_CLUSTER_ACCESS, {"input": access}))
    back = await until(org.viewer, space["id"], active, "ACTIVE after the grant")
    assert back["lastProbe"]["ok"] is True
    assert clouds.tokens_seen[tokens_before:], "probes mint again after the grant"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_what_discovery_shows_is_all_a_grant_and_a_registration_need(
    org: Org, clouds: Clouds, provider: str
) -> None:
    """The README's path: the fields of a DiscoveredCluster, and nothing else, grant it and
    register it; the project and the subscription come from the account."""
    account = await make.create_cloud_account(org.admin, provider)
    cluster = make.unique("cluster")
    group = f"rg-{make.unique('g')}" if provider == "AZURE" else None
    clouds.add_cluster(provider, cluster, REGIONS[provider], group)

    found = (await discovered(org.viewer, account["id"], REGIONS[provider]))[cluster]
    assert found["resourceGroup"] == group
    assert found["projectId"] == (make.GCP_PROJECT if provider == "GCP" else None)
    access = {"cloudAccountId": account["id"], "region": found["region"], "clusterName": cluster}
    if found["resourceGroup"] is not None:
        access["resourceGroup"] = found["resourceGroup"]
    make.succeeded(await org.admin.mutate(make.GRANT_CLUSTER_ACCESS, {"input": access}))
    config = {k: v for k, v in access.items() if k != "cloudAccountId"}
    payload = await org.editor.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("space"),
                "provider": provider,
                "cloudAccountId": account["id"],
                "config": config,
            }
        },
    )
    space = make.succeeded(payload)["space"]
    stored = await org.viewer.data(
        "query($id: ID!) { space(id: $id) { config { projectId subscriptionId resourceGroup } } }",
        {"id": space["id"]},
    )
    assert stored["space"]["config"] == {
        "projectId": make.GCP_PROJECT if provider == "GCP" else None,
        "subscriptionId": make.AZURE_SUBSCRIPTION if provider == "AZURE" else None,
        "resourceGroup": group,
    }
    await until(org.viewer, space["id"], active, "ACTIVE")

    if provider != "AWS":  # another project or subscription than the account's is refused
        field = "projectId" if provider == "GCP" else "subscriptionId"
        other = "other-project" if provider == "GCP" else "00000000-0000-4000-8000-0000000000ff"
        refused = await org.editor.mutate(
            make.REGISTER_SPACE,
            {
                "input": {
                    "name": make.unique("space"),
                    "provider": provider,
                    "cloudAccountId": account["id"],
                    "config": {**config, field: other},
                }
            },
        )
        assert make.error_fields(refused) == {(("input", "config", field), "INVALID")}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_grant_and_registration_need_a_cluster_that_exists(
    org: Org, clouds: Clouds, provider: str
) -> None:
    region = REGIONS[provider]
    account = await make.create_cloud_account(org.admin, provider)
    missing = {"cloudAccountId": account["id"], "region": region, "clusterName": "not-there"}
    if provider == "AZURE":
        missing["resourceGroup"] = make.cloud_config(provider, "not-there")["resourceGroup"]
    payload = await org.admin.mutate(make.GRANT_CLUSTER_ACCESS, {"input": missing})
    assert make.error_fields(payload) == {(("input", "clusterName"), "NOT_FOUND")}
    assert "not-there" in payload["userErrors"][0]["message"]

    cluster = make.unique("cluster")
    clouds.add_cluster(provider, cluster, region)
    await make.grant_cluster_access(
        org.admin,
        account["id"],
        cluster,
        region,
        make.cloud_config(provider, cluster).get("resourceGroup"),
    )
    clouds.remove_cluster(provider, cluster, region)
    payload = await org.editor.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("space"),
                "provider": provider,
                "cloudAccountId": account["id"],
                "config": make.cloud_config(provider, cluster, region),
            }
        },
    )
    assert make.error_fields(payload) == {(("input", "config", "clusterName"), "NOT_FOUND")}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_registration_needs_the_grant(org: Org, clouds: Clouds, provider: str) -> None:
    region = REGIONS[provider]
    account = await make.create_cloud_account(org.admin, provider)
    cluster = make.unique("cluster")
    clouds.add_cluster(provider, cluster, region)
    payload = await org.editor.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("space"),
                "provider": provider,
                "cloudAccountId": account["id"],
                "config": make.cloud_config(provider, cluster, region),
            }
        },
    )
    assert make.error_fields(payload) == {
        (("input", "config", "clusterName"), "PRECONDITION_FAILED")
    }


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_rotation_swaps_credentials_and_probes_mint_with_the_new_ones(
    org: Org, clouds: Clouds, provider: str
) -> None:
    region = REGIONS[provider]
    # Its own IAM user, so that its tokens can be told from other spaces' on the shared cluster.
    old = clouds.aws_user(make.unique("old")) if provider == "AWS" else None
    account = await make.create_cloud_account(org.admin, provider, credentials=old)
    cluster = make.unique("cluster")
    clouds.add_cluster(provider, cluster, region)
    await make.grant_cluster_access(
        org.admin,
        account["id"],
        cluster,
        region,
        make.cloud_config(provider, cluster).get("resourceGroup"),
    )
    space = await register(org, provider, account["id"], cluster)
    await until(org.viewer, space["id"], active, "ACTIVE")

    fresh: dict[str, Any]
    bad: dict[str, Any]
    marker: str | None = None
    if provider == "AWS":
        fresh = clouds.aws_user(make.unique("rotated"))
        secret = "not-the-secret-" + fresh["secretAccessKey"][:8]
        bad = {**fresh, "secretAccessKey": secret}
        marker = fresh["accessKeyId"]
    elif provider == "GCP":
        fresh = {"serviceAccountJson": clouds.gcp.service_account(make.GCP_PROJECT)}
        revoked_key = clouds.gcp.service_account(make.GCP_PROJECT)
        clouds.gcp.revoke_key(revoked_key)
        bad = {"serviceAccountJson": revoked_key}
        secret = revoked_key["private_key_id"]
    if provider == "AZURE":
        fresh = clouds.credentials("AZURE")
        secret = "wrong-" + fresh["clientSecret"]
        bad = {**fresh, "clientSecret": secret}

    refused = await org.admin.mutate(
        make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS, {"input": {"id": account["id"], "credentials": bad}}
    )
    assert refused["cloudAccount"] is None
    assert make.error_fields(refused) == {(("input", "credentials"), "PROVIDER_ERROR")}
    assert secret not in json.dumps(refused)
    # Nothing changed: discovery still works with the old credentials, the space stays ACTIVE.
    assert cluster in await discovered(org.viewer, account["id"], region)

    rotated = await org.admin.mutate(
        make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS,
        {"input": {"id": account["id"], "credentials": fresh}},
    )
    assert make.succeeded(rotated)["cloudAccount"] == account
    audited = await org.admin.data(
        "query($id: ID!) { auditEvents(first: 100, filter: {targetId: $id}) "
        "{ nodes { action outcome input } } }",
        {"id": account["id"]},
    )
    rotations = [
        e for e in audited["auditEvents"]["nodes"] if e["action"] == "rotateCloudAccountCredentials"
    ]
    assert sorted(e["outcome"] for e in rotations) == ["OK", "PROVIDER_ERROR"]
    assert all(e["input"]["credentials"] == "[redacted]" for e in rotations), rotations
    seen = len(clouds.tokens_seen)
    await tokens_after(clouds, seen, 2)
    if marker is not None and old is not None:
        # The first token of the new key shows the cache was dropped; the old key is gone after.
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while not any(marker in (eks_token_url(t) or "") for t in clouds.tokens_seen[seen:]):
            assert asyncio.get_running_loop().time() < deadline, "no token of the new key"
            await asyncio.sleep(0.1)
        urls = [eks_token_url(token) or "" for token in clouds.tokens_seen[seen:]]
        first_new = next(i for i, url in enumerate(urls) if marker in url)
        await tokens_after(clouds, seen + first_new + 1, 2)
        later = [eks_token_url(t) or "" for t in clouds.tokens_seen[seen + first_new :]]
        assert not [url for url in later if old["accessKeyId"] in url], "the old key is unused"
    await until(org.viewer, space["id"], active, "ACTIVE after the rotation")
    assert cluster in await discovered(org.viewer, account["id"], region)


async def test_rotation_is_for_admins_and_own_accounts(org: Org, other_org: Org) -> None:
    account = await make.create_cloud_account(org.admin, "AWS")
    credentials = make.credentials_for("AWS")
    as_editor = await org.editor.mutate(
        make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS,
        {"input": {"id": account["id"], "credentials": credentials}},
    )
    assert make.error_fields(as_editor) == {(None, "FORBIDDEN")}
    foreign = await other_org.admin.mutate(
        make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS,
        {"input": {"id": account["id"], "credentials": credentials}},
    )
    assert make.error_fields(foreign) == {(("input", "id"), "NOT_FOUND")}
    malformed = await org.admin.mutate(
        make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS,
        {"input": {"id": account["id"], "credentials": {"accessKeyId": "x"}}},
    )
    assert make.error_fields(malformed) == {
        (("input", "credentials", "accessKeyId"), "INVALID"),
        (("input", "credentials", "secretAccessKey"), "INVALID"),
    }
