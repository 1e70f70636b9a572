"""An Azure stand-in: the Entra ID authority (client-credentials grant) and
Azure Resource Manager's AKS routes, on one local HTTPS server, checking what
Azure checks.

Use (see tests/test_standin_clouds.py):

    with AzureStandIn() as azure:
        principal = azure.service_principal()      # tenant, client id, secret, subscription
        azure.add_cluster(principal.subscription_id, "rg-1", "aks-1", kube.url, kube.ca_pem)
        kube.accept_tokens_when(azure.is_valid_aks_token)
    # spacedock server process: env=azure.env (AZURE_AUTHORITY_HOST and
    # SPACEDOCK_AZURE_RESOURCE_MANAGER_ENDPOINT = azure.url, plus trust)

- What azure-identity calls: its async `ClientSecretCredential` (azure-identity
  1.27; the async credential does not go through MSAL) makes exactly one request
  per token, `POST {authority}/{tenant}/oauth2/v2.0/token` with the form
  `client_id`, `client_secret`, `grant_type=client_credentials`, `scope`; no
  instance discovery and no OpenID configuration. (The sync credential runs
  MSAL, whose instance discovery goes to login.microsoftonline.com for an
  unknown authority host: do not use it against the stand-in.) The authority
  must be https (azure-identity refuses anything else).
- Token endpoint checks: the tenant exists (AADSTS90002), the client is an
  application of that tenant (AADSTS700016), the secret is the client's
  current secret (401 `invalid_client`, AADSTS7000215), the grant is
  client_credentials (AADSTS70003) and the scope is one resource's
  `/.default` (AADSTS1002012) for a known resource (AADSTS500011): AKS
  (`6dae42f8-4368-4678-94ff-3960e28e3630/.default`) or ARM
  (`https://management.azure.com/.default`,
  `https://management.core.windows.net/.default`, or `{azure.url}/.default`).
  It answers `token_type`, `expires_in` = `token_lifetime_s` (settable) and
  `access_token`.
- ARM (base URL `azure.url`), every call needing `?api-version=` and an
  unexpired bearer token issued for ARM in the subscription's tenant:
  `GET /subscriptions/{s}/providers/Microsoft.ContainerService/managedClusters`
  (`{"value": [...], "nextLink": url}`: `page_size` clusters a page, default
  100, with `nextLink` to the next page while there is one; each `id` spelled as AKS does,
  `/subscriptions/{s}/resourcegroups/{rg}/providers/Microsoft.ContainerService/managedClusters/{name}`,
  note the lower-case `resourcegroups`),
  `GET .../resourceGroups/{rg}/providers/Microsoft.ContainerService/managedClusters/{name}`,
  and `POST .../managedClusters/{name}/listClusterUserCredential`, which gives
  `{"kubeconfigs": [{"name": "clusterUser", "value": base64(kubeconfig)}]}`
  whose cluster has `server` (the Kubernetes stand-in URL) and
  `certificate-authority-data`, and whose user is kubelogin's exec entry, as
  for an Entra-enabled cluster. Errors are ARM's `{"error": {"code", "message"}}`.
- Switches: `throttle(times)` answers the next `times` ARM calls with 429
  `TooManyRequests` and `Retry-After: retry_after_s` (default: until
  `heal()`); `reject_secrets = True` answers AADSTS7000215 to every secret;
  `rotate_secret(principal)` gives a new secret and retires the old one.
- Trust: azure-core's aiohttp transport uses aiohttp's default SSL context,
  which aiohttp builds when it is imported, so `SSL_CERT_FILE=azure.ca_file`
  must be set before the process starts; in-process, pass
  `connection_verify=str(azure.ca_file)` to the credential.
"""

from __future__ import annotations

import base64
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import yaml
from aiohttp import web

from sim.https_standin import HttpsStandIn

