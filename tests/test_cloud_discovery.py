"""What each cloud says, as spacedock reports it: bad credentials, regions, assumed roles,
throttling, and short-lived tokens that are cached and re-minted before they expire.

Everything goes through the running server; the clouds are the session's stand-ins
(moto for AWS, the GCP and Azure stand-ins) with their switches.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sim.azure_standin import AzureStandIn
from sim.clouds import Clouds
from sim.eks import EksStandIn
from sim.gcp_standin import GcpStandIn
from tests.conftest import Org
from tests.support import factories as make

WAIT_S = 20.0
REGIONS = {"AWS": "us-east-1", "GCP": "europe-west1", "AZURE": "westeurope"}
CLUSTERS = """
query($id: ID!, $region: String) {
  cloudAccount(id: $id) { clusters(region: $region) { name region accessGranted } }
}"""
ACCOUNTS = "{ cloudAccounts(first: 100) { totalCount } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "0.5", "SPACEDOCK_PROBE_TIMEOUT_S": "2"}


async def cluster_names(org: Org, account_id: str, region: str | None = None) -> list[str]:
    data = await org.viewer.data(CLUSTERS, {"id": account_id, "region": region})
    return [cluster["name"] for cluster in data["cloudAccount"]["clusters"]]


def bad_credentials(clouds: Clouds, provider: str) -> tuple[dict[str, Any], str, str]:
    """Credentials the cloud refuses, the secret in them, and a word of the cloud's answer."""
    if provider == "AWS":
        keys = clouds.aws_user(make.unique("wrong"))
        secret = "wrong-" + keys["secretAccessKey"]
        return {**keys, "secretAccessKey": secret}, secret, "SignatureDoesNotMatch"
    if provider == "GCP":
        key_file = clouds.gcp.service_account(make.GCP_PROJECT)
        clouds.gcp.revoke_key(key_file)
        return {"serviceAccountJson": key_file}, key_file["private_key_id"], "invalid_grant"
    principal = clouds.credentials("AZURE")
    secret = "wrong-" + principal["clientSecret"]
    return {**principal, "clientSecret": secret}, secret, "AADSTS7000215"


@pytest.mark.parametrize("provider", list(REGIONS))
async def test_credentials_the_cloud_refuses_are_not_stored(
    org: Org, clouds: Clouds, provider: str
) -> None:
    credentials, secret, said = bad_credentials(clouds, provider)
    before = (await org.admin.data(ACCOUNTS))["cloudAccounts"]["totalCount"]
    payload = await org.admin.mutate(
        make.CREATE_CLOUD_ACCOUNT,
        {"input": {"name": make.unique("bad"), "provider": provider, "credentials": credentials}},
    )
    assert payload["cloudAccount"] is None
    assert make.error_fields(payload) == {(("input", "credentials"), "PROVIDER_ERROR")}
    assert said in payload["userErrors"][0]["message"], "the error says what the cloud said"
    assert secret not in json.dumps(payload)
    assert (await org.admin.data(ACCOUNTS))["cloudAccounts"]["totalCount"] == before


async def test_an_unknown_aws_key_is_refused_by_name(org: Org) -> None:
    payload = await org.admin.mutate(
        make.CREATE_CLOUD_ACCOUNT,
        {
            "input": {
                "name": make.unique("unknown"),
                "provider": "AWS",
                "credentials": {
                    "accessKeyId": "AKIA" + "Z" * 16,
                    "secretAccessKey": "s3cr3t-v4lue",
                },
            }
        },
    )
    assert make.error_fields(payload) == {(("input", "credentials"), "PROVIDER_ERROR")}
    assert "InvalidClientTokenId" in payload["userErrors"][0]["message"]
    assert "s3cr3t-v4lue" not in json.dumps(payload)


async def test_discovery_covers_the_accounts_regions_or_the_one_asked_for(
    org: Org, clouds: Clouds
) -> None:
    home, away = make.unique("home"), make.unique("away")
    clouds.add_cluster("AWS", home, "us-east-1")
    clouds.add_cluster("AWS", away, "eu-west-1")
    default = await make.create_cloud_account(org.admin, "AWS")
    listed = await cluster_names(org, default["id"])
    assert home in listed and away not in listed, "the default region only"
    assert away in await cluster_names(org, default["id"], "eu-west-1")
    assert home not in await cluster_names(org, default["id"], "eu-west-1")

    both = await make.create_cloud_account(
        org.admin,
        "AWS",
        credentials={**make.credentials_for("AWS"), "regions": ["eu-west-1", "us-east-1"]},
    )
    data = await org.viewer.data(CLUSTERS, {"id": both["id"], "region": None})
    regions = {c["name"]: c["region"] for c in data["cloudAccount"]["clusters"]}
    assert regions[home] == "us-east-1" and regions[away] == "eu-west-1"

    # A grant is for one cluster in one region.
    await make.grant_cluster_access(org.admin, both["id"], away, "eu-west-1")
    data = await org.viewer.data(CLUSTERS, {"id": both["id"], "region": None})
    granted = {c["name"]: c["accessGranted"] for c in data["cloudAccount"]["clusters"]}
    assert granted[away] is True
    assert granted[home] is False

    bad_region = await org.viewer.call(CLUSTERS, {"id": both["id"], "region": "Mars 1"})
    assert make.top_level_codes(bad_region) == ["BAD_USER_INPUT"]


