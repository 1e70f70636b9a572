"""Creation helpers shared by the end-to-end tests.

Each helper makes one thing through the public GraphQL API (a cloud account, a
cluster grant, a registered space, an environment) and fails the test loudly
if the server answers with userErrors, so tests about something else can set
the scene in one line. The GraphQL documents are exported too, for tests that
want to look at the userErrors themselves.
"""

from __future__ import annotations

import functools
import secrets
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sim import clouds
from sim.pki import CertificateAuthority
from tests.support.graphql import GraphQL

AZURE_SUBSCRIPTION = clouds.AZURE_SUBSCRIPTION
GCP_PROJECT = clouds.GCP_PROJECT
# Loopback is allowed for GENERIC spaces (kind, k3s); nothing listens here unless a test starts it.
GENERIC_SERVER = "https://127.0.0.1:6443"
DEFAULT_REGION = "us-east-1"

USER_ERRORS = "userErrors { field message code }"
CLOUD_ACCOUNT_FIELDS = "id name provider createdAt"
SPACE_FIELDS = """
  id name provider spaceType synthetic held status createdAt deregisteredAt
  cloudAccount { id }
  config { clusterName region projectId resourceGroup subscriptionId server }
"""
ENVIRONMENT_FIELDS = "id name namespace gate space { id deregisteredAt }"

CREATE_CLOUD_ACCOUNT = f"""
mutation($input: CreateCloudAccountInput!) {{
  createCloudAccount(input: $input) {{ cloudAccount {{ {CLOUD_ACCOUNT_FIELDS} }} {USER_ERRORS} }}
}}"""
ROTATE_CLOUD_ACCOUNT_CREDENTIALS = f"""
mutation($input: RotateCloudAccountCredentialsInput!) {{
  rotateCloudAccountCredentials(input: $input) {{
    cloudAccount {{ {CLOUD_ACCOUNT_FIELDS} }} {USER_ERRORS}
  }}
}}"""
DELETE_CLOUD_ACCOUNT = f"""
mutation($input: DeleteCloudAccountInput!) {{
  deleteCloudAccount(input: $input) {{ deletedId {USER_ERRORS} }}
}}"""
GRANT_CLUSTER_ACCESS = f"""
mutation($input: ClusterAccessInput!) {{
  grantClusterAccess(input: $input) {{
    clusterAccess {{ region clusterName resourceGroup grantedAt }} {USER_ERRORS}
  }}
}}"""
REVOKE_CLUSTER_ACCESS = f"""
mutation($input: ClusterAccessInput!) {{
  revokeClusterAccess(input: $input) {{
    clusterAccess {{ region clusterName resourceGroup grantedAt }} {USER_ERRORS}
  }}
}}"""
REGISTER_SPACE = f"""
mutation($input: RegisterSpaceInput!) {{
  registerSpace(input: $input) {{ space {{ {SPACE_FIELDS} }} {USER_ERRORS} }}
}}"""
SET_SPACE_STATUS = f"""
mutation($input: SetSpaceStatusInput!) {{
  setSpaceStatus(input: $input) {{ space {{ {SPACE_FIELDS} }} {USER_ERRORS} }}
}}"""
DEREGISTER_SPACE = f"""
mutation($input: DeregisterSpaceInput!) {{
  deregisterSpace(input: $input) {{ space {{ {SPACE_FIELDS} }} {USER_ERRORS} }}
}}"""
CREATE_ENVIRONMENT = f"""
mutation($input: CreateEnvironmentInput!) {{
  createEnvironment(input: $input) {{ environment {{ {ENVIRONMENT_FIELDS} }} {USER_ERRORS} }}
}}"""
BIND_ENVIRONMENT = f"""
mutation($input: BindEnvironmentInput!) {{
  bindEnvironment(input: $input) {{ environment {{ {ENVIRONMENT_FIELDS} }} {USER_ERRORS} }}
}}"""


def unique(prefix: str) -> str:
    """A name no other test in the same org or server will pick."""
    return f"{prefix}-{secrets.token_hex(3)}"


