"""Azure: AKS discovery on Azure Resource Manager with tokens from azure-identity.

An account is a service principal (tenant, client id, client secret) and a
subscription, or, for the platform's own org, `DefaultAzureCredential`
("ambient"). ARM lists the subscription's managed clusters; an Entra-enabled
cluster's server and CA come from `listClusterUserCredential`, and its bearer
token is an app token for the AKS server application. The authority comes
from `AZURE_AUTHORITY_HOST` (azure-identity reads it) and ARM's base URL from
`SPACEDOCK_AZURE_RESOURCE_MANAGER_ENDPOINT`. ARM calls go through the outbound
gate; azure-identity connects by itself, but only to the operator's authority (a
tenant id is a UUID, so it cannot name another host).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import yaml
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError
from azure.identity.aio import ClientSecretCredential, DefaultAzureCredential

from providers.clouds import (
    CloudAnswer,
    CloudCluster,
    ClusterLocation,
    cloud_json,
    refused,
    retry_throttled,
    scrub,
    secret_values,
)
from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError, TemporaryError
from providers.network import IPNetwork

AKS_SCOPE = "6dae42f8-4368-4678-94ff-3960e28e3630/.default"
DEFAULT_ARM = "https://management.azure.com"
API_VERSION = "2024-05-01"
MANAGED_CLUSTERS = "providers/Microsoft.ContainerService/managedClusters"
RESOURCE_GROUP = re.compile(r"/resourcegroups/([^/]+)/", re.IGNORECASE)
MAX_PAGES = 50


def arm_endpoint() -> str:
    return (os.environ.get("SPACEDOCK_AZURE_RESOURCE_MANAGER_ENDPOINT") or DEFAULT_ARM).rstrip("/")


async def _token(credentials: Mapping[str, Any], scope: str) -> AccessToken:
    """A token for `scope`; our errors, with what Entra said, when there is none."""
    try:
        if credentials.get("ambient"):
            async with DefaultAzureCredential() as ambient:
                return await ambient.get_token(scope)
        async with ClientSecretCredential(
            credentials["tenantId"], credentials["clientId"], credentials["clientSecret"]
        ) as principal:
            return await principal.get_token(scope)
    except ClientAuthenticationError as error:
        said = scrub(str(error.message or "refused"), secret_values(credentials))
        raise PermanentError(f"Entra ID refused the token request: {said}") from error
    except ServiceRequestError as error:
        raise TemporaryError(
            "connection failed: the Entra ID authority cannot be reached"
        ) from error
    except ValueError as error:  # e.g. an authority that is not https
        raise PermanentError(f"the Entra ID authority cannot be used: {error}") from error


async def _arm(
    deny: tuple[IPNetwork, ...],
    credentials: Mapping[str, Any],
    method: str,
    path_or_url: str,
    doing: str,
) -> CloudAnswer | None:
    """One ARM call with a fresh ARM token, throttling retried; None on 404."""
    secrets = secret_values(credentials)
    url = path_or_url if path_or_url.startswith("https://") else f"{arm_endpoint()}{path_or_url}"
    if not url.startswith(arm_endpoint() + "/"):
        raise PermanentError(f"{doing} failed: ARM pointed outside {arm_endpoint()}")

    async def call() -> CloudAnswer:
        token = await _token(credentials, f"{arm_endpoint()}/.default")
        return await cloud_json(deny, method, url, token.token, doing, secrets)

    answer = await retry_throttled(call, doing)
    if answer.status == 404:
        return None
    if answer.status != 200:
        error = answer.body.get("error")
        message = ""
        if isinstance(error, dict):
            message = f"{error.get('code', '')}: {error.get('message', '')}".strip(": ")
        raise refused(answer, doing, message, secrets)
    return answer


def _cluster(found: Mapping[str, Any]) -> CloudCluster:
    properties = found.get("properties") or {}
    group = RESOURCE_GROUP.search(str(found.get("id", "")))
    fqdn = properties.get("fqdn")
    return CloudCluster(
        name=str(found["name"]),
        region=str(found.get("location", "")),
        endpoint=f"https://{fqdn}" if fqdn else None,
        version=properties.get("currentKubernetesVersion") or properties.get("kubernetesVersion"),
        resource_group=group.group(1) if group else None,
    )


def _cluster_path(credentials: Mapping[str, Any], location: ClusterLocation) -> str:
    return (
        f"/subscriptions/{credentials['subscriptionId']}/resourceGroups/"
        f"{location.resource_group}/{MANAGED_CLUSTERS}/{location.name}"
    )


class AzureAdapter:
    def __init__(self, deny: tuple[IPNetwork, ...]) -> None:
        self._deny = deny

    async def verify(self, credentials: Mapping[str, Any]) -> None:
        # A token says Entra knows the principal; listing says it may read the subscription.
        await self.clusters(credentials, None)

    async def clusters(
        self, credentials: Mapping[str, Any], region: str | None
    ) -> list[CloudCluster]:
        subscription = credentials["subscriptionId"]
        doing = f"listing AKS clusters of subscription {subscription}"
        url = f"/subscriptions/{subscription}/{MANAGED_CLUSTERS}?api-version={API_VERSION}"
        found: list[CloudCluster] = []
        for _page in range(MAX_PAGES):
            answer = await _arm(self._deny, credentials, "GET", url, doing)
            if answer is None:
                break
            found += [_cluster(item) for item in answer.body.get("value") or []]
            next_link = answer.body.get("nextLink")
            if not next_link:
                break
            url = str(next_link)
        listed = [c for c in found if region is None or c.region == region]
        return sorted(listed, key=lambda c: (c.region, c.resource_group or "", c.name))

    async def describe(
        self, credentials: Mapping[str, Any], location: ClusterLocation
    ) -> CloudCluster | None:
        answer = await _arm(
            self._deny,
            credentials,
            "GET",
            f"{_cluster_path(credentials, location)}?api-version={API_VERSION}",
            f"describing AKS cluster {location.name} in {location.resource_group}",
        )
        return None if answer is None else _cluster(answer.body)

    async def mint(
        self, credentials: Mapping[str, Any], location: ClusterLocation
    ) -> ClusterCredentials:
        doing = f"reading the user kubeconfig of AKS cluster {location.name}"
        answer = await _arm(
            self._deny,
            credentials,
            "POST",
            f"{_cluster_path(credentials, location)}/listClusterUserCredential"
            f"?api-version={API_VERSION}",
            doing,
        )
        if answer is None:
            raise PermanentError(
                f"no AKS cluster {location.name} in {location.resource_group} on this "
                "subscription; was it deleted?"
            )
        server, ca_pem = _server_and_ca(answer.body, doing)
        token = await _token(credentials, AKS_SCOPE)
        return ClusterCredentials(
            server=server,
            ca_pem=ca_pem,
            token=token.token,
            expires_at=datetime.fromtimestamp(token.expires_on, UTC),
        )


def _server_and_ca(body: Mapping[str, Any], doing: str) -> tuple[str, str]:
    """The API server URL and CA of the first kubeconfig ARM gave."""
    try:
        encoded = body["kubeconfigs"][0]["value"]
        kubeconfig = yaml.safe_load(base64.b64decode(encoded))
        cluster = kubeconfig["clusters"][0]["cluster"]
        server = str(cluster["server"]).rstrip("/")
        ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
    except (KeyError, IndexError, TypeError, ValueError, yaml.YAMLError) as error:
        raise PermanentError(f"{doing} failed: ARM's kubeconfig has no server and CA") from error
    if not server.startswith("https://"):
        raise PermanentError(f"{doing} failed: the cluster's server is not an https URL")
    return server, ca_pem