async def test_an_assumed_role_sees_its_own_accounts_clusters(org: Org, clouds: Clouds) -> None:
    other_account = "222233334444"
    theirs = make.unique("theirs")
    clouds.add_eks_cluster(theirs, "us-east-1", other_account)
    ours = make.unique("ours")
    clouds.add_cluster("AWS", ours, "us-east-1")
    role = clouds.aws_role(make.unique("reader"), other_account)

    assumed = await make.create_cloud_account(
        org.admin, "AWS", credentials={**make.credentials_for("AWS"), "roleArn": role}
    )
    plain = await make.create_cloud_account(org.admin, "AWS")
    seen_by_role = await cluster_names(org, assumed["id"])
    assert theirs in seen_by_role and ours not in seen_by_role
    seen_plain = await cluster_names(org, plain["id"])
    assert ours in seen_plain and theirs not in seen_plain

    # The role's cluster is granted, registered and probed with the role's own token.
    await make.grant_cluster_access(org.admin, assumed["id"], theirs, "us-east-1")
    space = await make.register_cloud_space(
        org.admin, "AWS", account_id=assumed["id"], cluster_name=theirs
    )
    await until_active(org, space["id"])


async def until_active(org: Org, space_id: str) -> dict[str, Any]:
    query = "query($id: ID!) { space(id: $id) { status lastProbe { ok error } } }"
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        space: dict[str, Any] = (await org.viewer.data(query, {"id": space_id}))["space"]
        if space["status"] == "ACTIVE":
            return space
        assert asyncio.get_running_loop().time() < deadline, f"never ACTIVE: {space}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("provider", list(REGIONS))
async def test_throttling_is_retried_then_reported(org: Org, clouds: Clouds, provider: str) -> None:
    region = REGIONS[provider]
    cluster = make.unique("busy")
    clouds.add_cluster(
        provider, cluster, region, make.cloud_config(provider, cluster).get("resourceGroup")
    )
    account = await make.create_cloud_account(org.admin, provider)
    switches: dict[str, EksStandIn | GcpStandIn | AzureStandIn] = {
        "AWS": clouds.aws,
        "GCP": clouds.gcp,
        "AZURE": clouds.azure,
    }
    switch = switches[provider]
    try:
        switch.throttle(2)
        assert cluster in await cluster_names(org, account["id"], region), "retried through"
        switch.throttle()
        response = await org.viewer.call(CLUSTERS, {"id": account["id"], "region": region})
        assert response["data"]["cloudAccount"]["clusters"] is None
        [error] = response["errors"]
        assert error["extensions"]["code"] == "PROVIDER_ERROR"
        assert error["message"].startswith("throttled"), error["message"]
    finally:
        switch.heal()
    assert cluster in await cluster_names(org, account["id"], region)


async def test_tokens_are_cached_and_minted_again_shortly_before_they_expire(
    org: Org, clouds: Clouds
) -> None:
    """GKE access tokens that live 70 s are used until 60 s before they expire."""
    clouds.gcp.token_lifetime_s = 70
    try:
        cluster = make.unique("cached")
        account = await make.create_cloud_account(org.admin, "GCP")
        seen = len(clouds.tokens_seen)
        space = await make.register_cloud_space(
            org.admin, "GCP", account_id=account["id"], cluster_name=cluster, region="europe-west1"
        )
        await until_active(org, space["id"])
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            tokens = [t for t in clouds.tokens_seen[seen:] if clouds.gcp.is_valid_access_token(t)]
            distinct = list(dict.fromkeys(tokens))
            if len(distinct) >= 2:
                break
            assert asyncio.get_running_loop().time() < deadline, f"one token only: {len(tokens)}"
            await asyncio.sleep(0.2)
        first, second = distinct[:2]
        assert tokens.count(first) >= 2, "the first token served several probes (cached)"
        assert clouds.gcp.is_valid_access_token(first), "re-minted before the old one expired"
        assert tokens.index(second) > tokens.index(first)
    finally:
        clouds.gcp.token_lifetime_s = 3599
