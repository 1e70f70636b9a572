"""Org isolation: an org never sees another org's objects, not even whether they exist.

A foreign id must behave exactly like an id that was never issued: null on
reads, the same NOT_FOUND userError (never FORBIDDEN) on every mutation that
takes an id, and absent from every list. Each check compares the answer for
a rival org's id with the answer for an unknown id of the same kind, so any
difference, even in wording, counts as a leak.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from core.common.ids import new_id
from tests.conftest import Org
from tests.support import factories as make

CREATE_NAMESPACE = f"""
mutation($input: CreateNamespaceInput!) {{
  createNamespace(input: $input) {{ namespace {{ name }} {make.USER_ERRORS} }}
}}"""
ID_PREFIX = {"account": "ca", "space": "spc", "environment": "env", "org": "org"}

RIVAL_STATE = """
{
  cloudAccounts(first: 100) { nodes { id name clusterAccess { region clusterName } } }
  spaces(first: 100, filter: {includeDeregistered: true}) {
    nodes { id name held deregisteredAt environments { id namespace } }
  }
  environments(first: 100) { nodes { id name namespace space { id } } }
}
"""

EVERYTHING_VISIBLE = """
{
  viewer { org { id name } }
  cloudAccounts(first: 100) {
    nodes { id clusterAccess { clusterName } spaces(first: 100) { nodes { id } } }
  }
  spaces(first: 100, filter: {includeDeregistered: true}) {
    edges { cursor node { id cloudAccount { id } environments { id space { id } } } }
    nodes { statusEvents(first: 100) { spaceId space { id } } }
  }
  environments(first: 100) { nodes { id space { id } } }
}
"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


@dataclass
class Scene:
    """The rival org's objects (`foreign`) and the caller's own, by kind."""

    rival: Org
    foreign: dict[str, str]
    own: dict[str, str]


async def _objects_of(org: Org) -> dict[str, str]:
    account = await make.create_cloud_account(org.admin)
    cloud_space = await make.register_cloud_space(
        org.admin, account_id=account["id"], cluster_name="prod"
    )
    space = await make.register_generic_space(org.admin)
    environment = await make.create_environment(org.admin, space["id"])
    org_id = (await org.admin.data("{ viewer { org { id } } }"))["viewer"]["org"]["id"]
    return {
        "account": account["id"],
        "cloud_space": cloud_space["id"],
        "space": space["id"],
        "environment": environment["id"],
        "org": org_id,
    }


@pytest.fixture
async def scene(org: Org, other_org: Org) -> Scene:
    return Scene(rival=other_org, foreign=await _objects_of(other_org), own=await _objects_of(org))


def unknown_id(kind: str) -> str:
    """An id of the right shape that no org was ever given."""
    return new_id(ID_PREFIX[kind])


READS = {
    "space": "query($id: ID!) { found: space(id: $id) { id name } }",
    "account": "query($id: ID!) { found: cloudAccount(id: $id) { id name } }",
    "node": "query($id: ID!) { found: node(id: $id) { id } }",
}


@pytest.mark.parametrize(
    ("read", "kind"),
    [
        ("space", "space"),
        ("account", "account"),
        ("node", "space"),
        ("node", "account"),
        ("node", "environment"),
        ("node", "org"),
    ],
)
async def test_foreign_id_reads_like_an_unknown_id(
    org: Org, scene: Scene, read: str, kind: str
) -> None:
    foreign = await org.admin.call(READS[read], {"id": scene.foreign[kind]})
    unknown = await org.admin.call(READS[read], {"id": unknown_id(kind)})
    assert foreign == unknown == {"data": {"found": None}, "errors": None}


# Each case: the mutation and a valid input that names the rival's object of `kind`
# (built from the scene's ids, with `target` standing for the id under test).
Build = Callable[[dict[str, str], str], dict[str, Any]]


@dataclass(frozen=True)
class IdCase:
    name: str
    document: str
    kind: str
    build: Build


ID_CASES = [
    IdCase(
        "deleteCloudAccount",
        make.DELETE_CLOUD_ACCOUNT,
        "account",
        lambda own, target: {"id": target},
    ),
    IdCase(
        "grantClusterAccess",
        make.GRANT_CLUSTER_ACCESS,
        "account",
        lambda own, target: {
            "cloudAccountId": target,
            "region": "us-east-1",
            "clusterName": "staging",
        },
    ),
    IdCase(
        "revokeClusterAccess",
        make.REVOKE_CLUSTER_ACCESS,
        "account",
        lambda own, target: {
            "cloudAccountId": target,
            "region": "us-east-1",
            "clusterName": "prod",
        },
    ),
    IdCase(
        "registerSpace",
        make.REGISTER_SPACE,
        "account",
        lambda own, target: {
            "name": make.unique("space"),
            "provider": "AWS",
            "cloudAccountId": target,
            "config": make.cloud_config("AWS", "prod"),
        },
    ),
    IdCase(
        "setSpaceStatus",
        make.SET_SPACE_STATUS,
        "space",
        lambda own, target: {"id": target, "status": "INACTIVE"},
    ),
    IdCase("deregisterSpace", make.DEREGISTER_SPACE, "space", lambda own, target: {"id": target}),
    IdCase(
        "createEnvironment",
        make.CREATE_ENVIRONMENT,
        "space",
        lambda own, target: {"name": make.unique("env"), "spaceId": target, "namespace": "apps"},
    ),
    IdCase(
        "bindEnvironment to a foreign space",
        make.BIND_ENVIRONMENT,
        "space",
        lambda own, target: {"id": own["environment"], "spaceId": target, "namespace": "apps"},
    ),
    IdCase(
        "bindEnvironment of a foreign environment",
        make.BIND_ENVIRONMENT,
        "environment",
        lambda own, target: {"id": target, "spaceId": own["space"], "namespace": "apps"},
    ),
    IdCase(
        "createNamespace",
        CREATE_NAMESPACE,
        "space",
        lambda own, target: {"spaceId": target, "name": make.unique("team")},
    ),
]


@pytest.mark.parametrize("case", ID_CASES, ids=[case.name for case in ID_CASES])
async def test_foreign_id_in_a_mutation_is_not_found_like_an_unknown_id(
    org: Org, scene: Scene, case: IdCase
) -> None:
    rival_before = await scene.rival.admin.data(RIVAL_STATE)

    foreign = await org.admin.mutate(
        case.document, {"input": case.build(scene.own, scene.foreign[case.kind])}
    )
    unknown = await org.admin.mutate(
        case.document, {"input": case.build(scene.own, unknown_id(case.kind))}
    )

    assert foreign["userErrors"] == unknown["userErrors"]
    assert [error["code"] for error in foreign["userErrors"]] == ["NOT_FOUND"]
    assert await scene.rival.admin.data(RIVAL_STATE) == rival_before


async def test_lists_never_include_another_orgs_objects(org: Org, scene: Scene) -> None:
    seen = json.dumps(await org.admin.data(EVERYTHING_VISIBLE))
    for kind, foreign_id in scene.foreign.items():
        assert foreign_id not in seen, f"the rival's {kind} shows in the caller's lists"
    for kind, own_id in scene.own.items():
        assert own_id in seen, f"the caller's own {kind} is missing, so the check proves nothing"
