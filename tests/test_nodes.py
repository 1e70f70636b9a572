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
