"""One canonical form per name (issue 18): names a person reads are stored NFKC-normalised
and told apart ignoring case, and look-alike letters or invisible characters are refused.

Before, `ADMIN` with a zero-width space, a dotted capital I or a Cyrillic A passed as
new roles beside ADMIN, `TOKMGR` beside `tokmgr`, and a space `DEV` beside `dev`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Org
from tests.support import factories as make

CREATE_ROLE = f"""
mutation($input: CreateRoleInput!) {{
  createRole(input: $input) {{ role {{ id name }} {make.USER_ERRORS} }}
}}"""
ROLES = "{ roles { name } }"
FULLWIDTH_ADMIN = "\uff21\uff24\uff2d\uff29\uff2e"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


async def create_role(org: Org, name: str) -> dict[str, Any]:
    variables = {"name": name, "policies": ["space:view"]}
    payload: dict[str, Any] = await org.admin.mutate(CREATE_ROLE, {"input": variables})
    return payload


@pytest.mark.parametrize(
    ("name", "code"),
    [
        (FULLWIDTH_ADMIN, "CONFLICT"),  # NFKC: ADMIN, a system role's name
        ("admin", "CONFLICT"),
        ("ADM\u0130N", "INVALID"),  # a dotted capital I
        ("\u0410DMIN", "INVALID"),  # a Cyrillic A
        ("ADMIN\u200b", "INVALID"),  # a zero-width space
        ("\u202eNIMDA", "INVALID"),  # a right-to-left override
        ("ops  team", "INVALID"),  # two spaces look like one
    ],
    ids=["fullwidth", "lowercase", "dotted-I", "cyrillic-A", "zero-width", "rtl", "two-spaces"],
)
async def test_a_role_name_that_reads_as_another_is_refused(org: Org, name: str, code: str) -> None:
    before = await org.admin.data(ROLES)
    payload = await create_role(org, name)
    assert payload["role"] is None
    assert make.error_fields(payload) == {(("input", "name"), code)}
    assert await org.admin.data(ROLES) == before


async def test_custom_role_names_differing_only_in_case_or_form_are_one(org: Org) -> None:
    made = make.succeeded(await create_role(org, "TOKMGR"))["role"]
    for same in ("tokmgr", "TokMgr", "\uff54\uff4f\uff4b\uff4d\uff47\uff52"):  # fullwidth too
        payload = await create_role(org, same)
        assert make.error_fields(payload) == {(("input", "name"), "CONFLICT")}
        assert "'TOKMGR'" in payload["userErrors"][0]["message"], "names the one in use"
    # A fullwidth name is stored as the plain letters it stands for.
    stored = make.succeeded(await create_role(org, "\uff4f\uff50\uff53-team"))["role"]
    assert stored["name"] == "ops-team"
    assert made["name"] == "TOKMGR", "otherwise kept as typed"
    # SSO groups and team names keep working.
    for name in ("acme:platform", "ci deploys", "team.a_b@example/x"):
        assert make.succeeded(await create_role(org, name))["role"]["name"] == name


async def test_spaces_environments_and_accounts_differing_only_in_case_are_one(
    org: Org,
) -> None:
    space = await make.register_generic_space(org.admin, name="dev")
    for same in ("DEV", "Dev", "\uff24\uff25\uff36"):
        payload = await org.admin.mutate(
            make.REGISTER_SPACE,
            {"input": {"name": same, "provider": "GENERIC", "config": make.generic_config()}},
        )
        assert make.error_fields(payload) == {(("input", "name"), "CONFLICT")}
    # Only live spaces hold their name: once `dev` is deregistered, `DEV` may be registered.
    await make.deregister_space(org.admin, space["id"])
    assert (await make.register_generic_space(org.admin, name="DEV"))["name"] == "DEV"

    live = await make.register_generic_space(org.admin)
    await make.create_environment(org.admin, live["id"], name="Prod")
    environment = await org.admin.mutate(
        make.CREATE_ENVIRONMENT,
        {"input": {"name": "prod", "spaceId": live["id"], "namespace": "default"}},
    )
    assert make.error_fields(environment) == {(("input", "name"), "CONFLICT")}

    await make.create_cloud_account(org.admin, name="Shared")
    account = await org.admin.mutate(
        make.CREATE_CLOUD_ACCOUNT,
        {
            "input": {
                "name": "SHARED",
                "provider": "AWS",
                "credentials": make.credentials_for("AWS"),
            }
        },
    )
    assert make.error_fields(account) == {(("input", "name"), "CONFLICT")}
