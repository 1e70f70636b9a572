"""The role/policy matrix: every mutation, as VIEWER, EDITOR, ADMIN and a custom role.

The design's "Roles and policies" table is the specification, restated here
as ROLE_POLICIES so that a drift in `core.common.rbac` fails a test. A mutation the
caller's role lacks the policy for answers one FORBIDDEN userError and leaves
the org exactly as it was; with the policy it succeeds and changes something.

Escalation (issue 18): `role:manage` and `token:manage` are the only policies that make
roles and tokens, so every set of policies that could compose into more is one of them
alone, both together, or either with any one other policy. For each such set, every way
to reach a policy beyond it (a wider role made or changed, its own included; a token of
a wider role; a wider role or token deleted or revoked) is FORBIDDEN and changes nothing,
while the same acts within the set succeed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from graphql import build_schema

from sim import clouds
from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support import apps
from tests.support import factories as make
from tests.support.graphql import GraphQL

VIEW = {
    "space:view",
    "namespace:view",
    "environment:view",
    "cloudspace:view",
    "cloudaccount:view",
    "advice:view",
    "app:view",
}
EDIT = VIEW | {
    "space:create",
    "space:update",
    "namespace:create",
    "environment:create",
    "environment:update",
    "cloudspace:create",
    "cloudspace:update",
    "cloudspace:kubeconfig",
    "advice:manage",
    "app:deploy",
}
ADMINISTER = EDIT | {
    "space:delete",
    "cloudaccount:create",
    "cloudaccount:update",
    "cloudaccount:delete",
    "cloudspace:delete",
    "app:delete",
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
  apps(first: 100) { nodes { id name suspended status revisions(first: 100) { nodes { number } } } }
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
    **{
        name: (apps.mutation(name, input_type), "app")
        for name, input_type in (
            ("createApp", "CreateAppInput"),
            ("updateApp", "UpdateAppInput"),
            ("suspendApp", "AppIdInput"),
            ("resumeApp", "AppIdInput"),
            ("rollbackApp", "RollbackAppInput"),
            ("deleteApp", "DeleteAppInput"),
        )
    },
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
    # A role within every caller's policies that holds token:manage (a custom role may
    # mint and revoke only tokens of roles within its own).
    return {"name": make.unique("token"), "role": (await _role(org, cluster))["id"]}


async def _token(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    made = make.succeeded(
        await org.admin.mutate(CREATE_API_TOKEN, {"input": await _new_token(org, cluster)})
    )
    return {"id": made["apiToken"]["id"]}


async def _new_app(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    # A space nobody answers on: its app waits for it (no cluster call is made).
    environment = await make.create_environment(
        org.admin, (await make.register_generic_space(org.admin))["id"]
    )
    return {
        "name": make.unique("app"),
        "target": {"environmentId": environment["id"]},
        "source": apps.git_input("https://git.example/rbac.git"),
    }


async def _app(org: Org, cluster: KubeStandIn, suspended: bool = False) -> dict[str, Any]:
    made = make.succeeded(
        await org.admin.mutate(
            apps.CREATE, {"input": {**await _new_app(org, cluster), "suspended": suspended}}
        )
    )
    return {
        "id": made["app"]["id"],
        "name": made["app"]["name"],
        "revision": made["revision"]["id"],
    }


async def _app_to_update(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    found = await _app(org, cluster)
    return {"id": found["id"], "source": apps.git_input("https://git.example/rbac.git", tag="v2")}


async def _app_to_act_on(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"id": (await _app(org, cluster))["id"]}


async def _suspended_app(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"id": (await _app(org, cluster, suspended=True))["id"]}


async def _revision(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    return {"revisionId": (await _app(org, cluster))["revision"]}


async def _app_to_delete(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    found = await _app(org, cluster)
    return {"id": found["id"], "confirmName": found["name"]}


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
    Case("createNamespace", "namespace:create", _new_namespace),
    Case("createApp", "app:deploy", _new_app),
    Case("updateApp", "app:deploy", _app_to_update),
    Case("suspendApp", "app:deploy", _app_to_act_on),
    Case("resumeApp", "app:deploy", _suspended_app),
    Case("rollbackApp", "app:deploy", _revision),
    Case("deleteApp", "app:delete", _app_to_delete),
]


def test_every_mutation_of_the_schema_is_in_the_matrix() -> None:
    mutation = build_schema(SDL).mutation_type
    assert mutation is not None
    in_schema = set(mutation.fields)
    # Mutations of what lives in a CloudSpace need a host: their roles are tested with one
    # (test_cloudspaces_api.py, test_advisor.py).
    assert in_schema - {case.mutation for case in CASES} <= {
        "createCloudSpace",
        "updateCloudSpaceQuota",
        "deleteCloudSpace",
        # FORBIDDEN without cloudspace:create / cloudspace:delete, and audited:
        # tests/test_cloudspace_vclusters.py.
        "addVCluster",
        "removeVCluster",
        "dismissFinding",
        "restoreFinding",
        "exemptAdvisorRule",
        "removeAdvisorExemption",
        # They need an app Flux has seen (tests/test_apps_cloudspaces.py: FORBIDDEN without
        # app:deploy, and nothing changes).
        "syncApp",
        "requeueAppRevision",
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


# -- escalation (issue 18) -------------------------------------------------------------

ALL_POLICIES = sorted(ADMINISTER)
MANAGING = ("role:manage", "token:manage")
COMPOSITIONS = sorted(
    {frozenset({managing}) for managing in MANAGING}
    | {frozenset({managing, other}) for managing in MANAGING for other in ALL_POLICIES},
    key=sorted,
)
UPDATE_ROLE = DOCUMENTS["updateRole"][0]
DELETE_ROLE = DOCUMENTS["deleteRole"][0]
REVOKE_API_TOKEN = DOCUMENTS["revokeApiToken"][0]
WHO = "{ viewer { permissions } }"
ROLES_AND_TOKENS = """
{ roles { id policies } apiTokens(first: 100, includeRevoked: true) { nodes { id revokedAt } } }
"""


async def role_of(org: Org, policies: set[str]) -> str:
    variables = {"name": make.unique("role"), "policies": sorted(policies)}
    made = make.succeeded(await org.admin.mutate(CREATE_CUSTOM_ROLE, {"input": variables}))
    role_id: str = made["role"]["id"]
    return role_id


async def token_of(client: GraphQL, role: str) -> tuple[str, GraphQL]:
    made = make.succeeded(
        await client.mutate(CREATE_API_TOKEN, {"input": {"name": make.unique("t"), "role": role}})
    )
    return made["apiToken"]["id"], GraphQL(client.url, client.ws_url, made["token"])


def refused(payload: dict[str, Any], beyond: set[str], managing: str, held: frozenset[str]) -> None:
    """One FORBIDDEN that names what the caller lacks: the managing policy, or else a
    policy beyond its own set."""
    [error] = payload["userErrors"]
    assert error["code"] == "FORBIDDEN", error
    named = {managing} if managing not in held else beyond
    assert any(policy in error["message"] for policy in named), error["message"]


@pytest.mark.parametrize("held", COMPOSITIONS, ids=["+".join(sorted(s)) for s in COMPOSITIONS])
async def test_no_composition_of_policies_reaches_beyond_its_own(
    org: Org, held: frozenset[str]
) -> None:
    own_role = await role_of(org, set(held))
    _, caller = await token_of(org.admin, own_role)
    beyond = set(ALL_POLICIES) - held
    extra = min(beyond)
    wider = await role_of(org, {*held, extra})
    admin_token, _ = await token_of(org.admin, "ADMIN")
    wider_token, _ = await token_of(org.admin, wider)
    before = await org.admin.data(ROLES_AND_TOKENS)

    role_attempts = [
        (CREATE_CUSTOM_ROLE, {"name": make.unique("mine"), "policies": ALL_POLICIES}),
        (CREATE_CUSTOM_ROLE, {"name": make.unique("mine"), "policies": sorted({*held, extra})}),
        (UPDATE_ROLE, {"id": own_role, "policies": ALL_POLICIES}),
        (UPDATE_ROLE, {"id": own_role, "policies": sorted({*held, extra})}),
        (UPDATE_ROLE, {"id": wider, "policies": sorted(held)}),  # a role above, lowered
        (DELETE_ROLE, {"id": wider}),
    ]
    token_attempts = [
        *(
            (CREATE_API_TOKEN, {"name": make.unique("t"), "role": role})
            for role in ("ADMIN", "EDITOR", "VIEWER", wider)
        ),
        (REVOKE_API_TOKEN, {"id": admin_token}),
        (REVOKE_API_TOKEN, {"id": wider_token}),
    ]
    for managing, attempts in (("role:manage", role_attempts), ("token:manage", token_attempts)):
        for document, variables in attempts:
            refused(await caller.mutate(document, {"input": variables}), beyond, managing, held)
    assert await org.admin.data(ROLES_AND_TOKENS) == before, "a refused attempt changed the org"

    # Within its own set, the same acts succeed.
    if "role:manage" in held:
        made = make.succeeded(
            await caller.mutate(
                CREATE_CUSTOM_ROLE,
                {"input": {"name": make.unique("mine"), "policies": sorted(held)}},
            )
        )
        make.succeeded(
            await caller.mutate(
                UPDATE_ROLE, {"input": {"id": made["role"]["id"], "policies": sorted(held)}}
            )
        )
    if "token:manage" in held:
        minted_id, minted = await token_of(caller, own_role)
        assert set((await minted.data(WHO))["viewer"]["permissions"]) == held
        make.succeeded(await caller.mutate(REVOKE_API_TOKEN, {"input": {"id": minted_id}}))
    assert set((await caller.data(WHO))["viewer"]["permissions"]) == held


def aliased(field: str, inputs: list[dict[str, Any]]) -> str:
    """One document calling a mutation field once per input, as aliases a0, a1, …"""
    calls = " ".join(
        f"a{index}: {field}(input: $i{index}) {{ {make.USER_ERRORS} }}"
        for index in range(len(inputs))
    )
    kind = {"updateRole": "UpdateRoleInput!", "createApiToken": "CreateApiTokenInput!"}[field]
    declared = ", ".join(f"$i{index}: {kind}" for index in range(len(inputs)))
    return f"mutation({declared}) {{ {calls} }}"


async def refused_each(caller: GraphQL, field: str, inputs: list[dict[str, Any]]) -> None:
    """Every input refused FORBIDDEN, at most 15 aliases a document."""
    for start in range(0, len(inputs), 15):
        chunk = inputs[start : start + 15]
        data = await caller.data(
            aliased(field, chunk), {f"i{index}": value for index, value in enumerate(chunk)}
        )
        for index in range(len(chunk)):
            codes = [error["code"] for error in data[f"a{index}"]["userErrors"]]
            assert codes == ["FORBIDDEN"], (chunk[index], data[f"a{index}"])


async def test_role_manage_alone_adds_no_policy_to_its_own_role(org: Org) -> None:
    own_role = await role_of(org, {"role:manage"})
    _, caller = await token_of(org.admin, own_role)
    additions = [
        {"id": own_role, "policies": ["role:manage", policy]}
        for policy in ALL_POLICIES
        if policy != "role:manage"
    ]
    await refused_each(caller, "updateRole", additions)
    assert (await caller.data(WHO))["viewer"]["permissions"] == ["role:manage"]


async def test_token_manage_alone_mints_no_token_of_any_wider_role(org: Org) -> None:
    own_role = await role_of(org, {"token:manage"})
    _, caller = await token_of(org.admin, own_role)
    wider = [await role_of(org, {"token:manage", p}) for p in ALL_POLICIES if p != "token:manage"]
    await refused_each(
        caller,
        "createApiToken",
        [{"name": make.unique("t"), "role": role} for role in ["ADMIN", "EDITOR", *wider]],
    )
