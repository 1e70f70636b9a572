"""Environments end to end: create, bind, list, and the gate that says why one cannot
deploy (its space deregistered or held).

The environment picker is `spaces(filter: {scalable: true})`: real, ACTIVE,
registered spaces. A space turns ACTIVE on its first successful probe, which
runs right after registration, so the picker is tested against a Kubernetes
API stand-in; test_spaces.py checks what it excludes when nothing is probed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support.factories import (
    BIND_ENVIRONMENT,
    CREATE_ENVIRONMENT,
    create_environment,
    deregister_space,
    error_fields,
    register_cloud_space,
    register_generic_space,
    set_space_status,
    succeeded,
    top_level_codes,
    unique,
)

ENVIRONMENTS = """
query($first: Int, $after: String) {
  environments(first: $first, after: $after) {
    totalCount
    pageInfo { hasNextPage endCursor }
    edges { cursor node { id } }
    nodes { id name namespace gate space { id } }
  }
}"""
PICKER = "{ spaces(first: 100, filter: {scalable: true}) { totalCount nodes { id } } }"
STATUS = "query($id: ID!) { space(id: $id) { status } }"
ENVIRONMENT = """
query($id: ID!) {
  node(id: $id) { __typename ... on Environment { id name namespace gate space { id } } }
}"""


async def environments(org: Org) -> list[dict[str, Any]]:
    data = await org.viewer.data(ENVIRONMENTS, {"first": 100})
    nodes: list[dict[str, Any]] = data["environments"]["nodes"]
    return nodes


async def read(org: Org, environment_id: str) -> dict[str, Any]:
    data = await org.viewer.data(ENVIRONMENT, {"id": environment_id})
    node: dict[str, Any] = data["node"]
    return node


async def test_created_environment_is_listed_and_readable(org: Org) -> None:
    space = await register_generic_space(org.editor)
    name = unique("staging")
    environment = await create_environment(org.editor, space["id"], name=name, namespace="shop")
    assert (environment["name"], environment["namespace"]) == (name, "shop")
    assert environment["space"] == {"id": space["id"], "deregisteredAt": None}
    assert environment["gate"] is None

    expected = {
        "id": environment["id"],
        "name": name,
        "namespace": "shop",
        "gate": None,
        "space": {"id": space["id"]},
    }
    assert await read(org, environment["id"]) == {"__typename": "Environment", **expected}
    assert await environments(org) == [expected]
    on_space = await org.viewer.data(
        "query($id: ID!) { space(id: $id) { environments { id } } }", {"id": space["id"]}
    )
    assert on_space["space"]["environments"] == [{"id": environment["id"]}]


async def test_bad_input_is_reported_together_and_creates_nothing(org: Org) -> None:
    payload = await org.editor.mutate(
        CREATE_ENVIRONMENT,
        {"input": {"name": "", "spaceId": "spc_" + "0" * 30, "namespace": "Not_A_Label"}},
    )
    assert payload["environment"] is None
    assert error_fields(payload) == {
        (("input", "name"), "INVALID"),
        (("input", "spaceId"), "NOT_FOUND"),
        (("input", "namespace"), "INVALID"),
    }
    assert await environments(org) == []


async def test_duplicate_name_is_a_conflict(org: Org) -> None:
    space = await register_generic_space(org.editor)
    first = await create_environment(org.editor, space["id"])
    payload = await org.editor.mutate(
        CREATE_ENVIRONMENT,
        {"input": {"name": first["name"], "spaceId": space["id"], "namespace": "other"}},
    )
    assert error_fields(payload) == {(("input", "name"), "CONFLICT")}
    assert [e["id"] for e in await environments(org)] == [first["id"]]


async def test_spaces_of_other_orgs_are_not_found(org: Org, other_org: Org) -> None:
    foreign = await register_generic_space(other_org.editor)
    mine = await create_environment(org.editor, (await register_generic_space(org.editor))["id"])
    created = await org.editor.mutate(
        CREATE_ENVIRONMENT,
        {"input": {"name": unique("env"), "spaceId": foreign["id"], "namespace": "default"}},
    )
    assert error_fields(created) == {(("input", "spaceId"), "NOT_FOUND")}
    bound = await org.editor.mutate(
        BIND_ENVIRONMENT,
        {"input": {"id": mine["id"], "spaceId": foreign["id"], "namespace": "default"}},
    )
    assert error_fields(bound) == {(("input", "spaceId"), "NOT_FOUND")}
    assert (await read(org, mine["id"]))["space"] == {"id": mine["space"]["id"]}


async def test_rebinding_moves_the_environment(org: Org) -> None:
    first = await register_generic_space(org.editor)
    second = await register_cloud_space(org.admin, "AWS", registrar=org.editor)
    environment = await create_environment(org.editor, first["id"], namespace="one")
    payload = await org.editor.mutate(
        BIND_ENVIRONMENT,
        {"input": {"id": environment["id"], "spaceId": second["id"], "namespace": "two"}},
    )
    moved = succeeded(payload)["environment"]
    assert (moved["space"]["id"], moved["namespace"], moved["gate"]) == (second["id"], "two", None)
    assert (await read(org, environment["id"]))["space"] == {"id": second["id"]}


async def test_deregistration_gates_until_rebound_to_a_live_space(org: Org) -> None:
    old = await register_generic_space(org.editor)
    environment = await create_environment(org.editor, old["id"])
    await deregister_space(org.admin, old["id"])
    gated = await read(org, environment["id"])
    assert gated["gate"] == "Space deregistered"
    assert gated["space"] == {"id": old["id"]}
    listed = (await environments(org))[0]
    assert listed["gate"] == "Space deregistered"

    refused = await org.editor.mutate(
        BIND_ENVIRONMENT,
        {"input": {"id": environment["id"], "spaceId": old["id"], "namespace": "default"}},
    )
    assert error_fields(refused) == {(("input", "spaceId"), "PRECONDITION_FAILED")}
    assert (await read(org, environment["id"]))["gate"] == "Space deregistered"

    new = await register_generic_space(org.editor)
    rebound = succeeded(
        await org.editor.mutate(
            BIND_ENVIRONMENT,
            {"input": {"id": environment["id"], "spaceId": new["id"], "namespace": "default"}},
        )
    )["environment"]
    assert rebound["gate"] is None
    assert rebound["space"] == {"id": new["id"], "deregisteredAt": None}


async def test_held_space_gates_its_environments(org: Org) -> None:
    space = await register_generic_space(org.editor)
    environment = await create_environment(org.editor, space["id"])
    await set_space_status(org.editor, space["id"], "INACTIVE")
    assert (await read(org, environment["id"]))["gate"] == "Space inactive"
    await set_space_status(org.editor, space["id"], "ACTIVE")
    assert (await read(org, environment["id"]))["gate"] is None


async def test_bad_bind_input_is_reported_together_and_changes_nothing(org: Org) -> None:
    space = await register_generic_space(org.editor)
    environment = await create_environment(org.editor, space["id"], namespace="keep")
    payload = await org.editor.mutate(
        BIND_ENVIRONMENT,
        {"input": {"id": environment["id"], "spaceId": "spc_" + "0" * 30, "namespace": "-bad-"}},
    )
    assert payload["environment"] is None
    assert error_fields(payload) == {
        (("input", "spaceId"), "NOT_FOUND"),
        (("input", "namespace"), "INVALID"),
    }
    after = await read(org, environment["id"])
    assert (after["namespace"], after["space"]) == ("keep", {"id": space["id"]})


async def test_unknown_environment_and_bad_binding_come_back_together(org: Org) -> None:
    payload = await org.editor.mutate(
        BIND_ENVIRONMENT,
        {"input": {"id": "env_" + "0" * 30, "spaceId": "nope", "namespace": "UPPER"}},
    )
    assert error_fields(payload) == {
        (("input", "id"), "NOT_FOUND"),
        (("input", "spaceId"), "NOT_FOUND"),
        (("input", "namespace"), "INVALID"),
    }


async def test_binding_unknown_or_foreign_environment_is_not_found(
    org: Org, other_org: Org
) -> None:
    space = await register_generic_space(org.editor)
    foreign_space = await register_generic_space(other_org.editor)
    foreign = await create_environment(other_org.editor, foreign_space["id"], namespace="theirs")
    for environment_id in (foreign["id"], "env_" + "0" * 30):
        payload = await org.editor.mutate(
            BIND_ENVIRONMENT,
            {"input": {"id": environment_id, "spaceId": space["id"], "namespace": "mine"}},
        )
        assert error_fields(payload) == {(("input", "id"), "NOT_FOUND")}
    theirs = await other_org.viewer.data(ENVIRONMENT, {"id": foreign["id"]})
    assert theirs["node"]["namespace"] == "theirs"
    assert (await org.viewer.data(ENVIRONMENT, {"id": foreign["id"]}))["node"] is None


async def test_environments_page_with_cursors(org: Org) -> None:
    space = await register_generic_space(org.editor)
    made = [(await create_environment(org.editor, space["id"]))["id"] for _ in range(3)]
    first = (await org.viewer.data(ENVIRONMENTS, {"first": 2}))["environments"]
    assert first["totalCount"] == 3
    assert first["pageInfo"] == {"hasNextPage": True, "endCursor": first["edges"][1]["cursor"]}
    assert [e["node"]["id"] for e in first["edges"]] == made[:2]
    rest = await org.viewer.data(
        ENVIRONMENTS, {"first": 2, "after": first["pageInfo"]["endCursor"]}
    )
    assert [n["id"] for n in rest["environments"]["nodes"]] == made[2:]
    assert rest["environments"]["pageInfo"]["hasNextPage"] is False


@pytest.mark.parametrize("arguments", [{"first": 101}, {"first": 0}, {"after": "garbage"}])
async def test_bad_page_arguments_are_bad_user_input(org: Org, arguments: dict[str, Any]) -> None:
    response = await org.viewer.call(ENVIRONMENTS, arguments)
    assert top_level_codes(response) == ["BAD_USER_INPUT"]


async def test_concurrent_creates_with_one_name_make_one_environment(org: Org) -> None:
    space = await register_generic_space(org.editor)
    environment_input = {"name": unique("race"), "spaceId": space["id"], "namespace": "default"}
    payloads = await asyncio.gather(
        *(org.editor.mutate(CREATE_ENVIRONMENT, {"input": environment_input}) for _ in range(4))
    )
    outcomes = sorted(
        "created" if p["environment"] else p["userErrors"][0]["code"] for p in payloads
    )
    assert outcomes == ["CONFLICT", "CONFLICT", "CONFLICT", "created"]
    assert len(await environments(org)) == 1


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


async def probed_active(org: Org, cluster: KubeStandIn, synthetic: bool = False) -> str:
    """A GENERIC space on the stand-in, once its first probe has made it ACTIVE."""
    space = await register_generic_space(
        org.editor,
        server=f"{cluster.url}/{unique('c')}",
        ca=cluster.ca_pem,
        token=cluster.token,
        synthetic=synthetic,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        data = await org.viewer.data(STATUS, {"id": space["id"]})
        if data["space"]["status"] == "ACTIVE":
            return str(space["id"])
        await asyncio.sleep(0.05)
    raise AssertionError("the space never turned ACTIVE")


async def test_picker_offers_real_active_spaces_only(org: Org, cluster: KubeStandIn) -> None:
    real = await probed_active(org, cluster)
    await probed_active(org, cluster, synthetic=True)
    held = await probed_active(org, cluster)
    await set_space_status(org.editor, held, "INACTIVE")
    gone = await probed_active(org, cluster)
    await deregister_space(org.admin, gone)
    await register_generic_space(org.editor)  # never reachable: stays UNKNOWN

    picker = (await org.viewer.data(PICKER))["spaces"]
    assert picker == {"totalCount": 1, "nodes": [{"id": real}]}

    environment = await create_environment(org.editor, picker["nodes"][0]["id"])
    assert environment["gate"] is None
    await set_space_status(org.editor, held, "ACTIVE")
    deadline = time.monotonic() + 15
    while (await org.viewer.data(PICKER))["spaces"]["totalCount"] != 2:
        assert time.monotonic() < deadline, "a lifted hold did not bring the space back"
        await asyncio.sleep(0.05)


async def test_a_cursor_only_pages_its_own_list(org: Org) -> None:
    space = await register_generic_space(org.editor)
    await create_environment(org.editor, space["id"])
    environment_cursor = (await org.viewer.data(ENVIRONMENTS))["environments"]["edges"][0]["cursor"]
    spaces = "query($after: String) { spaces(after: $after) { totalCount } }"
    space_cursor = (await org.viewer.data("{ spaces { edges { cursor } } }"))["spaces"]["edges"][0]
    refused = await org.viewer.call(spaces, {"after": environment_cursor})
    assert top_level_codes(refused) == ["BAD_USER_INPUT"]
    refused = await org.viewer.call(ENVIRONMENTS, {"after": space_cursor["cursor"]})
    assert top_level_codes(refused) == ["BAD_USER_INPUT"]


async def test_a_taken_name_is_reported_with_the_other_faults(org: Org) -> None:
    space = await register_generic_space(org.editor)
    taken = await create_environment(org.editor, space["id"])
    payload = await org.editor.mutate(
        CREATE_ENVIRONMENT,
        {"input": {"name": taken["name"], "spaceId": space["id"], "namespace": "Bad"}},
    )
    assert error_fields(payload) == {
        (("input", "name"), "CONFLICT"),
        (("input", "namespace"), "INVALID"),
    }
