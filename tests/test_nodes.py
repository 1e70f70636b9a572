"""nodes(ids:): a client cache refetches any objects it holds in one request, in the
order asked, with null for ids that are unknown or belong to another org (the two
read the same), and at most 100 ids."""

from __future__ import annotations

from typing import Any

from tests.conftest import Org
from tests.support import factories as make

NODES = """
query($ids: [ID!]!) {
  nodes(ids: $ids) {
    __typename id
    ... on Space { name }
    ... on Environment { name }
    ... on CloudAccount { name }
    ... on Org { name }
  }
}"""


async def nodes(org: Org, ids: list[str]) -> list[dict[str, Any] | None]:
    found: list[dict[str, Any] | None] = (await org.viewer.data(NODES, {"ids": ids}))["nodes"]
    return found


async def test_nodes_resolve_in_the_order_asked_with_null_for_unknown_and_foreign(
    org: Org, other_org: Org
) -> None:
    account = await make.create_cloud_account(org.admin)
    space = await make.register_generic_space(org.editor)
    environment = await make.create_environment(org.editor, space["id"])
    own_org = (await org.viewer.data("{ viewer { org { id } } }"))["viewer"]["org"]["id"]
    theirs = await make.register_generic_space(other_org.editor)
    their_account = await make.create_cloud_account(other_org.admin)
    their_org = (await other_org.viewer.data("{ viewer { org { id } } }"))["viewer"]["org"]["id"]
    unknown_space = space["id"][:-4] + "0000"

    ids = [
        environment["id"],
        theirs["id"],
        space["id"],
        unknown_space,
        account["id"],
        their_account["id"],
        "not-an-id",
        own_org,
        their_org,
        space["id"],
    ]
    found = await nodes(org, ids)
    assert [None if node is None else (node["__typename"], node["id"]) for node in found] == [
        ("Environment", environment["id"]),
        None,
        ("Space", space["id"]),
        None,
        ("CloudAccount", account["id"]),
        None,
        None,
        ("Org", own_org),
        None,
        ("Space", space["id"]),
    ]
    assert found[2] is not None and found[2]["name"] == space["name"]


async def test_an_empty_list_answers_an_empty_list(org: Org) -> None:
    assert await nodes(org, []) == []


async def test_more_than_100_ids_is_bad_user_input(org: Org) -> None:
    space = await make.register_generic_space(org.editor)
    assert len(await nodes(org, [space["id"]] * 100)) == 100
    response = await org.viewer.call(NODES, {"ids": [space["id"]] * 101})
    assert make.top_level_codes(response) == ["BAD_USER_INPUT"]
    assert "at most 100" in response["errors"][0]["message"]


ACCESS_NODES = """
query($ids: [ID!]!) {
  nodes(ids: $ids) {
    __typename id
    ... on ApiToken { name }
    ... on RoleDefinition { name policies }
    ... on AuditEvent { action }
  }
}"""


async def test_tokens_roles_and_audit_events_resolve_for_whoever_manages_them(
    org: Org, other_org: Org
) -> None:
    role = await org.admin.mutate(
        """mutation($input: CreateRoleInput!) {
             createRole(input: $input) { role { id } userErrors { code } } }""",
        {"input": {"name": "space-readers", "policies": ["space:view"]}},
    )
    token = await org.admin.mutate(
        """mutation($input: CreateApiTokenInput!) {
             createApiToken(input: $input) { apiToken { id } userErrors { code } } }""",
        {"input": {"name": "ci", "role": "VIEWER"}},
    )
    [audited] = (
        await org.admin.data(
            '{ auditEvents(first: 1, filter: {action: "createApiToken"}) { nodes { id } } }'
        )
    )["auditEvents"]["nodes"]
    ids = [role["role"]["id"], token["apiToken"]["id"], audited["id"]]

    found = (await org.admin.data(ACCESS_NODES, {"ids": ids}))["nodes"]
    assert [(node["__typename"], node["id"]) for node in found] == [
        ("RoleDefinition", ids[0]),
        ("ApiToken", ids[1]),
        ("AuditEvent", ids[2]),
    ]
    assert found[0]["policies"] == ["space:view"]
    assert found[1]["name"] == "ci"
    assert found[2]["action"] == "createApiToken"

    # Another org's admin reads them as unknown; a viewer lacks the policies to read them.
    assert (await other_org.admin.data(ACCESS_NODES, {"ids": ids}))["nodes"] == [None] * 3
    assert (await org.viewer.data(ACCESS_NODES, {"ids": ids}))["nodes"] == [None] * 3
    response = await org.viewer.call(
        "query($id: ID!) { node(id: $id) { id } }", {"id": token["apiToken"]["id"]}
    )
    assert make.top_level_codes(response) == ["FORBIDDEN"]
