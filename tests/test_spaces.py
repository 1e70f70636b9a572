"""Spaces end to end: registration and its validation, reads and filters, the operator
hold, and deregistration with its cascade (environments gated, grant removed).

Every test drives the running server over HTTP. A fresh space has had no probe
(the probe loop is tested elsewhere), so it reads UNKNOWN here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sim.pki import CertificateAuthority
from tests.conftest import Org
from tests.support.factories import (
    CREATE_ENVIRONMENT,
    DEREGISTER_SPACE,
    GCP_PROJECT,
    REGISTER_SPACE,
    SET_SPACE_STATUS,
    SPACE_FIELDS,
    ca_pem,
    cloud_config,
    create_cloud_account,
    create_environment,
    deregister_space,
    error_fields,
    generic_config,
    grant_cluster_access,
    register_cloud_space,
    register_generic_space,
    set_space_status,
    succeeded,
    top_level_codes,
    unique,
)

SPACE = f"""
query($id: ID!) {{
  space(id: $id) {{
    {SPACE_FIELDS}
    statusEvents {{ spaceId previous status reason at space {{ id }} }}
    environments {{ id gate }}
  }}
  node(id: $id) {{ __typename id }}
}}"""
SPACES = """
query($first: Int, $after: String, $filter: SpaceFilter) {
  spaces(first: $first, after: $after, filter: $filter) {
    totalCount
    pageInfo { hasNextPage endCursor }
    edges { cursor node { id } }
    nodes { id name }
  }
}"""
ACCESS = "query($id: ID!) { cloudAccount(id: $id) { clusterAccess { region clusterName } } }"
# In the range this module's server is told to deny (SPACEDOCK_CLUSTER_DENY_CIDRS).
OPERATOR_DENIED = "203.0.113.7"
ENVIRONMENT = "query($id: ID!) { node(id: $id) { ... on Environment { gate space { id } } } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_CLUSTER_DENY_CIDRS": "203.0.113.0/24"}


async def register(org: Org, space_input: dict[str, Any]) -> dict[str, Any]:
    """The registerSpace payload (as an editor), userErrors and all."""
    return await org.editor.mutate(REGISTER_SPACE, {"input": space_input})


async def space_ids(org: Org, space_filter: dict[str, Any] | None = None) -> list[str]:
    data = await org.viewer.data(SPACES, {"first": 100, "filter": space_filter})
    return [node["id"] for node in data["spaces"]["nodes"]]


async def read_space(org: Org, space_id: str) -> dict[str, Any]:
    data = await org.viewer.data(SPACE, {"id": space_id})
    space: dict[str, Any] = data["space"]
    return space


# -- registration ----------------------------------------------------------


@pytest.mark.parametrize("provider", ["AWS", "GCP", "AZURE"])
async def test_cloud_space_registers_with_its_account_and_first_event(
    org: Org, provider: str
) -> None:
    account = await create_cloud_account(org.admin, provider)
    name = unique("prod")
    space = await register_cloud_space(
        org.admin, provider, registrar=org.editor, account_id=account["id"], name=name
    )
    assert space["name"] == name
    assert space["provider"] == provider
    assert space["spaceType"] == "KUBERNETES"
    assert space["cloudAccount"] == {"id": account["id"]}
    assert space["status"] == "UNKNOWN"
    assert (space["held"], space["synthetic"], space["deregisteredAt"]) == (False, False, None)
    config = space["config"]
    expected = cloud_config(provider, config["clusterName"])
    assert {k: v for k, v in config.items() if v is not None} == expected

    read = await read_space(org, space["id"])
    # Most recent first: the first probe may already have answered (ACTIVE) by now.
    first_event = read["statusEvents"][-1]
    assert (first_event["previous"], first_event["status"], first_event["reason"]) == (
        None,
        "UNKNOWN",
        "registered",
    )
    assert [e["previous"] for e in read["statusEvents"][:-1]] in ([], ["UNKNOWN"])
    assert first_event["spaceId"] == space["id"]
    assert first_event["space"] == {"id": space["id"]}
    data = await org.viewer.data(SPACE, {"id": space["id"]})
    assert data["node"] == {"__typename": "Space", "id": space["id"]}


async def test_generic_space_keeps_its_credentials_secret(org: Org) -> None:
    token = f"token-{unique('sa')}"
    server = f"https://127.0.0.1:6443/{unique('kind')}"
    payload = await register(
        org,
        {
            "name": unique("kind"),
            "provider": "GENERIC",
            "spaceType": "KUBERNETES",
            "config": generic_config(server=server + "/", token=token),
        },
    )
    space = succeeded(payload)["space"]
    assert space["provider"] == "GENERIC"
    assert space["cloudAccount"] is None
    assert space["config"]["server"] == server
    read = await org.viewer.call(SPACE, {"id": space["id"]})
    for response in (payload, read):
        text = json.dumps(response)
        assert token not in text
        assert "BEGIN CERTIFICATE" not in text
    fields = await org.viewer.data('{ __type(name: "SpaceConfig") { fields { name } } }')
    assert {f["name"] for f in fields["__type"]["fields"]}.isdisjoint(
        {"caCert", "serviceAccountToken", "clientCertificate", "clientKey"}
    )


async def test_generic_space_may_use_a_client_certificate(org: Org) -> None:
    authority = CertificateAuthority("generic-client-ca")
    client = authority.issue("admin", server=False, groups=("system:masters",))
    config = {
        **generic_config(ca=authority.pem),
        "clientCertificate": client.certificate_pem,
        "clientKey": client.key_pem,
    }
    del config["serviceAccountToken"]
    payload = await register(org, {"name": unique("mtls"), "provider": "GENERIC", "config": config})
    assert "PRIVATE KEY" not in json.dumps(payload)
    assert succeeded(payload)["space"]["provider"] == "GENERIC"


@pytest.mark.parametrize(
    ("provider", "config", "expected"),
    [
        pytest.param("AWS", {"clusterName": "eks-1"}, {"region"}, id="aws-needs-region"),
        # The project and the subscription default to the account's.
        pytest.param("GCP", {"clusterName": "gke-1"}, {"region"}, id="gcp-needs-region"),
        pytest.param(
            "AZURE",
            {"clusterName": "aks-1", "region": "westeurope"},
            {"resourceGroup"},
            id="azure-needs-group",
        ),
        pytest.param(
            "GENERIC",
            {"clusterName": "kind-1"},
            {"server", "caCert", "serviceAccountToken"},
            id="generic-needs-server-ca-credential",
        ),
        pytest.param(
            "AWS",
            {"clusterName": "eks-1", "region": "us-east-1", "server": "https://127.0.0.1:6443"},
            {"server"},
            id="aws-takes-no-server",
        ),
        pytest.param(
            "GENERIC",
            {**generic_config(), "projectId": GCP_PROJECT},
            {"projectId"},
            id="generic-takes-no-project",
        ),
    ],
)
async def test_each_provider_requires_its_config(
    org: Org, provider: str, config: dict[str, Any], expected: set[str]
) -> None:
    space_input: dict[str, Any] = {"name": unique("s"), "provider": provider, "config": config}
    if provider != "GENERIC":
        space_input["cloudAccountId"] = (await create_cloud_account(org.admin, provider))["id"]
    payload = await register(org, space_input)
    assert payload["space"] is None
    assert error_fields(payload) == {(("input", "config", f), "INVALID") for f in expected}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        pytest.param({"server": "https://169.254.169.254"}, "server", id="metadata-address"),
        pytest.param({"server": "https://169.254.10.1:6443/k"}, "server", id="link-local"),
        pytest.param({"server": "https://2852039166"}, "server", id="metadata-as-decimal"),
        pytest.param({"server": "https://0xa9.0xfe.0xa9.0xfe"}, "server", id="metadata-as-hex"),
        pytest.param({"server": "https://169.254.43518"}, "server", id="metadata-short-form"),
        pytest.param(
            {"server": "https://[::ffff:169.254.169.254]:443"}, "server", id="metadata-v4-mapped"
        ),
        pytest.param({"server": "https://[fe80::1]:6443"}, "server", id="ipv6-link-local"),
        pytest.param({"server": "https://127.0.0.1:99999"}, "server", id="port-out-of-range"),
        pytest.param({"server": f"https://{OPERATOR_DENIED}:6443"}, "server", id="operator-denied"),
        pytest.param({"server": "http://127.0.0.1:6443"}, "server", id="plain-http"),
        pytest.param({"server": "https://user:pw@127.0.0.1:6443"}, "server", id="userinfo"),
        pytest.param({"caCert": "not a certificate"}, "caCert", id="bad-ca"),
        pytest.param({"serviceAccountToken": "two words"}, "serviceAccountToken", id="bad-token"),
        pytest.param({"clientKey": "x"}, "clientKey", id="key-with-token"),
    ],
)
async def test_generic_config_is_checked(org: Org, config: dict[str, Any], field: str) -> None:
    before = await space_ids(org, {"includeDeregistered": True})
    payload = await register(
        org, {"name": unique("g"), "provider": "GENERIC", "config": {**generic_config(), **config}}
    )
    assert payload["space"] is None
    assert ("input", "config", field) in {f for f, _ in error_fields(payload)}
    assert all(code == "INVALID" for _, code in error_fields(payload))
    assert await space_ids(org, {"includeDeregistered": True}) == before


async def test_cloud_account_rules(org: Org, other_org: Org) -> None:
    aws = await create_cloud_account(org.admin, "AWS")
    foreign = await create_cloud_account(other_org.admin, "AWS")
    config = cloud_config("AWS", "eks-1")
    cases = [
        ("AWS", None, config, "INVALID"),
        ("AWS", foreign["id"], config, "NOT_FOUND"),
        ("AWS", "ca_" + "0" * 30, config, "NOT_FOUND"),
        ("GCP", aws["id"], cloud_config("GCP", "gke-1"), "INVALID"),
        ("GENERIC", aws["id"], generic_config(), "INVALID"),
    ]
    for provider, account_id, space_config, code in cases:
        space_input = {"name": unique("s"), "provider": provider, "config": space_config}
        if account_id is not None:
            space_input["cloudAccountId"] = account_id
        payload = await register(org, space_input)
        assert error_fields(payload) == {(("input", "cloudAccountId"), code)}, (provider, code)
    assert await space_ids(org) == []


async def test_account_scope_must_match_the_config(org: Org) -> None:
    gcp = await create_cloud_account(org.admin, "GCP")
    await grant_cluster_access(org.admin, gcp["id"], "gke-1", "europe-west1")
    config = {"clusterName": "gke-1", "region": "europe-west1", "projectId": "another-project"}
    payload = await register(
        org, {"name": unique("s"), "provider": "GCP", "cloudAccountId": gcp["id"], "config": config}
    )
    assert error_fields(payload) == {(("input", "config", "projectId"), "INVALID")}


async def test_cloud_space_needs_a_grant_for_its_cluster(org: Org) -> None:
    account = await create_cloud_account(org.admin, "AWS")
    await grant_cluster_access(org.admin, account["id"], "eks-1", "eu-west-1")
    space_input = {
        "name": unique("s"),
        "provider": "AWS",
        "cloudAccountId": account["id"],
        "config": cloud_config("AWS", "eks-1", "us-east-1"),  # granted in another region only
    }
    refused = await register(org, space_input)
    assert error_fields(refused) == {(("input", "config", "clusterName"), "PRECONDITION_FAILED")}
    assert await space_ids(org) == []

    await grant_cluster_access(org.admin, account["id"], "eks-1", "us-east-1")
    registered = succeeded(await register(org, space_input))
    assert await space_ids(org) == [registered["space"]["id"]]


async def test_validation_errors_of_one_call_come_back_together(org: Org) -> None:
    payload = await register(
        org,
        {
            "name": "not a name!",
            "provider": "AZURE",
            "cloudAccountId": "ca_" + "0" * 30,
            "config": {
                "clusterName": "aks/1",
                "subscriptionId": "not-a-uuid",
                "server": "https://127.0.0.1:6443",
            },
        },
    )
    assert error_fields(payload) == {
        (("input", "name"), "INVALID"),
        (("input", "cloudAccountId"), "NOT_FOUND"),
        (("input", "config", "clusterName"), "INVALID"),
        (("input", "config", "resourceGroup"), "INVALID"),
        (("input", "config", "subscriptionId"), "INVALID"),
        (("input", "config", "server"), "INVALID"),
    }


async def test_names_and_clusters_are_unique_among_registered_spaces(org: Org) -> None:
    account = await create_cloud_account(org.admin, "AWS")
    first = await register_cloud_space(
        org.admin, "AWS", account_id=account["id"], cluster_name="c1"
    )
    await grant_cluster_access(org.admin, account["id"], "c2")

    same_name = await register(
        org,
        {
            "name": first["name"],
            "provider": "AWS",
            "cloudAccountId": account["id"],
            "config": cloud_config("AWS", "c2"),
        },
    )
    assert error_fields(same_name) == {(("input", "name"), "CONFLICT")}
    same_cluster = await register(
        org,
        {
            "name": unique("s"),
            "provider": "AWS",
            "cloudAccountId": account["id"],
            "config": cloud_config("AWS", "c1"),
        },
    )
    assert error_fields(same_cluster) == {(("input", "config", "clusterName"), "CONFLICT")}

    generic = await register_generic_space(org.editor)
    # Scheme and host are case-insensitive; the path is not.
    scheme_and_host, path = generic["config"]["server"].rsplit("/", 1)
    same_server = await register(
        org,
        {
            "name": unique("s"),
            "provider": "GENERIC",
            "config": generic_config(server=f"{scheme_and_host.upper()}/{path}"),
        },
    )
    assert error_fields(same_server) == {(("input", "config", "server"), "CONFLICT")}
    assert sorted(await space_ids(org)) == sorted([first["id"], generic["id"]])


async def test_the_https_default_port_names_the_same_cluster(org: Org) -> None:
    path = unique("c")
    explicit = await register_generic_space(
        org.editor, server=f"https://cluster.example:443/{path}"
    )
    assert explicit["config"]["server"] == f"https://cluster.example/{path}"
    again = await register(
        org,
        {
            "name": unique("s"),
            "provider": "GENERIC",
            "config": generic_config(server=f"https://cluster.example/{path}"),
        },
    )
    assert error_fields(again) == {(("input", "config", "server"), "CONFLICT")}


async def test_names_are_per_org(org: Org, other_org: Org) -> None:
    name = unique("shared")
    server = f"https://127.0.0.1:6443/{unique('c')}"
    await register_generic_space(org.editor, name=name, server=server)
    await register_generic_space(other_org.editor, name=name, server=server)


async def test_synthetic_space_says_so(org: Org) -> None:
    space = await register_generic_space(org.editor, synthetic=True)
    assert space["synthetic"] is True


# -- reads -----------------------------------------------------------------


async def test_spaces_page_with_cursors(org: Org) -> None:
    made = [(await register_generic_space(org.editor))["id"] for _ in range(3)]
    first = (await org.viewer.data(SPACES, {"first": 2}))["spaces"]
    assert first["totalCount"] == 3
    assert first["pageInfo"] == {"hasNextPage": True, "endCursor": first["edges"][1]["cursor"]}
    assert [e["node"]["id"] for e in first["edges"]] == made[:2]
    assert [n["id"] for n in first["nodes"]] == made[:2]

    rest = (await org.viewer.data(SPACES, {"first": 2, "after": first["pageInfo"]["endCursor"]}))[
        "spaces"
    ]
    assert [n["id"] for n in rest["nodes"]] == made[2:]
    assert rest["pageInfo"]["hasNextPage"] is False
    assert rest["totalCount"] == 3
    everything = (await org.viewer.data(SPACES))["spaces"]
    assert [n["id"] for n in everything["nodes"]] == made


async def test_empty_page_has_no_end_cursor(org: Org) -> None:
    data = await org.viewer.data(SPACES)
    assert data["spaces"] == {
        "totalCount": 0,
        "pageInfo": {"hasNextPage": False, "endCursor": None},
        "edges": [],
        "nodes": [],
    }


@pytest.mark.parametrize(
    "arguments", [{"first": 101}, {"first": 0}, {"after": "bm90LWFuLWlk"}, {"after": "%%%"}]
)
async def test_bad_page_arguments_are_bad_user_input(org: Org, arguments: dict[str, Any]) -> None:
    response = await org.viewer.call(SPACES, arguments)
    assert top_level_codes(response) == ["BAD_USER_INPUT"]


async def test_filters_by_provider_status_and_deregistration(org: Org) -> None:
    aws = await register_cloud_space(org.admin, "AWS", registrar=org.editor)
    generic = await register_generic_space(org.editor)
    held = await register_generic_space(org.editor)
    await set_space_status(org.editor, held["id"], "INACTIVE")
    gone = await register_generic_space(org.editor)
    await deregister_space(org.admin, gone["id"])

    # The EKS cluster answers its first probe (with a minted token); the GENERIC ones cannot.
    deadline = asyncio.get_running_loop().time() + 20
    while await space_ids(org, {"status": ["ACTIVE"]}) != [aws["id"]]:
        assert asyncio.get_running_loop().time() < deadline, "the EKS space never became ACTIVE"
        await asyncio.sleep(0.1)

    assert await space_ids(org) == [aws["id"], generic["id"], held["id"]]
    assert await space_ids(org, {"provider": "AWS"}) == [aws["id"]]
    assert await space_ids(org, {"provider": "GENERIC"}) == [generic["id"], held["id"]]
    assert await space_ids(org, {"status": ["UNKNOWN"]}) == [generic["id"]]
    assert await space_ids(org, {"status": ["INACTIVE"]}) == [held["id"]]
    assert await space_ids(org, {"status": ["ACTIVE", "INACTIVE"]}) == [aws["id"], held["id"]]
    assert await space_ids(org, {"includeDeregistered": True}) == [
        aws["id"],
        generic["id"],
        held["id"],
        gone["id"],
    ]
    assert await space_ids(org, {"includeDeregistered": False}) == await space_ids(org)
    counted = await org.viewer.data(SPACES, {"filter": {"provider": "GENERIC"}})
    assert counted["spaces"]["totalCount"] == 2


async def test_picker_excludes_synthetic_unprobed_held_and_deregistered_spaces(org: Org) -> None:
    fresh = await register_generic_space(org.editor)
    synthetic = await register_generic_space(org.editor, synthetic=True)
    held = await register_generic_space(org.editor)
    await set_space_status(org.editor, held["id"], "INACTIVE")
    gone = await register_generic_space(org.editor)
    await deregister_space(org.admin, gone["id"])

    assert await space_ids(org, {"scalable": True}) == []
    assert await space_ids(org, {"scalable": True, "includeDeregistered": True}) == []
    assert await space_ids(org, {"scalable": False}) == [fresh["id"], synthetic["id"], held["id"]]


async def test_unknown_foreign_and_other_kinds_of_ids_read_as_null(
    org: Org, other_org: Org
) -> None:
    foreign = await register_generic_space(other_org.editor)
    mine = await register_generic_space(org.editor)
    environment = await create_environment(org.editor, mine["id"])
    for space_id in (foreign["id"], "spc_" + "0" * 30, environment["id"], "x"):
        data = await org.viewer.data("query($id: ID!) { space(id: $id) { id } }", {"id": space_id})
        assert data["space"] is None, space_id
    node = await org.viewer.data("query($id: ID!) { node(id: $id) { id } }", {"id": foreign["id"]})
    assert node["node"] is None


# -- the operator hold -----------------------------------------------------


async def test_hold_and_release(org: Org) -> None:
    space = await register_generic_space(org.editor)
    held = await set_space_status(org.editor, space["id"], "INACTIVE")
    assert (held["held"], held["status"]) == (True, "INACTIVE")
    read = await read_space(org, space["id"])
    assert (read["held"], read["status"]) == (True, "INACTIVE")
    newest = read["statusEvents"][0]
    assert (newest["previous"], newest["status"], newest["reason"]) == (
        "UNKNOWN",
        "INACTIVE",
        "operator hold",
    )

    again = await set_space_status(org.editor, space["id"], "INACTIVE")
    assert again["held"] is True
    assert len((await read_space(org, space["id"]))["statusEvents"]) == 2, (
        "holding twice is a no-op"
    )

    released = await set_space_status(org.editor, space["id"], "ACTIVE")
    assert released["held"] is False
    assert released["status"] == "UNKNOWN", "without a probe result the space is UNKNOWN"
    events = (await read_space(org, space["id"]))["statusEvents"]
    assert [(e["previous"], e["status"]) for e in events] == [
        ("INACTIVE", "UNKNOWN"),
        ("UNKNOWN", "INACTIVE"),
        (None, "UNKNOWN"),
    ]


async def test_status_unknown_is_invalid_and_changes_nothing(org: Org) -> None:
    space = await register_generic_space(org.editor)
    await set_space_status(org.editor, space["id"], "INACTIVE")
    payload = await org.editor.mutate(
        SET_SPACE_STATUS, {"input": {"id": space["id"], "status": "UNKNOWN"}}
    )
    assert payload["space"] is None
    assert error_fields(payload) == {(("input", "status"), "INVALID")}
    read = await read_space(org, space["id"])
    assert (read["held"], read["status"], len(read["statusEvents"])) == (True, "INACTIVE", 2)


async def test_bad_status_and_unknown_space_come_back_together(org: Org) -> None:
    payload = await org.editor.mutate(
        SET_SPACE_STATUS, {"input": {"id": "spc_" + "0" * 30, "status": "UNKNOWN"}}
    )
    assert error_fields(payload) == {
        (("input", "id"), "NOT_FOUND"),
        (("input", "status"), "INVALID"),
    }


async def test_status_of_unknown_foreign_or_deregistered_space_is_refused(
    org: Org, other_org: Org
) -> None:
    foreign = await register_generic_space(other_org.editor)
    gone = await register_generic_space(org.editor)
    await deregister_space(org.admin, gone["id"])
    cases = [
        (foreign["id"], "NOT_FOUND"),
        ("spc_" + "0" * 30, "NOT_FOUND"),
        (gone["id"], "PRECONDITION_FAILED"),
    ]
    for space_id, code in cases:
        payload = await org.editor.mutate(
            SET_SPACE_STATUS, {"input": {"id": space_id, "status": "INACTIVE"}}
        )
        assert error_fields(payload) == {(("input", "id"), code)}, space_id
    read = await other_org.viewer.data(SPACE, {"id": foreign["id"]})
    assert read["space"]["held"] is False
    assert (await read_space(org, gone["id"]))["held"] is False


# -- deregistration --------------------------------------------------------


async def test_deregistration_gates_environments_and_removes_the_grant(org: Org) -> None:
    account = await create_cloud_account(org.admin, "AWS")
    space = await register_cloud_space(
        org.admin, "AWS", account_id=account["id"], cluster_name="eks-prod"
    )
    environment = await create_environment(org.editor, space["id"], namespace="shop")
    assert environment["gate"] is None
    access = await org.viewer.data(ACCESS, {"id": account["id"]})
    assert access["cloudAccount"]["clusterAccess"] == [
        {"region": "us-east-1", "clusterName": "eks-prod"}
    ]

    gone = await deregister_space(org.admin, space["id"])
    assert gone["id"] == space["id"]
    assert gone["deregisteredAt"] is not None

    read = await read_space(org, space["id"])
    assert read["deregisteredAt"] == gone["deregisteredAt"]
    assert read["config"] == space["config"]
    assert read["environments"] == [{"id": environment["id"], "gate": "Space deregistered"}]
    assert await space_ids(org) == []
    assert await space_ids(org, {"includeDeregistered": True}) == [space["id"]]
    access = await org.viewer.data(ACCESS, {"id": account["id"]})
    assert access["cloudAccount"]["clusterAccess"] == []

    # The same cluster comes back as a new space (after a new grant); the old environment
    # keeps pointing at the old space, gated, until it is rebound.
    again = await register_cloud_space(
        org.admin, "AWS", account_id=account["id"], cluster_name="eks-prod", name=space["name"]
    )
    assert again["id"] != space["id"]
    assert again["config"] == space["config"]
    env = await org.viewer.data(ENVIRONMENT, {"id": environment["id"]})
    assert env["node"] == {"gate": "Space deregistered", "space": {"id": space["id"]}}
    assert await space_ids(org) == [again["id"]]


async def test_deregistering_twice_is_a_failed_precondition(org: Org) -> None:
    space = await register_generic_space(org.editor)
    first = await deregister_space(org.admin, space["id"])
    payload = await org.admin.mutate(DEREGISTER_SPACE, {"input": {"id": space["id"]}})
    assert payload["space"] is None
    assert error_fields(payload) == {(("input", "id"), "PRECONDITION_FAILED")}
    read = await read_space(org, space["id"])
    assert read["deregisteredAt"] == first["deregisteredAt"]


async def test_deregistering_unknown_or_foreign_space_is_not_found(
    org: Org, other_org: Org
) -> None:
    foreign = await register_generic_space(other_org.editor)
    for space_id in (foreign["id"], "spc_" + "0" * 30):
        payload = await org.admin.mutate(DEREGISTER_SPACE, {"input": {"id": space_id}})
        assert error_fields(payload) == {(("input", "id"), "NOT_FOUND")}
    assert await space_ids(other_org) == [foreign["id"]]


async def test_deregistered_space_frees_its_name_and_server(org: Org) -> None:
    space = await register_generic_space(org.editor)
    await deregister_space(org.admin, space["id"])
    again = await register_generic_space(
        org.editor, name=space["name"], server=space["config"]["server"], ca=ca_pem()
    )
    assert again["id"] != space["id"]
    assert await space_ids(org) == [again["id"]]


async def test_environment_cannot_be_created_on_a_deregistered_space(org: Org) -> None:
    space = await register_generic_space(org.editor)
    await deregister_space(org.admin, space["id"])
    payload = await org.editor.mutate(
        CREATE_ENVIRONMENT,
        {"input": {"name": unique("env"), "spaceId": space["id"], "namespace": "default"}},
    )
    assert error_fields(payload) == {(("input", "spaceId"), "PRECONDITION_FAILED")}


async def test_concurrent_registrations_of_one_cluster_make_one_space(org: Org) -> None:
    space_input = {"name": unique("race"), "provider": "GENERIC", "config": generic_config()}
    payloads = await asyncio.gather(*(register(org, space_input) for _ in range(4)))
    outcomes = sorted("registered" if p["space"] else p["userErrors"][0]["code"] for p in payloads)
    assert outcomes == ["CONFLICT", "CONFLICT", "CONFLICT", "registered"]
    (space_id,) = await space_ids(org)
    events = (await read_space(org, space_id))["statusEvents"]
    assert [(e["previous"], e["reason"]) for e in events] == [(None, "registered")]


async def test_registering_a_space_twice_reports_name_and_cluster(org: Org) -> None:
    space = await register_cloud_space(org.admin, "AWS", registrar=org.editor)
    again = await register(
        org,
        {
            "name": space["name"],
            "provider": "AWS",
            "cloudAccountId": space["cloudAccount"]["id"],
            "config": cloud_config("AWS", space["config"]["clusterName"]),
        },
    )
    assert error_fields(again) == {
        (("input", "name"), "CONFLICT"),
        (("input", "config", "clusterName"), "CONFLICT"),
    }


async def test_a_taken_name_and_a_missing_grant_come_back_together(org: Org) -> None:
    space = await register_cloud_space(org.admin, "AWS", registrar=org.editor)
    payload = await register(
        org,
        {
            "name": space["name"],
            "provider": "AWS",
            "cloudAccountId": space["cloudAccount"]["id"],
            "config": cloud_config("AWS", "never-granted"),
        },
    )
    assert error_fields(payload) == {
        (("input", "name"), "CONFLICT"),
        (("input", "config", "clusterName"), "PRECONDITION_FAILED"),
    }


async def test_a_taken_name_is_reported_with_the_other_faults(org: Org) -> None:
    taken = await register_generic_space(org.editor)
    payload = await register(
        org,
        {
            "name": taken["name"],
            "provider": "GENERIC",
            "config": {**generic_config(), "caCert": "not a certificate"},
        },
    )
    assert error_fields(payload) == {
        (("input", "name"), "CONFLICT"),
        (("input", "config", "caCert"), "INVALID"),
    }
