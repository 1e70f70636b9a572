"""One descriptor per provider: every rule that differs between AWS, GCP, AZURE and GENERIC.

Config fields a space needs, the credential shape an account stores, who a
cluster is (identity key, registered once per org), how its grant is keyed, and
which config fields must agree with the account (its scope) live here and
nowhere else. Adding a provider is one entry in PROVIDERS plus one adapter in
`providers/`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.common.errors import Problems
from core.common.names import MAX_TEXT_BYTES
from core.spaces.cluster_endpoints import server_identity
from providers.clouds import ClusterLocation

UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
AWS_ACCESS_KEY_ID = re.compile(r"^[A-Z0-9]{16,128}$")
AWS_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
AWS_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
GCP_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
REGION = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")
REGION_EXAMPLE = "a cloud region or location such as us-east-1"
GENERIC_SECRETS = ("caCert", "serviceAccountToken", "clientCertificate", "clientKey")
AMBIENT = "ambient"

CredentialCheck = Callable[[Problems, Mapping[str, Any], bool], dict[str, Any]]


@dataclass(frozen=True)
class ClusterRef:
    """A cluster's identity on an account, as ClusterAccessInput names it."""

    cloud_account_id: str
    region: str
    cluster_name: str
    resource_group: str | None = None


@dataclass(frozen=True)
class CloudTarget:
    """An account's decrypted credentials and, when the call is about one, a cluster on it."""

    provider: str
    credentials: Mapping[str, Any] = field(repr=False)
    location: ClusterLocation | None = None


@dataclass(frozen=True)
class Provider:
    """What one provider needs and how its clusters are identified."""

    name: str
    # SpaceConfigInput fields a space needs beyond clusterName, and all it may carry.
    config_required: tuple[str, ...]
    config_allowed: frozenset[str]
    # Config fields that must equal the account's own (a GCP project, an Azure subscription).
    account_scope: tuple[str, ...] = ()
    # Credential fields of an account; empty for providers without accounts (GENERIC).
    credential_fields: frozenset[str] = frozenset()
    ambient_fields: frozenset[str] = frozenset()
    check_credentials: CredentialCheck | None = None
    region_pattern: re.Pattern[str] = REGION
    region_example: str = REGION_EXAMPLE
    # Grants are keyed by resource group (AZURE) or by region (the others).
    grant_by_resource_group: bool = False
    identity: Callable[[str | None, Mapping[str, str]], str] = lambda _account, config: (
        f"GENERIC/{server_identity(config['server'])}"
    )

    @property
    def cloud(self) -> bool:
        return self.check_credentials is not None

    def grant_key(self, region: str | None, cluster_name: str, resource_group: str | None) -> str:
        if self.grant_by_resource_group:
            return f"{(resource_group or '').lower()}/{cluster_name}"
        return f"{region}/{cluster_name}"

    def grant_key_of(self, config: Mapping[str, str]) -> str:
        """The grant a registered space's cluster needs."""
        return self.grant_key(
            config.get("region"), config["clusterName"], config.get("resourceGroup")
        )

    def identity_key(self, cloud_account_id: str | None, config: Mapping[str, str]) -> str:
        """Who the cluster is: a cluster is registered at most once per org."""
        return self.identity(cloud_account_id, config)


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


def _present(checked: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in checked.items() if v is not None}


