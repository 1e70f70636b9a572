"""The role/policy matrix: every mutation, as VIEWER, EDITOR, ADMIN and a custom role.

The design's "Roles and policies" table is the specification, restated here
as ROLE_POLICIES so that a drift in `core.rbac` fails a test. A mutation the
caller's role lacks the policy for answers one FORBIDDEN userError and leaves
the org exactly as it was; with the policy it succeeds and changes something.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from graphql import build_schema

from tests.conftest import Org
from tests.support import clouds
from tests.support import factories as make
from tests.support.graphql import GraphQL
from tests.support.kube_standin import KubeStandIn

VIEW = {"space:view", "namespace:view", "environment:view", "cloudspace:view", "cloudaccount:view"}
EDIT = VIEW | {
    "space:create",
    "space:update",
    "namespace:create",
    "environment:create",
    "environment:update",
    "cloudspace:create",
    "cloudspace:update",
    "cloudspace:kubeconfig",
}
ADMINISTER = EDIT | {
    "space:delete",
    "cloudaccount:create",
    "cloudaccount:update",
    "cloudaccount:delete",
    "cloudspace:delete",
    "role:manage",
    "token:manage",
    "audit:view",
}
# An org's own role: custom roles need explicit grants, and get exactly those.
CUSTOM = {"space:view", "cloudaccount:view", "space:create", "environment:create", "token:manage"}
ROLE_POLICIES = {"viewer": VIEW, "editor": EDIT, "admin": ADMINISTER, "custom": CUSTOM}
ROLES = tuple(ROLE_POLICIES)

CREATE_CUSTOM_ROLE = f"""
mutation($input: CreateRoleInput!) {{
  createRole(input: $input) {{ role {{ id }} {make.USER_ERRORS} }}
}}"""
CREATE_API_TOKEN = f"""
mutation($input: CreateApiTokenInput!) {{
  createApiToken(input: $input) {{ token apiToken {{ id revokedAt }} {make.USER_ERRORS} }}
}}"""


async def caller_as(org: Org, role: str) -> GraphQL:
    """The org's caller with that role; "custom" is a token of a new custom role."""
    if role != "custom":
        return org.as_role(role)
    variables = {"name": make.unique("custom"), "policies": sorted(CUSTOM)}
    made = make.succeeded(await org.admin.mutate(CREATE_CUSTOM_ROLE, {"input": variables}))
    token = make.succeeded(
        await org.admin.mutate(
            CREATE_API_TOKEN, {"input": {"name": "custom", "role": made["role"]["id"]}}
        )
    )["token"]
    return GraphQL(org.admin.url, org.admin.ws_url, token)


SDL = (Path(__file__).resolve().parents[1] / "schema.graphql").read_text()
HAS_CREATE_NAMESPACE = "createNamespace(" in SDL

CREATE_NAMESPACE = f"""
mutation($input: CreateNamespaceInput!) {{
  createNamespace(input: $input) {{ namespace {{ name managed }} {make.USER_ERRORS} }}
}}"""