@functools.cache
def ca_pem() -> str:
    """A real PEM CA for GENERIC spaces that no test needs to reach."""
    return CertificateAuthority("factories-ca").pem


def gcp_service_account(project_id: str = GCP_PROJECT) -> dict[str, str]:
    """A service-account key file with the fields google-auth needs (the key is real PEM)."""
    key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return {
        "type": "service_account",
        "project_id": project_id,
        "private_key_id": secrets.token_hex(20),
        "private_key": key.decode(),
        "client_email": f"spacedock@{project_id}.iam.gserviceaccount.com",
        "client_id": "100000000000000000001",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


def azure_credentials(subscription_id: str = AZURE_SUBSCRIPTION) -> dict[str, str]:
    return {
        "tenantId": "00000000-0000-4000-8000-00000000000a",
        "clientId": "00000000-0000-4000-8000-00000000000b",
        "clientSecret": "azure-test-secret",
        "subscriptionId": subscription_id,
    }


def __getattr__(name: str) -> Any:
    """`AWS_CREDENTIALS`: the session's moto keys, which the EKS stand-in accepts (read
    while the `clouds` fixture runs)."""
    if name == "AWS_CREDENTIALS":
        return credentials_for("AWS")
    raise AttributeError(name)


def credentials_for(provider: str) -> dict[str, Any]:
    """Credentials the session's cloud stand-ins accept."""
    return clouds.active().credentials(provider)


def succeeded(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload of a mutation that must not have returned userErrors."""
    assert payload["userErrors"] == [], payload["userErrors"]
    return payload


async def create_cloud_account(
    client: GraphQL,
    provider: str = "AWS",
    *,
    name: str | None = None,
    credentials: dict[str, Any] | None = None,
) -> dict[str, Any]:
    payload = await client.mutate(
        CREATE_CLOUD_ACCOUNT,
        {
            "input": {
                "name": name or unique(provider.lower()),
                "provider": provider,
                "credentials": credentials
                if credentials is not None
                else credentials_for(provider),
            }
        },
    )
    account: dict[str, Any] = succeeded(payload)["cloudAccount"]
    return account


async def grant_cluster_access(
    client: GraphQL,
    account_id: str,
    cluster_name: str,
    region: str = DEFAULT_REGION,
    resource_group: str | None = None,
) -> dict[str, Any]:
    """Grants access to a cluster, making it on the account's cloud stand-in first."""
    account = await client.data(
        "query($id: ID!) { cloudAccount(id: $id) { provider } }", {"id": account_id}
    )
    provider = account["cloudAccount"]["provider"]
    clouds.active().add_cluster(provider, cluster_name, region, resource_group)
    access_input: dict[str, Any] = {
        "cloudAccountId": account_id,
        "region": region,
        "clusterName": cluster_name,
    }
    if resource_group is not None:
        access_input["resourceGroup"] = resource_group
    payload = await client.mutate(GRANT_CLUSTER_ACCESS, {"input": access_input})
    access: dict[str, Any] = succeeded(payload)["clusterAccess"]
    return access


def cloud_config(provider: str, cluster_name: str, region: str = DEFAULT_REGION) -> dict[str, Any]:
    """A valid SpaceConfigInput for a cloud provider's cluster."""
    if provider == "AWS":
        return {"clusterName": cluster_name, "region": region}
    if provider == "GCP":
        return {"clusterName": cluster_name, "region": region, "projectId": GCP_PROJECT}
    return {
        "clusterName": cluster_name,
        "region": region,
        "resourceGroup": clouds.AZURE_RESOURCE_GROUP,
        "subscriptionId": AZURE_SUBSCRIPTION,
    }


async def register_cloud_space(
    admin: GraphQL,
    provider: str = "AWS",
    *,
    registrar: GraphQL | None = None,
    account_id: str | None = None,
    name: str | None = None,
    cluster_name: str | None = None,
    region: str = DEFAULT_REGION,
    synthetic: bool = False,
) -> dict[str, Any]:
    """Registers a cloud cluster, making the account (if none is given) and the grant it needs.

    `admin` makes the account and grant (an ADMIN-only policy); `registrar`, when given,
    registers the space, so a test can register as an editor.
    """
    if account_id is None:
        account_id = (await create_cloud_account(admin, provider))["id"]
    cluster_name = cluster_name or unique("cluster")
    config = cloud_config(provider, cluster_name, region)
    resource_group = config.get("resourceGroup")
    await grant_cluster_access(admin, account_id, cluster_name, region, resource_group)
    payload = await (registrar or admin).mutate(
        REGISTER_SPACE,
        {
            "input": {
                "name": name or unique("space"),
                "provider": provider,
                "cloudAccountId": account_id,
                "config": config,
                "synthetic": synthetic,
            }
        },
    )
    space: dict[str, Any] = succeeded(payload)["space"]
    return space


def generic_config(
    server: str | None = None, ca: str | None = None, token: str = "generic-test-token"
) -> dict[str, Any]:
    """A valid GENERIC SpaceConfigInput; the default server is unique per call."""
    return {
        "clusterName": unique("generic"),
        "server": server or f"{GENERIC_SERVER}/{unique('c')}",
        "caCert": ca or ca_pem(),
        "serviceAccountToken": token,
    }


async def register_generic_space(
    client: GraphQL,
    *,
    name: str | None = None,
    server: str | None = None,
    ca: str | None = None,
    token: str = "generic-test-token",
    synthetic: bool = False,
) -> dict[str, Any]:
    payload = await client.mutate(
        REGISTER_SPACE,
        {
            "input": {
                "name": name or unique("space"),
                "provider": "GENERIC",
                "config": generic_config(server, ca, token),
                "synthetic": synthetic,
            }
        },
    )
    space: dict[str, Any] = succeeded(payload)["space"]
    return space


async def deregister_space(client: GraphQL, space_id: str) -> dict[str, Any]:
    payload = await client.mutate(DEREGISTER_SPACE, {"input": {"id": space_id}})
    space: dict[str, Any] = succeeded(payload)["space"]
    return space


async def set_space_status(client: GraphQL, space_id: str, status: str) -> dict[str, Any]:
    payload = await client.mutate(SET_SPACE_STATUS, {"input": {"id": space_id, "status": status}})
    space: dict[str, Any] = succeeded(payload)["space"]
    return space


async def create_environment(
    client: GraphQL, space_id: str, *, name: str | None = None, namespace: str = "default"
) -> dict[str, Any]:
    payload = await client.mutate(
        CREATE_ENVIRONMENT,
        {"input": {"name": name or unique("env"), "spaceId": space_id, "namespace": namespace}},
    )
    environment: dict[str, Any] = succeeded(payload)["environment"]
    return environment


async def register_on_standin(client: GraphQL, standin: Any, **config: str) -> dict[str, Any]:
    """A GENERIC space on a KubeStandIn (a distinct server path each time, so one stand-in
    plays many clusters), by its token unless config gives a client certificate."""
    given = {
        "clusterName": unique("standin"),
        "server": f"{standin.url}/{unique('c')}",
        "caCert": standin.ca_pem,
        **config,
    }
    if "clientCertificate" not in given:
        given.setdefault("serviceAccountToken", standin.token)
    payload = await client.mutate(
        REGISTER_SPACE,
        {"input": {"name": unique("space"), "provider": "GENERIC", "config": given}},
    )
    space: dict[str, Any] = succeeded(payload)["space"]
    return space


def error_fields(payload: dict[str, Any]) -> set[tuple[tuple[str, ...] | None, str]]:
    """The (field path, code) pairs of a payload's userErrors, for order-free comparison."""
    return {
        (None if e["field"] is None else tuple(e["field"]), e["code"])
        for e in payload["userErrors"]
    }


def top_level_codes(response: dict[str, Any]) -> list[str]:
    """extensions.code of each top-level error of a response."""
    return [error.get("extensions", {}).get("code") for error in response["errors"] or []]