def _aws(problems: Problems, credentials: Mapping[str, Any], ambient: bool) -> dict[str, Any]:
    checked: dict[str, Any] = {
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
    if not ambient:
        checked["accessKeyId"] = _text(
            problems,
            credentials,
            "accessKeyId",
            True,
            AWS_ACCESS_KEY_ID,
            "16-128 uppercase letters and digits",
        )
        checked["secretAccessKey"] = _text(problems, credentials, "secretAccessKey", True)
        checked["sessionToken"] = _text(problems, credentials, "sessionToken", False)
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
    return _present(checked)


def _gcp(problems: Problems, credentials: Mapping[str, Any], ambient: bool) -> dict[str, Any]:
    if ambient:
        project = credentials.get("projectId")
        if not isinstance(project, str) or not GCP_PROJECT.fullmatch(project):
            problems.add(["projectId"], "projectId is required with ambient credentials")
        return {"projectId": project}
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
    elif not service_account["token_uri"].startswith("https://"):
        problems.add(["serviceAccountJson"], "serviceAccountJson token_uri must be an https URL")
    project = credentials.get("projectId", service_account.get("project_id"))
    if not isinstance(project, str) or not GCP_PROJECT.fullmatch(project):
        problems.add(
            ["projectId"], "projectId (or the key file's project_id) must be a GCP project id"
        )
    return {"serviceAccountJson": service_account, "projectId": project}


def _azure(problems: Problems, credentials: Mapping[str, Any], ambient: bool) -> dict[str, Any]:
    checked = {
        "tenantId": _text(problems, credentials, "tenantId", not ambient, UUID, "a UUID"),
        "subscriptionId": _text(problems, credentials, "subscriptionId", True, UUID, "a UUID"),
    }
    if not ambient:
        checked["clientId"] = _text(problems, credentials, "clientId", True, UUID, "a UUID")
        checked["clientSecret"] = _text(problems, credentials, "clientSecret", True)
    return _present(checked)


PROVIDERS: dict[str, Provider] = {
    "AWS": Provider(
        name="AWS",
        config_required=("region",),
        config_allowed=frozenset({"clusterName", "region"}),
        credential_fields=frozenset(
            {"accessKeyId", "secretAccessKey", "sessionToken", "roleArn", "externalId", "regions"}
        ),
        ambient_fields=frozenset({"roleArn", "externalId", "regions"}),
        check_credentials=_aws,
        region_pattern=AWS_REGION,
        region_example="an AWS region such as us-east-1",
        identity=lambda account, c: f"AWS/{account}/{c['region']}/{c['clusterName']}",
    ),
    "GCP": Provider(
        name="GCP",
        config_required=("region", "projectId"),
        config_allowed=frozenset({"clusterName", "region", "projectId"}),
        account_scope=("projectId",),
        credential_fields=frozenset({"serviceAccountJson", "projectId"}),
        ambient_fields=frozenset({"projectId"}),
        check_credentials=_gcp,
        identity=lambda _, c: f"GCP/{c['projectId']}/{c['region']}/{c['clusterName']}",
    ),
    "AZURE": Provider(
        name="AZURE",
        config_required=("resourceGroup", "subscriptionId"),
        config_allowed=frozenset({"clusterName", "region", "resourceGroup", "subscriptionId"}),
        account_scope=("subscriptionId",),
        credential_fields=frozenset({"tenantId", "clientId", "clientSecret", "subscriptionId"}),
        ambient_fields=frozenset({"tenantId", "subscriptionId"}),
        check_credentials=_azure,
        grant_by_resource_group=True,
        identity=lambda _, c: (
            f"AZURE/{c['subscriptionId'].lower()}/{c['resourceGroup'].lower()}/{c['clusterName']}"
        ),
    ),
    "GENERIC": Provider(
        name="GENERIC",
        config_required=("server", "caCert"),
        config_allowed=frozenset({"clusterName", "region", "server", *GENERIC_SECRETS}),
    ),
}
CLOUD_PROVIDERS = tuple(name for name, provider in PROVIDERS.items() if provider.cloud)


def provider(name: str) -> Provider:
    return PROVIDERS[name]


def is_ambient(credentials: Mapping[str, Any]) -> bool:
    return credentials.get(AMBIENT) is True


def check_credentials(provider_name: str, credentials: Any, problems: Problems) -> dict[str, Any]:
    """The credentials in canonical form, or problems naming each field at fault."""
    at = Problems(*problems.root, "credentials")
    found = PROVIDERS.get(provider_name)
    if found is None or found.check_credentials is None:
        problems.add(
            ["provider"],
            f"provider must be {', '.join(CLOUD_PROVIDERS)}; GENERIC spaces need no cloud account",
        )
        return {}
    if not isinstance(credentials, dict):
        at.add(
            [], f"credentials must be an object with {', '.join(sorted(found.credential_fields))}"
        )
        problems.errors.extend(at.errors)
        return {}
    if _larger_than(credentials, MAX_TEXT_BYTES):
        # The object form of a key file is capped like its string form, before anything
        # (a field check per key, the SDK, sealing) pays for its size.
        at.add([], f"credentials must be at most {MAX_TEXT_BYTES // 1024} KiB")
        problems.errors.extend(at.errors)
        return {}
    ambient = credentials.get(AMBIENT, False)
    if not isinstance(ambient, bool):
        at.add([AMBIENT], "ambient must be true or false")
        ambient = False
    allowed = found.ambient_fields if ambient else found.credential_fields
    for unknown in sorted(set(credentials) - allowed - {AMBIENT}):
        why = " with ambient credentials" if ambient else ""
        at.add([unknown], f"{unknown} is not a credential field of {found.name}{why}")
    checked = found.check_credentials(at, credentials, ambient)
    if ambient:
        checked[AMBIENT] = True
    problems.errors.extend(at.errors)
    return checked


def _larger_than(value: Any, limit: int) -> bool:
    """Whether a JSON value takes more than `limit` bytes written out (about: keys, strings
    in UTF-8, punctuation); stops counting as soon as it does."""
    left = limit
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            left -= len(item.encode("utf-8", "replace")) + 2
        elif isinstance(item, dict):
            left -= 2
            for key, inner in item.items():
                left -= len(str(key).encode("utf-8", "replace")) + 4
                if left < 0:
                    return True
                pending.append(inner)
        elif isinstance(item, list):
            left -= 2 + len(item)
            pending.extend(item[: max(left, 0)])
        else:
            left -= 8
        if left < 0:
            return True
    return False


def account_scope(provider_name: str, credentials: Mapping[str, Any]) -> dict[str, str]:
    """The non-secret scope of an account that a space's config must agree with."""
    return {
        field: credentials[field]
        for field in PROVIDERS[provider_name].account_scope
        if credentials.get(field)
    }
