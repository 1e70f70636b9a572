"""Issue 7, defect 5: a NUL byte or another control character in any id or string.

On Postgres a NUL used to reach the driver and come back as INTERNAL_SERVER_ERROR. Now,
on both databases alike, an id that cannot exist is NOT_FOUND (null on reads, a userError
naming the field on mutations), and a string with a control character is INVALID on the
field at fault, with nothing written.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.conftest import Org
from tests.support import factories as make
from tests.support.attack import converse, send, subscribe
from tests.support.server import Server

# Characters no single-line input may carry; a lone surrogate cannot even be encoded.
CONTROL = ["\x00", "\x1b[31m", "\n", "\r", "\t", "\x7f", "\x85", "\ud800"]


def impossible_ids(real: str) -> list[str]:
    return ["\x00", real + "\x00", real[:-1] + "\x00", real + "\n", "\ud800", f"spc_{'0' * 29}\x00"]


@pytest.fixture
async def scene(org: Org) -> dict[str, Any]:
    account = await make.create_cloud_account(org.admin)
    space = await make.register_generic_space(org.admin)
    environment = await make.create_environment(org.admin, space["id"])
    return {"account": account, "space": space, "environment": environment}


async def counts(org: Org) -> dict[str, int]:
    data = await org.admin.data(
        "{ cloudAccounts(first: 100) { totalCount } spaces(first: 100) { totalCount } "
        "environments(first: 100) { totalCount } }"
    )
    return {name: connection["totalCount"] for name, connection in data.items()}


def fields_and_codes(payload: dict[str, Any]) -> set[tuple[tuple[str, ...] | None, str]]:
    return make.error_fields(payload)


# -- ids ------------------------------------------------------------------------------------


async def test_reads_of_impossible_ids_are_null(scene: dict[str, Any], org: Org) -> None:
    for real in (scene["space"]["id"], scene["account"]["id"]):
        for bad in impossible_ids(real):
            response = await org.viewer.call(
                "query($id: ID!) { node(id: $id) { id } space(id: $id) { id } "
                "cloudAccount(id: $id) { id } }",
                {"id": bad},
            )
            assert response == {
                "data": {"node": None, "space": None, "cloudAccount": None},
                "errors": None,
            }, repr(bad)


async def test_a_cursor_with_a_nul_is_refused_as_bad_input(scene: dict[str, Any], org: Org) -> None:
    for object_id in impossible_ids(scene["space"]["id"]):
        cursor = base64.urlsafe_b64encode(object_id.encode("utf-8", "surrogatepass")).decode()
        for after in (cursor.rstrip("="), "\x00", cursor + "\n"):
            response = await org.viewer.call(
                "query($after: String) { spaces(after: $after) { totalCount } }", {"after": after}
            )
            assert make.top_level_codes(response) == ["BAD_USER_INPUT"], repr(after)


async def test_a_subscription_to_an_impossible_space_is_not_found(
    server: Server, scene: dict[str, Any], org: Org
) -> None:
    query = "subscription($id: ID) { spaceStatusChanged(spaceId: $id) { status } }"
    for bad in impossible_ids(scene["space"]["id"]):
        talk = await converse(
            server, [subscribe(query, variables={"id": bad})], org.tokens["viewer"]
        )
        (message,) = talk.messages
        assert message["type"] in ("error", "next"), message
        errors = message["payload"] if message["type"] == "error" else message["payload"]["errors"]
        assert [e["extensions"]["code"] for e in errors] == ["NOT_FOUND"], repr(bad)


def id_attacks(scene: dict[str, Any]) -> list[tuple[str, dict[str, Any], str, str]]:
    """(mutation, input, the id field under attack, the real id there) for every id input."""
    account, space, environment = scene["account"], scene["space"], scene["environment"]
    access = {"cloudAccountId": account["id"], "region": "us-east-1", "clusterName": "prod"}
    return [
        (make.DELETE_CLOUD_ACCOUNT, {"id": account["id"]}, "id", account["id"]),
        (make.GRANT_CLUSTER_ACCESS, access, "cloudAccountId", account["id"]),
        (make.REVOKE_CLUSTER_ACCESS, access, "cloudAccountId", account["id"]),
        (
            make.REGISTER_SPACE,
            {
                "name": make.unique("aws"),
                "provider": "AWS",
                "cloudAccountId": account["id"],
                "config": make.cloud_config("AWS", "prod"),
            },
            "cloudAccountId",
            account["id"],
        ),
        (make.SET_SPACE_STATUS, {"id": space["id"], "status": "INACTIVE"}, "id", space["id"]),
        (make.DEREGISTER_SPACE, {"id": space["id"]}, "id", space["id"]),
        (
            "mutation($input: CreateNamespaceInput!) { createNamespace(input: $input) "
            "{ namespace { name } userErrors { field message code } } }",
            {"spaceId": space["id"], "name": "team-a"},
            "spaceId",
            space["id"],
        ),
        (
            make.CREATE_ENVIRONMENT,
            {"name": make.unique("env"), "spaceId": space["id"], "namespace": "default"},
            "spaceId",
            space["id"],
        ),
        (
            make.BIND_ENVIRONMENT,
            {"id": environment["id"], "spaceId": space["id"], "namespace": "default"},
            "id",
            environment["id"],
        ),
        (
            make.BIND_ENVIRONMENT,
            {"id": environment["id"], "spaceId": space["id"], "namespace": "default"},
            "spaceId",
            space["id"],
        ),
    ]


async def test_every_mutation_answers_not_found_for_impossible_ids(
    scene: dict[str, Any], org: Org
) -> None:
    before = await counts(org)
    for mutation, values, field, real in id_attacks(scene):
        for bad in impossible_ids(real):
            payload = await org.admin.mutate(mutation, {"input": {**values, field: bad}})
            assert ((("input", field), "NOT_FOUND")) in fields_and_codes(payload), (
                field,
                repr(bad),
            )
            assert all(e["code"] != "INTERNAL_SERVER_ERROR" for e in payload["userErrors"])
    assert await counts(org) == before


# -- strings --------------------------------------------------------------------------------


def string_attacks(scene: dict[str, Any]) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """(mutation, a valid input, the path of one string in it) for every string input."""
    account, space, environment = scene["account"], scene["space"], scene["environment"]
    aws = {"name": make.unique("aws"), "provider": "AWS", "credentials": dict(make.AWS_CREDENTIALS)}
    access = {"cloudAccountId": account["id"], "region": "us-east-1", "clusterName": "prod"}
    generic = {
        "name": make.unique("generic"),
        "provider": "GENERIC",
        "config": make.generic_config(),
    }
    environment_input = {"name": make.unique("env"), "spaceId": space["id"], "namespace": "default"}
    bind = {"id": environment["id"], "spaceId": space["id"], "namespace": "default"}
    namespace = (
        "mutation($input: CreateNamespaceInput!) { createNamespace(input: $input) "
        "{ namespace { name } userErrors { field message code } } }"
    )
    return [
        (make.CREATE_CLOUD_ACCOUNT, aws, ("name",)),
        (make.CREATE_CLOUD_ACCOUNT, aws, ("credentials", "secretAccessKey")),
        (make.CREATE_CLOUD_ACCOUNT, aws, ("credentials", "accessKeyId")),
        (make.GRANT_CLUSTER_ACCESS, access, ("region",)),
        (make.GRANT_CLUSTER_ACCESS, access, ("clusterName",)),
        (make.REVOKE_CLUSTER_ACCESS, access, ("clusterName",)),
        (make.REGISTER_SPACE, generic, ("name",)),
        (make.REGISTER_SPACE, generic, ("config", "clusterName")),
        (make.REGISTER_SPACE, generic, ("config", "server")),
        (make.REGISTER_SPACE, generic, ("config", "serviceAccountToken")),
        (namespace, {"spaceId": space["id"], "name": "team-a"}, ("name",)),
        (make.CREATE_ENVIRONMENT, environment_input, ("name",)),
        (make.CREATE_ENVIRONMENT, environment_input, ("namespace",)),
        (make.BIND_ENVIRONMENT, bind, ("namespace",)),
    ]


def with_value(values: dict[str, Any], path: tuple[str, ...], tamper: str) -> dict[str, Any]:
    """A deep copy of `values` with `tamper` put in the middle of the string at `path`."""
    copied: dict[str, Any] = json.loads(json.dumps(values))
    inner = copied
    for part in path[:-1]:
        inner = inner[part]
    original = inner[path[-1]]
    inner[path[-1]] = original[: len(original) // 2] + tamper + original[len(original) // 2 :]
    return copied


async def test_every_string_with_a_control_character_is_invalid_on_its_field(
    scene: dict[str, Any], org: Org
) -> None:
    before = await counts(org)
    for mutation, values, path in string_attacks(scene):
        for tamper in CONTROL:
            payload = await org.admin.mutate(mutation, {"input": with_value(values, path, tamper)})
            assert (("input", *path), "INVALID") in fields_and_codes(payload), (path, repr(tamper))
            assert all(repr(tamper) not in e["message"] for e in payload["userErrors"])
    assert await counts(org) == before


async def test_pem_and_key_files_keep_their_lines_but_not_nul(org: Org) -> None:
    config = make.generic_config()
    assert "\n" in config["caCert"]
    generic = {"name": make.unique("generic"), "provider": "GENERIC", "config": config}
    for path in (("config", "caCert"),):
        payload = await org.admin.mutate(
            make.REGISTER_SPACE, {"input": with_value(generic, path, "\x00")}
        )
        assert (("input", *path), "INVALID") in fields_and_codes(payload)
    key_file = make.credentials_for("GCP")["serviceAccountJson"]
    gcp = {
        "name": make.unique("gcp"),
        "provider": "GCP",
        "credentials": {"serviceAccountJson": key_file},
    }
    tampered = with_value(gcp, ("credentials", "serviceAccountJson", "private_key"), "\x00")
    payload = await org.admin.mutate(make.CREATE_CLOUD_ACCOUNT, {"input": tampered})
    assert (
        ("input", "credentials", "serviceAccountJson", "private_key"),
        "INVALID",
    ) in fields_and_codes(payload)
    # Lines are what PEM is made of: the untampered inputs are accepted.
    assert (await org.admin.mutate(make.REGISTER_SPACE, {"input": generic}))["userErrors"] == []
    assert (await org.admin.mutate(make.CREATE_CLOUD_ACCOUNT, {"input": gcp}))["userErrors"] == []


async def test_a_nul_in_a_json_key_is_invalid(org: Org) -> None:
    credentials = {**make.AWS_CREDENTIALS, "x\x00": "y"}
    payload = await org.admin.mutate(
        make.CREATE_CLOUD_ACCOUNT,
        {"input": {"name": make.unique("aws"), "provider": "AWS", "credentials": credentials}},
    )
    assert (("input", "credentials"), "INVALID") in fields_and_codes(payload)


async def test_the_raw_wire_gets_no_internal_error(server: Server, org: Org) -> None:
    """The same NUL sent as JSON escapes straight into a variable-free document."""
    document = 'query { space(id: "spc_\\u0000") { id } node(id: "\\u0000") { id } }'
    answer = await send(server, json_body={"query": document}, token=org.tokens["viewer"])
    assert answer.body == {"data": {"space": None, "node": None}}


@pytest.mark.parametrize("tamper", ["\x00", "\ud800", "\x1b"], ids=["nul", "surrogate", "escape"])
async def test_query_arguments_with_control_characters_are_bad_input(org: Org, tamper: str) -> None:
    for field in ("spaces", "spaceCounts"):
        selection = "{ totalCount }" if field == "spaces" else "{ __typename }"
        response = await org.viewer.call(
            f"query($search: String) {{ {field}(filter: {{search: $search}}) {selection} }}",
            {"search": f"pro{tamper}d"},
        )
        assert make.top_level_codes(response) == ["BAD_USER_INPUT"], response
        assert "search" in response["errors"][0]["message"]