AKS_SERVER_APP = "6dae42f8-4368-4678-94ff-3960e28e3630"
PUBLIC_ARM_RESOURCES = ("https://management.azure.com", "https://management.core.windows.net")
KUBELOGIN_CLIENT = "80faf920-1908-4b52-b5ef-a8e7bedfc67a"
MANAGED_CLUSTERS = "providers/Microsoft.ContainerService/managedClusters"


@dataclass(frozen=True)
class ServicePrincipal:
    tenant_id: str
    client_id: str
    client_secret: str = field(repr=False)
    subscription_id: str


@dataclass
class _Token:
    tenant_id: str
    resource: str
    expires_at: float


def entra_error(status: int, error: str, code: int, description: str) -> web.Response:
    body = {
        "error": error,
        "error_description": f"AADSTS{code}: {description}",
        "error_codes": [code],
        "timestamp": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
        "trace_id": str(uuid.uuid4()),
        "correlation_id": str(uuid.uuid4()),
    }
    return web.json_response(body, status=status)


def arm_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


class AzureStandIn(HttpsStandIn):
    name = "azure-standin"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.token_lifetime_s = 3599
        self.reject_secrets = False
        self.throttled_calls = 0
        self.retry_after_s = 1
        self.page_size = 100
        self._secrets: dict[tuple[str, str], str] = {}  # (tenant, client) -> secret
        self._subscriptions: dict[str, str] = {}  # subscription -> tenant
        self._tokens: dict[str, _Token] = {}
        self._clusters: dict[tuple[str, str, str], dict[str, Any]] = {}

    @property
    def env(self) -> dict[str, str]:
        """For a spacedock server process."""
        return {
            "AZURE_AUTHORITY_HOST": self.url,
            "SPACEDOCK_AZURE_RESOURCE_MANAGER_ENDPOINT": self.url,
            **self.trust_env,
        }

    # -- what tests set up ------------------------------------------------
    def service_principal(
        self, tenant_id: str | None = None, subscription_id: str | None = None
    ) -> ServicePrincipal:
        """An application with a secret in `tenant_id` (new when None), allowed to
        read `subscription_id` (new when None) of that tenant."""
        principal = ServicePrincipal(
            tenant_id=tenant_id or str(uuid.uuid4()),
            client_id=str(uuid.uuid4()),
            client_secret=f"sd8Q~{uuid.uuid4().hex}",
            subscription_id=subscription_id or str(uuid.uuid4()),
        )
        self._secrets[(principal.tenant_id, principal.client_id)] = principal.client_secret
        self._subscriptions[principal.subscription_id] = principal.tenant_id
        return principal

    def rotate_secret(self, principal: ServicePrincipal) -> ServicePrincipal:
        rotated = ServicePrincipal(
            principal.tenant_id,
            principal.client_id,
            f"sd8Q~{uuid.uuid4().hex}",
            principal.subscription_id,
        )
        self._secrets[(principal.tenant_id, principal.client_id)] = rotated.client_secret
        return rotated

    def add_cluster(
        self,
        subscription_id: str,
        resource_group: str,
        name: str,
        server_url: str,
        ca_pem: str,
        location: str = "westeurope",
        version: str = "1.31.2",
    ) -> None:
        """An Entra-enabled AKS cluster whose API server is `server_url`."""
        tenant_id = self._subscriptions[subscription_id]
        cluster_id = (
            f"/subscriptions/{subscription_id}/resourcegroups/{resource_group}/"
            f"{MANAGED_CLUSTERS}/{name}"
        )
        self._clusters[(subscription_id, resource_group.lower(), name)] = {
            "id": cluster_id,
            "location": location,
            "name": name,
            "type": "Microsoft.ContainerService/ManagedClusters",
            "properties": {
                "provisioningState": "Succeeded",
                "powerState": {"code": "Running"},
                "kubernetesVersion": version,
                "currentKubernetesVersion": version,
                "dnsPrefix": name,
                "fqdn": "127.0.0.1",
                "aadProfile": {"managed": True, "enableAzureRBAC": True, "tenantID": tenant_id},
                "disableLocalAccounts": True,
            },
            "_server": server_url.rstrip("/"),
            "_ca_pem": ca_pem,
        }

    def remove_cluster(self, subscription_id: str, resource_group: str, name: str) -> None:
        del self._clusters[(subscription_id, resource_group.lower(), name)]

    def throttle(self, times: int = sys.maxsize) -> None:
        self.throttled_calls = times

    def heal(self) -> None:
        self.throttled_calls = 0
        self.reject_secrets = False

    def is_valid_aks_token(self, token: str) -> bool:
        """For the Kubernetes stand-in: an unexpired token this authority issued for AKS."""
        issued = self._tokens.get(token)
        return (
            issued is not None
            and issued.resource == AKS_SERVER_APP
            and issued.expires_at > time.time()
        )

    # -- Entra ID -----------------------------------------------------------
    def routes(self) -> list[web.RouteDef]:
        subscription = "/subscriptions/{subscription}"
        routes = [
            web.post("/{tenant}/oauth2/v2.0/token", self._token),
            web.get(f"{subscription}/{MANAGED_CLUSTERS}", self._list),
        ]
        # ARM paths are case-insensitive; clients often reuse a listed id verbatim.
        for groups in ("resourceGroups", "resourcegroups"):
            cluster = f"{subscription}/{groups}/{{group}}/{MANAGED_CLUSTERS}/{{name}}"
            routes.append(web.get(cluster, self._get))
            routes.append(web.post(f"{cluster}/listClusterUserCredential", self._user_credential))
        return routes

    def _resources(self) -> tuple[str, ...]:
        return (AKS_SERVER_APP, *PUBLIC_ARM_RESOURCES, self.url)

    async def _token(self, request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        form = await request.post()
        client_id, secret = str(form.get("client_id", "")), str(form.get("client_secret", ""))
        scope = str(form.get("scope", ""))
        if tenant not in self._subscriptions.values():
            return entra_error(
                400,
                "invalid_request",
                90002,
                f"Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID "
                "and are signing into the correct cloud.",
            )
        if form.get("grant_type") != "client_credentials":
            return entra_error(
                400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type."
            )
        if (tenant, client_id) not in self._secrets:
            return entra_error(
                400,
                "unauthorized_client",
                700016,
                f"Application with identifier '{client_id}' was not found in the directory "
                f"'{tenant}'.",
            )
        if self.reject_secrets or secret != self._secrets[(tenant, client_id)]:
            return entra_error(
                401,
                "invalid_client",
                7000215,
                "Invalid client secret provided. Ensure the secret being sent in the request is "
                f"the client secret value, not the client secret ID, for a secret added to app "
                f"'{client_id}'.",
            )
        if len(scope.split()) != 1 or not scope.endswith("/.default"):
            return entra_error(
                400,
                "invalid_scope",
                1002012,
                f"The provided value for scope {scope} is not valid. Client credential flows "
                "must have a scope value with /.default suffixed to the resource identifier.",
            )
        resource = scope.removesuffix("/.default").rstrip("/")
        if resource not in self._resources():
            return entra_error(
                400,
                "invalid_resource",
                500011,
                f"The resource principal named {resource} was not found in the tenant named "
                f"{tenant}.",
            )
        token = f"standin-entra-{uuid.uuid4().hex}{uuid.uuid4().hex}"
        arm = resource != AKS_SERVER_APP
        self._tokens[token] = _Token(
            tenant, "arm" if arm else resource, time.time() + self.token_lifetime_s
        )
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": self.token_lifetime_s,
                "ext_expires_in": self.token_lifetime_s,
                "access_token": token,
            }
        )

    # -- ARM ----------------------------------------------------------------
    def _refusal(self, request: web.Request) -> web.Response | None:
        """ARM's answer when the call may not go on, else None."""
        if "api-version" not in request.query:
            return arm_error(
                400,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            )
        header = request.headers.get("Authorization", "")
        issued = self._tokens.get(header[7:]) if header.startswith("Bearer ") else None
        if issued is None:
            return arm_error(401, "InvalidAuthenticationToken", "The access token is invalid.")
        if issued.expires_at <= time.time():
            return arm_error(
                401,
                "ExpiredAuthenticationToken",
                "The access token expiry UTC time is earlier than current UTC time.",
            )
        if issued.resource != "arm":
            return arm_error(
                401,
                "InvalidAuthenticationTokenAudience",
                "The access token has been obtained for wrong audience or resource.",
            )
        if self.throttled_calls > 0:
            self.throttled_calls -= 1
            response = arm_error(
                429,
                "TooManyRequests",
                "The request is being throttled as the limit has been reached for operation type "
                "- Read_ObservationWindow_00:05:00.",
            )
            response.headers["Retry-After"] = str(self.retry_after_s)
            return response
        subscription = request.match_info["subscription"]
        if subscription not in self._subscriptions:
            return arm_error(
                404,
                "SubscriptionNotFound",
                f"The subscription '{subscription}' could not be found.",
            )
        if self._subscriptions[subscription] != issued.tenant_id:
            return arm_error(
                401,
                "InvalidAuthenticationTokenTenant",
                f"The access token is from the wrong issuer. It must match the tenant associated "
                f"with subscription '{subscription}'.",
            )
        return None

    def _cluster(self, request: web.Request) -> dict[str, Any] | web.Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        group, name = request.match_info["group"], request.match_info["name"]
        key = (request.match_info["subscription"], group.lower(), name)
        if key not in self._clusters:
            return arm_error(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.ContainerService/managedClusters/{name}' under resource "
                f"group '{group}' was not found.",
            )
        return self._clusters[key]

    @staticmethod
    def _public(cluster: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in cluster.items() if not k.startswith("_")}

    async def _list(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        subscription = request.match_info["subscription"]
        listed = [
            self._public(cluster)
            for (s, _, _), cluster in sorted(self._clusters.items())
            if s == subscription
        ]
        start = int(request.query.get("$skipToken", "0"))
        page: dict[str, Any] = {"value": listed[start : start + self.page_size]}
        if start + self.page_size < len(listed):
            query = urlencode(
                {"api-version": request.query["api-version"], "$skipToken": start + self.page_size}
            )
            page["nextLink"] = f"{self.url}{request.path}?{query}"
        return web.json_response(page)

    async def _get(self, request: web.Request) -> web.Response:
        cluster = self._cluster(request)
        if isinstance(cluster, web.Response):
            return cluster
        return web.json_response(self._public(cluster))

    async def _user_credential(self, request: web.Request) -> web.Response:
        cluster = self._cluster(request)
        if isinstance(cluster, web.Response):
            return cluster
        name, tenant = cluster["name"], cluster["properties"]["aadProfile"]["tenantID"]
        user = f"clusterUser_{request.match_info['group']}_{name}"
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {
                        "server": cluster["_server"],
                        "certificate-authority-data": base64.b64encode(
                            cluster["_ca_pem"].encode()
                        ).decode(),
                    },
                }
            ],
            "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
            "current-context": name,
            "preferences": {},
            "users": [
                {
                    "name": user,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "kubelogin",
                            "args": [
                                "get-token",
                                "--environment",
                                "AzurePublicCloud",
                                "--server-id",
                                AKS_SERVER_APP,
                                "--client-id",
                                KUBELOGIN_CLIENT,
                                "--tenant-id",
                                tenant,
                                "--login",
                                "devicecode",
                            ],
                            "provideClusterInfo": False,
                        }
                    },
                }
            ],
        }
        value = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
        return web.json_response({"kubeconfigs": [{"name": "clusterUser", "value": value}]})