# Everything a mutation could change, read back by the org's admin.
ORG_STATE = """
{
  cloudAccounts(first: 100) {
    nodes { id name provider clusterAccess { region clusterName resourceGroup } }
  }
  spaces(first: 100, filter: {includeDeregistered: true}) {
    nodes { id name held deregisteredAt cloudAccount { id } environments { id } }
  }
  environments(first: 100) { nodes { id name namespace space { id } } }
  roles { id policies }
  apiTokens(first: 100, includeRevoked: true) { nodes { id revokedAt } }
}
"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # No background probe writes between the before and after snapshots.
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


async def org_state(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    state = await org.admin.data(ORG_STATE)
    state["clusterNamespaces"] = sorted(cluster.namespaces)
    # What each AWS account sees on its cloud: rotated credentials may see other clusters.
    for account in state["cloudAccounts"]["nodes"]:
        if account["provider"] == "AWS":
            seen = await org.admin.data(
                'query($id: ID!) { cloudAccount(id: $id) { clusters(region: "us-east-1") '
                "{ name } } }",
                {"id": account["id"]},
            )
            account["clusters"] = seen["cloudAccount"]["clusters"]
    return state


Prepare = Callable[[Org, KubeStandIn], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Case:
    """One mutation, the policy it needs, and how to make a valid input for it."""

    mutation: str
    policy: str
    prepare: Prepare

    @property
    def document(self) -> str:
        return DOCUMENTS[self.mutation][0]

    @property
    def result(self) -> str:
        """The payload field that holds the changed object."""
        return DOCUMENTS[self.mutation][1]


DOCUMENTS = {
    "createCloudAccount": (make.CREATE_CLOUD_ACCOUNT, "cloudAccount"),
    "deleteCloudAccount": (make.DELETE_CLOUD_ACCOUNT, "deletedId"),
    "rotateCloudAccountCredentials": (make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS, "cloudAccount"),
    "grantClusterAccess": (make.GRANT_CLUSTER_ACCESS, "clusterAccess"),
    "revokeClusterAccess": (make.REVOKE_CLUSTER_ACCESS, "clusterAccess"),
    "registerSpace": (make.REGISTER_SPACE, "space"),
    "setSpaceStatus": (make.SET_SPACE_STATUS, "space"),
    "deregisterSpace": (make.DEREGISTER_SPACE, "space"),
    "createEnvironment": (make.CREATE_ENVIRONMENT, "environment"),
    "bindEnvironment": (make.BIND_ENVIRONMENT, "environment"),
    "createNamespace": (CREATE_NAMESPACE, "namespace"),
    "createRole": (CREATE_CUSTOM_ROLE, "role"),
    "updateRole": (
        f"mutation($input: UpdateRoleInput!) {{ updateRole(input: $input) {{ role {{ id }} {make.USER_ERRORS} }} }}",
        "role",
    ),
    "deleteRole": (
        f"mutation($input: DeleteRoleInput!) {{ deleteRole(input: $input) {{ deletedId {make.USER_ERRORS} }} }}",
        "deletedId",
    ),
    "createApiToken": (CREATE_API_TOKEN, "apiToken"),
    "revokeApiToken": (
        f"mutation($input: RevokeApiTokenInput!) {{ revokeApiToken(input: $input) {{ apiToken {{ id }} {make.USER_ERRORS} }} }}",
        "apiToken",
    ),
}


async def _new_account(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {
        "name": make.unique("acct"),
        "provider": "AWS",
        "credentials": make.credentials_for("AWS"),
    }


async def _account(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"id": (await make.create_cloud_account(org.admin))["id"]}


async def _ungranted_cluster(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    account = await make.create_cloud_account(org.admin)
    clouds.active().add_cluster("AWS", "prod", "us-east-1")
    return {"cloudAccountId": account["id"], "region": "us-east-1", "clusterName": "prod"}


async def _granted_cluster(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    access = await _ungranted_cluster(org, cluster)
    await make.grant_cluster_access(org.admin, access["cloudAccountId"], access["clusterName"])
    return access


async def _account_to_rotate(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    """An account, and new credentials: a role in another AWS account, which sees a cluster
    the old credentials do not."""
    account = await make.create_cloud_account(org.admin)
    other_account = "210987654321"
    standins = clouds.active()
    standins.add_eks_cluster(make.unique("elsewhere"), "us-east-1", other_account)
    role = standins.aws_role(make.unique("rotated"), other_account)
    return {"id": account["id"], "credentials": {**standins.aws_keys, "roleArn": role}}


async def _new_space(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"name": make.unique("space"), "provider": "GENERIC", "config": make.generic_config()}


async def _space_to_hold(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"id": (await make.register_generic_space(org.admin))["id"], "status": "INACTIVE"}


async def _space(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"id": (await make.register_generic_space(org.admin))["id"]}


async def _new_environment(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    space = await make.register_generic_space(org.admin)
    return {"name": make.unique("env"), "spaceId": space["id"], "namespace": "default"}


async def _environment_to_rebind(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    environment = await make.create_environment(
        org.admin, (await make.register_generic_space(org.admin))["id"]
    )
    elsewhere = await make.register_generic_space(org.admin)
    return {"id": environment["id"], "spaceId": elsewhere["id"], "namespace": "elsewhere"}


async def _new_namespace(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    space = await make.register_generic_space(
        org.admin,
        server=f"{cluster.url}/{make.unique('c')}",
        ca=cluster.ca_pem,
        token=cluster.token,
    )
    return {"spaceId": space["id"], "name": make.unique("team")}


async def _new_role(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"name": make.unique("role"), "policies": ["space:view"]}


async def _role(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    made = make.succeeded(
        await org.admin.mutate(CREATE_CUSTOM_ROLE, {"input": await _new_role(org, cluster)})
    )
    return {"id": made["role"]["id"]}


async def _role_update(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {**await _role(org, cluster), "policies": ["space:view", "environment:view"]}


async def _new_token(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"name": make.unique("token"), "role": "VIEWER"}


async def _token(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    made = make.succeeded(
        await org.admin.mutate(CREATE_API_TOKEN, {"input": await _new_token(org, cluster)})
    )
    return {"id": made["apiToken"]["id"]}


CASES = [
    Case("createCloudAccount", "cloudaccount:create", _new_account),
    Case("deleteCloudAccount", "cloudaccount:delete", _account),
    Case("rotateCloudAccountCredentials", "cloudaccount:update", _account_to_rotate),
    Case("grantClusterAccess", "cloudaccount:update", _ungranted_cluster),
    Case("revokeClusterAccess", "cloudaccount:update", _granted_cluster),
    Case("registerSpace", "space:create", _new_space),
    Case("setSpaceStatus", "space:update", _space_to_hold),
    Case("deregisterSpace", "space:delete", _space),
    Case("createEnvironment", "environment:create", _new_environment),
    Case("bindEnvironment", "environment:update", _environment_to_rebind),
    Case("createRole", "role:manage", _new_role),
    Case("updateRole", "role:manage", _role_update),
    Case("deleteRole", "role:manage", _role),
    Case("createApiToken", "token:manage", _new_token),
    Case("revokeApiToken", "token:manage", _token),
    *(
        [Case("createNamespace", "namespace:create", _new_namespace)]
        if HAS_CREATE_NAMESPACE
        else []
    ),
]


def test_every_mutation_of_the_schema_is_in_the_matrix() -> None:
    mutation = build_schema(SDL).mutation_type
    assert mutation is not None
    in_schema = set(mutation.fields)
    assert in_schema - {case.mutation for case in CASES} <= {
        "createCloudSpace",
        "updateCloudSpaceQuota",
        "deleteCloudSpace",
    }, "a mutation has no RBAC row"


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", CASES, ids=[case.mutation for case in CASES])
async def test_mutation_needs_its_policy(
    org: Org, cluster: KubeStandIn, case: Case, role: str
) -> None:
    caller = await caller_as(org, role)
    variables = {"input": await case.prepare(org, cluster)}
    before = await org_state(org, cluster)

    payload = await caller.mutate(case.document, variables)

    after = await org_state(org, cluster)
    if case.policy in ROLE_POLICIES[role]:
        assert payload["userErrors"] == []
        assert payload[case.result] is not None
        assert after != before, f"{case.mutation} as {role} succeeded but changed nothing"
    else:
        assert payload[case.result] is None
        [error] = payload["userErrors"]
        assert error["code"] == "FORBIDDEN"
        assert case.policy in error["message"], "the refusal names the missing policy"
        assert after == before, f"a refused {case.mutation} changed the org"


@pytest.mark.parametrize("role", ROLES)
async def test_viewer_permissions_are_exactly_the_roles_policies(org: Org, role: str) -> None:
    caller = await caller_as(org, role)
    viewer = (await caller.data("{ viewer { role permissions } }"))["viewer"]
    assert viewer["role"] == role.upper()
    assert len(viewer["permissions"]) == len(set(viewer["permissions"])), "no policy listed twice"
    assert set(viewer["permissions"]) == ROLE_POLICIES[role]
