"""Cloud accounts: credentials checked for shape and sealed at rest, and per-cluster grants.

Credentials go in through `create_account` and never come back out: only
`providers/` gets them, decrypted, when it mints a cluster credential.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import Problems, UserErrors
from core.ids import new_id
from core.names import check_new_name, cloud_name_problem
from core.rbac import Viewer
from core.secrets import SecretBox
from core.services import Unit
from db import cloud_accounts as account_rows
from db import owned
from db.tables import CloudAccount, ClusterGrant

UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
AWS_ACCESS_KEY_ID = re.compile(r"^[A-Z0-9]{16,128}$")
AWS_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
AWS_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
GCP_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
REGION = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")

CREDENTIAL_KEYS = {
    "AWS": {"accessKeyId", "secretAccessKey", "sessionToken", "roleArn", "externalId", "regions"},
    "GCP": {"serviceAccountJson", "projectId"},
    "AZURE": {"tenantId", "clientId", "clientSecret", "subscriptionId"},
}


@dataclass(frozen=True)
class ClusterRef:
    """A cluster's identity on an account, as ClusterAccessInput names it."""

    cloud_account_id: str
    region: str
    cluster_name: str
    resource_group: str | None = None


def cluster_key(
    provider: str, region: str | None, cluster_name: str, resource_group: str | None
) -> str:
    """Grants are keyed per provider: AZURE by resource group, the others by region."""
    if provider == "AZURE":
        return f"{(resource_group or '').lower()}/{cluster_name}"
    return f"{region}/{cluster_name}"


def _text(
    problems: Problems,
    credentials: Mapping[str, Any],
    key: str,
    required: bool,
    pattern: re.Pattern[str] | None = None,
    what: str = "",
) -> str | None:
    value = credentials.get(key)
    if value is None:
        if required:
            problems.add([key], f"{key} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        problems.add([key], f"{key} must be a non-empty string")
        return None
    if pattern is not None and not pattern.fullmatch(value):
        problems.add([key], f"{key} must be {what}")  # never echo the value: it may be secret
        return None
    return value


def _aws(problems: Problems, credentials: Mapping[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = {
        "accessKeyId": _text(
            problems,
            credentials,
            "accessKeyId",
            True,
            AWS_ACCESS_KEY_ID,
            "16-128 uppercase letters and digits",
        ),
        "secretAccessKey": _text(problems, credentials, "secretAccessKey", True),
        "sessionToken": _text(problems, credentials, "sessionToken", False),
        "roleArn": _text(
            problems,
            credentials,
            "roleArn",
            False,
            AWS_ROLE_ARN,
            "an IAM role ARN (arn:aws:iam::123456789012:role/name)",
        ),
        "externalId": _text(problems, credentials, "externalId", False),
    }
    regions = credentials.get("regions")
    if regions is not None:
        if (
            not isinstance(regions, list)
            or not regions
            or not all(isinstance(r, str) and AWS_REGION.fullmatch(r) for r in regions)
        ):
            problems.add(
                ["regions"], "regions must be a non-empty list of AWS regions such as us-east-1"
            )
        else:
            checked["regions"] = sorted(set(regions))
    return {k: v for k, v in checked.items() if v is not None}


def _gcp(problems: Problems, credentials: Mapping[str, Any]) -> dict[str, Any]:
    raw = credentials.get("serviceAccountJson")
    service_account: Any = raw
    if raw is None:
        problems.add(["serviceAccountJson"], "serviceAccountJson is required")
        return {}
    if isinstance(raw, str):
        try:
            service_account = json.loads(raw)
        except ValueError:
            problems.add(
                ["serviceAccountJson"],
                "serviceAccountJson must be the JSON key file of a service account",
            )
            return {}
    if not isinstance(service_account, dict) or service_account.get("type") != "service_account":
        problems.add(
            ["serviceAccountJson"],
            'serviceAccountJson must be a key file with "type": "service_account"',
        )
        return {}
    missing = [
        k
        for k in ("client_email", "private_key", "token_uri")
        if not isinstance(service_account.get(k), str)
    ]
    if missing:
        problems.add(["serviceAccountJson"], f"serviceAccountJson lacks {', '.join(missing)}")
    elif "PRIVATE KEY-----" not in service_account["private_key"]:
        problems.add(
            ["serviceAccountJson"], "serviceAccountJson private_key must be a PEM private key"
        )
    project = credentials.get("projectId", service_account.get("project_id"))
    if not isinstance(project, str) or not GCP_PROJECT.fullmatch(project):
        problems.add(
            ["projectId"], "projectId (or the key file's project_id) must be a GCP project id"
        )
    return {"serviceAccountJson": service_account, "projectId": project}


def _azure(problems: Problems, credentials: Mapping[str, Any]) -> dict[str, Any]:
    checked = {
        "tenantId": _text(problems, credentials, "tenantId", True, UUID, "a UUID"),
        "clientId": _text(problems, credentials, "clientId", True, UUID, "a UUID"),
        "clientSecret": _text(problems, credentials, "clientSecret", True),
        "subscriptionId": _text(problems, credentials, "subscriptionId", True, UUID, "a UUID"),
    }
    return {k: v for k, v in checked.items() if v is not None}


CHECKS = {"AWS": _aws, "GCP": _gcp, "AZURE": _azure}


def check_credentials(provider: str, credentials: Any, problems: Problems) -> dict[str, Any]:
    """The credentials in canonical form, or problems naming each field at fault."""
    at = Problems(*problems.root, "credentials")
    if provider not in CHECKS:
        problems.add(
            ["provider"], "provider must be AWS, GCP or AZURE; GENERIC spaces need no cloud account"
        )
        return {}
    if not isinstance(credentials, dict):
        at.add(
            [], f"credentials must be an object with {', '.join(sorted(CREDENTIAL_KEYS[provider]))}"
        )
        problems.errors.extend(at.errors)
        return {}
    for unknown in sorted(set(credentials) - CREDENTIAL_KEYS[provider]):
        at.add([unknown], f"{unknown} is not a {provider} credential field")
    checked = CHECKS[provider](at, credentials)
    problems.errors.extend(at.errors)
    return checked


async def create_account(
    unit: Unit, viewer: Viewer, secrets: SecretBox, name: str, provider: str, credentials: Any
) -> CloudAccount:
    viewer.require("cloudaccount:create")
    problems = Problems("input")
    await check_new_name(
        problems,
        name,
        lambda: owned.by_name(unit.session, CloudAccount, viewer.org_id, name),
        "a cloud account",
    )
    checked = check_credentials(provider, credentials, problems)
    problems.raise_if_any()
    account = CloudAccount(
        id=new_id("ca"),
        org_id=viewer.org_id,
        name=name,
        provider=provider,
        credentials_ciphertext=secrets.seal(checked),
        created_at=unit.now,
    )
    await owned.add(unit.session, account)
    return account


async def account_in_org(
    unit: Unit, viewer: Viewer, account_id: str, field: list[str]
) -> CloudAccount:
    """The caller's account, or NOT_FOUND whether it is unknown or another org's."""
    account = await owned.by_id(unit.session, CloudAccount, viewer.org_id, account_id)
    if account is None:
        raise UserErrors.one(field, "no such cloud account", "NOT_FOUND")
    return account


async def delete_account(unit: Unit, viewer: Viewer, account_id: str) -> str:
    viewer.require("cloudaccount:delete")
    account = await account_in_org(unit, viewer, account_id, ["input", "id"])
    in_use = await account_rows.live_spaces_using(unit.session, account.id)
    if in_use:
        raise UserErrors.one(
            ["input", "id"],
            f"{in_use} registered space(s) use this account; deregister them first",
            "PRECONDITION_FAILED",
        )
    await owned.remove(unit.session, account)
    return account.id


def _check_cluster_ref(problems: Problems, provider: str | None, ref: ClusterRef) -> None:
    """provider None: the account is unknown, so only the provider-neutral rules apply."""
    if not REGION.fullmatch(ref.region):
        problems.add(["region"], "region must be a cloud region or location such as us-east-1")
    if (why := cloud_name_problem(ref.cluster_name)) is not None:
        problems.add(["clusterName"], f"clusterName {why}")
    if provider == "AZURE":
        if not ref.resource_group:
            problems.add(["resourceGroup"], "resourceGroup is required for AZURE")
        elif (why := cloud_name_problem(ref.resource_group)) is not None:
            problems.add(["resourceGroup"], f"resourceGroup {why}")
    elif provider is not None and ref.resource_group is not None:
        problems.add(["resourceGroup"], "resourceGroup applies to AZURE only")


async def _grant_target(unit: Unit, viewer: Viewer, ref: ClusterRef) -> tuple[CloudAccount, str]:
    """The account and grant key a ClusterAccessInput names, with every fault at once."""
    account = await owned.by_id(unit.session, CloudAccount, viewer.org_id, ref.cloud_account_id)
    problems = Problems("input")
    if account is None:
        problems.add(["cloudAccountId"], "no such cloud account", "NOT_FOUND")
    _check_cluster_ref(problems, account.provider if account else None, ref)
    problems.raise_if_any()
    assert account is not None
    return account, cluster_key(account.provider, ref.region, ref.cluster_name, ref.resource_group)


async def grant_access(unit: Unit, viewer: Viewer, ref: ClusterRef) -> ClusterGrant:
    viewer.require("cloudaccount:update")
    account, key = await _grant_target(unit, viewer, ref)
    existing = await account_rows.grant(unit.session, account.id, key)
    if existing is not None:
        return existing  # granting twice is idempotent
    grant = ClusterGrant(
        id=new_id("grant"),
        cloud_account_id=account.id,
        cluster_key=key,
        region=ref.region,
        cluster_name=ref.cluster_name,
        resource_group=ref.resource_group,
        granted_at=unit.now,
    )
    await owned.add(unit.session, grant)
    return grant


async def revoke_access(unit: Unit, viewer: Viewer, ref: ClusterRef) -> ClusterGrant:
    viewer.require("cloudaccount:update")
    account, key = await _grant_target(unit, viewer, ref)
    grant = await account_rows.grant(unit.session, account.id, key)
    if grant is None:
        raise UserErrors.one(
            ["input", "clusterName"], "this account has no access to that cluster", "NOT_FOUND"
        )
    await owned.remove(unit.session, grant)
    return grant


def account_project(secrets: SecretBox, account: CloudAccount) -> dict[str, Any]:
    """The non-secret scope of an account that a space's config must agree with."""
    credentials = secrets.open(account.credentials_ciphertext)
    return {
        "projectId": credentials.get("projectId"),
        "subscriptionId": credentials.get("subscriptionId"),
    }
