"""Custom roles and the API token lifecycle, through the API as a team's admin uses them.

Tokens: the secret shows once, expiry and revocation refuse at once, lastUsedAt is
not rewritten on every request. Roles: system roles are listed and immutable,
unknown policies are INVALID, a role in use cannot be deleted, and a custom role
grants exactly its policies. No org sees or touches another's roles or tokens.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import Org
from tests.support import factories as make
from tests.support.graphql import GraphQL
from tests.support.server import Server

ROLE = "id name system policies"
TOKEN = f"id name createdAt expiresAt lastUsedAt revokedAt role {{ {ROLE} }}"
CREATE_TOKEN = f"""
mutation($input: CreateApiTokenInput!) {{
  createApiToken(input: $input) {{ token apiToken {{ {TOKEN} }} {make.USER_ERRORS} }}
}}"""
REVOKE_TOKEN = f"""
mutation($id: ID!) {{
  revokeApiToken(input: {{id: $id}}) {{ apiToken {{ {TOKEN} }} {make.USER_ERRORS} }}
}}"""
TOKENS = f"""
query($includeRevoked: Boolean) {{
  apiTokens(first: 100, includeRevoked: $includeRevoked) {{ totalCount nodes {{ {TOKEN} }} }}
}}"""
CREATE_ROLE = f"""
mutation($input: CreateRoleInput!) {{
  createRole(input: $input) {{ role {{ {ROLE} }} {make.USER_ERRORS} }}
}}"""
UPDATE_ROLE = f"""
mutation($input: UpdateRoleInput!) {{
  updateRole(input: $input) {{ role {{ {ROLE} }} {make.USER_ERRORS} }}
}}"""
DELETE_ROLE = f"""
mutation($id: ID!) {{ deleteRole(input: {{id: $id}}) {{ deletedId {make.USER_ERRORS} }} }}"""
ROLES = f"{{ roles {{ {ROLE} }} }}"
WHO = "{ viewer { role subject credentialKind permissions customRole { id name } } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


async def create_token(
    admin: GraphQL, role: str, name: str | None = None, days: int | None = None
) -> tuple[dict[str, Any], GraphQL]:
    variables = {"name": name or make.unique("tok"), "role": role, "expiresInDays": days}
    payload = make.succeeded(await admin.mutate(CREATE_TOKEN, {"input": variables}))
    return payload["apiToken"], GraphQL(admin.url, admin.ws_url, payload["token"])


async def create_role(admin: GraphQL, *policies: str) -> dict[str, Any]:
    variables = {"name": make.unique("role"), "policies": list(policies)}
    role: dict[str, Any] = make.succeeded(await admin.mutate(CREATE_ROLE, {"input": variables}))[
        "role"
    ]
    return role


async def tokens_of(admin: GraphQL, include_revoked: bool = False) -> dict[str, dict[str, Any]]:
    found = await admin.data(TOKENS, {"includeRevoked": include_revoked})
    return {token["id"]: token for token in found["apiTokens"]["nodes"]}


# -- tokens ---------------------------------------------------------------------------


async def test_a_token_made_through_the_api_works_and_its_secret_shows_once(org: Org) -> None:
    token, caller = await create_token(org.admin, "EDITOR", "ci deploys", days=30)
    assert token["role"] == {
        "id": "EDITOR",
        "name": "EDITOR",
        "system": True,
        "policies": token["role"]["policies"],
    }
    created = datetime.fromisoformat(token["createdAt"])
    expires = datetime.fromisoformat(token["expiresAt"])
    assert (expires - created).days == 30
    assert token["lastUsedAt"] is None and token["revokedAt"] is None

    who = (await caller.data(WHO))["viewer"]
    assert who["role"] == "EDITOR"
    assert who["subject"] == "ci deploys"
    assert who["credentialKind"] == "API_TOKEN"
    assert who["customRole"] is None

    listed = await tokens_of(org.admin)
    assert listed[token["id"]]["name"] == "ci deploys"
    assert caller.token is not None and caller.token not in str(listed), "secret shown once"


async def test_last_used_at_is_written_once_a_minute_not_per_request(org: Org) -> None:
    token, caller = await create_token(org.admin, "VIEWER")
    await caller.data(WHO)
    first = (await tokens_of(org.admin))[token["id"]]["lastUsedAt"]
    assert first is not None
    for _ in range(3):
        await caller.data(WHO)
    assert (await tokens_of(org.admin))[token["id"]]["lastUsedAt"] == first


async def test_a_revoked_token_is_refused_at_once_and_hidden_unless_asked(org: Org) -> None:
    token, caller = await create_token(org.admin, "VIEWER")
    assert (await caller.post(WHO))[0] == 200
    payload = make.succeeded(await org.admin.mutate(REVOKE_TOKEN, {"id": token["id"]}))
    revoked_at = payload["apiToken"]["revokedAt"]
    assert revoked_at is not None

    status, body = await caller.post(WHO)
    assert status == 401
    assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert "revoked" in body["errors"][0]["message"]
    assert caller.token is not None and caller.token not in body["errors"][0]["message"]

    assert token["id"] not in await tokens_of(org.admin)
    assert (await tokens_of(org.admin, include_revoked=True))[token["id"]][
        "revokedAt"
    ] == revoked_at
    again = make.succeeded(await org.admin.mutate(REVOKE_TOKEN, {"id": token["id"]}))
    assert again["apiToken"]["revokedAt"] == revoked_at, "revoking twice keeps the first time"


async def test_bad_token_inputs_are_reported_together(org: Org) -> None:
    variables = {"name": "", "role": "OWNER", "expiresInDays": 0}
    payload = await org.admin.mutate(CREATE_TOKEN, {"input": variables})
    assert payload["token"] is None and payload["apiToken"] is None
    assert make.error_fields(payload) == {
        (("input", "name"), "INVALID"),
        (("input", "role"), "NOT_FOUND"),
        (("input", "expiresInDays"), "INVALID"),
    }


@pytest.mark.parametrize("role", ["editor", "viewer"])
async def test_only_token_managers_see_or_make_tokens(org: Org, role: str) -> None:
    caller = org.as_role(role)
    payload = await caller.mutate(CREATE_TOKEN, {"input": {"name": "x", "role": "ADMIN"}})
    assert [e["code"] for e in payload["userErrors"]] == ["FORBIDDEN"]
    assert "token:manage" in payload["userErrors"][0]["message"]
    response = await caller.call("{ apiTokens { totalCount } roles { id } }")
    assert response["data"] is None or response["data"].get("apiTokens") is None
    assert {e["extensions"]["code"] for e in response["errors"]} == {"FORBIDDEN"}


async def test_orgs_never_see_or_touch_each_others_tokens_and_roles(
    org: Org, other_org: Org
) -> None:
    token, _ = await create_token(org.admin, "VIEWER")
    role = await create_role(org.admin, "space:view")
    assert token["id"] not in await tokens_of(other_org.admin, include_revoked=True)
    their_roles = (await other_org.admin.data(ROLES))["roles"]
    assert role["id"] not in {r["id"] for r in their_roles}

    foreign = await other_org.admin.mutate(REVOKE_TOKEN, {"id": token["id"]})
    assert make.error_fields(foreign) == {(("input", "id"), "NOT_FOUND")}
    for document, variables in [
        (UPDATE_ROLE, {"input": {"id": role["id"], "policies": ["space:view"]}}),
        (DELETE_ROLE, {"id": role["id"]}),
        (CREATE_TOKEN, {"input": {"name": "borrowed", "role": role["id"]}}),
    ]:
        refused = await other_org.admin.mutate(document, variables)
        assert {code for _, code in make.error_fields(refused)} == {"NOT_FOUND"}
    assert (await tokens_of(org.admin))[token["id"]]["revokedAt"] is None


async def test_a_token_manager_mints_only_tokens_within_its_own_role(org: Org) -> None:
    """Issue 18: a role holding only token:manage minted an ADMIN token."""
    role = await create_role(org.admin, "token:manage", "space:view")
    _, manager = await create_token(org.admin, role["id"])
    for wider in ("ADMIN", "EDITOR", "VIEWER"):
        payload = await manager.mutate(CREATE_TOKEN, {"input": {"name": "up", "role": wider}})
        assert payload["token"] is None
        [error] = payload["userErrors"]
        assert (error["field"], error["code"]) == (["input", "role"], "FORBIDDEN")
        assert "namespace:view" in error["message"], "the refusal names what the caller lacks"
    assert {t["name"] for t in (await tokens_of(org.admin)).values()}.isdisjoint({"up"})

    token, minted = await create_token(manager, role["id"])
    assert token["role"]["id"] == role["id"]
    assert set((await minted.data(WHO))["viewer"]["permissions"]) == {"token:manage", "space:view"}


# -- roles ----------------------------------------------------------------------------


async def test_system_roles_are_listed_and_immutable(org: Org) -> None:
    roles = {r["name"]: r for r in (await org.admin.data(ROLES))["roles"]}
    assert {"ADMIN", "EDITOR", "VIEWER"} <= set(roles)
    assert all(roles[name]["system"] for name in ("ADMIN", "EDITOR", "VIEWER"))
    assert "audit:view" in roles["ADMIN"]["policies"]
    assert set(roles["VIEWER"]["policies"]) < set(roles["EDITOR"]["policies"])
    changed = await org.admin.mutate(UPDATE_ROLE, {"input": {"id": "VIEWER", "policies": []}})
    assert make.error_fields(changed) == {(("input", "id"), "INVALID")}
    deleted = await org.admin.mutate(DELETE_ROLE, {"id": "ADMIN"})
    assert make.error_fields(deleted) == {(("input", "id"), "INVALID")}
    named = await org.admin.mutate(
        CREATE_ROLE, {"input": {"name": "ADMIN", "policies": ["space:view"]}}
    )
    assert make.error_fields(named) == {(("input", "name"), "CONFLICT")}


async def test_unknown_policies_are_invalid_and_named(org: Org) -> None:
    payload = await org.admin.mutate(
        CREATE_ROLE, {"input": {"name": "ops", "policies": ["space:view", "space:explode"]}}
    )
    assert payload["role"] is None
    [error] = payload["userErrors"]
    assert (error["field"], error["code"]) == (["input", "policies"], "INVALID")
    assert "space:explode" in error["message"]
    assert "ops" not in {r["name"] for r in (await org.admin.data(ROLES))["roles"]}


async def test_a_custom_role_grants_exactly_its_policies_and_follows_updates(
    org: Org,
) -> None:
    role = await create_role(org.admin, "space:view", "space:create")
    assert role["system"] is False
    assert role["policies"] == ["space:view", "space:create"]
    token, caller = await create_token(org.admin, role["id"])
    assert token["role"]["id"] == role["id"]
    who = (await caller.data(WHO))["viewer"]
    assert who["role"] == "CUSTOM"
    assert who["customRole"] == {"id": role["id"], "name": role["name"]}
    assert set(who["permissions"]) == {"space:view", "space:create"}

    # The payload asks only for what the role may view (cloudAccount would be FORBIDDEN).
    register = f"""
    mutation($input: RegisterSpaceInput!) {{
      registerSpace(input: $input) {{ space {{ id name }} {make.USER_ERRORS} }}
    }}"""
    hold = f"""
    mutation($input: SetSpaceStatusInput!) {{
      setSpaceStatus(input: $input) {{ space {{ id held }} {make.USER_ERRORS} }}
    }}"""
    space = make.succeeded(
        await caller.mutate(
            register,
            {
                "input": {
                    "name": make.unique("s"),
                    "provider": "GENERIC",
                    "config": make.generic_config(),
                }
            },
        )
    )["space"]
    held = await caller.mutate(hold, {"input": {"id": space["id"], "status": "INACTIVE"}})
    assert [e["code"] for e in held["userErrors"]] == ["FORBIDDEN"]
    assert role["name"] in held["userErrors"][0]["message"]

    make.succeeded(
        await org.admin.mutate(
            UPDATE_ROLE, {"input": {"id": role["id"], "policies": ["space:view", "space:update"]}}
        )
    )
    held = await caller.mutate(hold, {"input": {"id": space["id"], "status": "INACTIVE"}})
    assert held["userErrors"] == [], "the new policies hold at once"


async def test_a_role_manager_cannot_widen_any_role_its_own_included(org: Org) -> None:
    """Issue 18: a role holding only role:manage added token:manage, audit:view,
    cloudaccount:delete and space:delete to itself with updateRole."""
    role = await create_role(org.admin, "role:manage")
    _, manager = await create_token(org.admin, role["id"])
    for added in ("token:manage", "audit:view", "cloudaccount:delete", "space:delete"):
        payload = await manager.mutate(
            UPDATE_ROLE, {"input": {"id": role["id"], "policies": ["role:manage", added]}}
        )
        [error] = payload["userErrors"]
        assert (error["field"], error["code"]) == (["input", "policies"], "FORBIDDEN")
        assert added in error["message"]
        made = await manager.mutate(
            CREATE_ROLE, {"input": {"name": make.unique("wide"), "policies": [added]}}
        )
        assert make.error_fields(made) == {(("input", "policies"), "FORBIDDEN")}
    assert (await manager.data(WHO))["viewer"]["permissions"] == ["role:manage"]

    # A role above the manager is out of its reach, even to lower it; the admin is not.
    above = await create_role(org.admin, "role:manage", "audit:view")
    lowered = await manager.mutate(
        UPDATE_ROLE, {"input": {"id": above["id"], "policies": ["role:manage"]}}
    )
    assert make.error_fields(lowered) == {(("input", "id"), "FORBIDDEN")}
    deleted = await manager.mutate(DELETE_ROLE, {"id": above["id"]})
    assert make.error_fields(deleted) == {(("input", "id"), "FORBIDDEN")}
    listed = {r["id"]: r for r in (await org.admin.data(ROLES))["roles"]}
    assert listed[above["id"]]["policies"] == ["role:manage", "audit:view"]
    make.succeeded(await org.admin.mutate(DELETE_ROLE, {"id": above["id"]}))


async def test_a_token_manager_cannot_revoke_a_token_above_its_own_role(org: Org) -> None:
    role = await create_role(org.admin, "token:manage")
    _, manager = await create_token(org.admin, role["id"])
    admin_token, _ = await create_token(org.admin, "ADMIN")
    payload = await manager.mutate(REVOKE_TOKEN, {"id": admin_token["id"]})
    assert make.error_fields(payload) == {(("input", "id"), "FORBIDDEN")}
    assert (await tokens_of(org.admin))[admin_token["id"]]["revokedAt"] is None


async def test_a_role_in_use_cannot_be_deleted_until_its_tokens_are_revoked(org: Org) -> None:
    role = await create_role(org.admin, "space:view")
    token, _ = await create_token(org.admin, role["id"])
    refused = await org.admin.mutate(DELETE_ROLE, {"id": role["id"]})
    assert make.error_fields(refused) == {(("input", "id"), "PRECONDITION_FAILED")}
    assert role["id"] in {r["id"] for r in (await org.admin.data(ROLES))["roles"]}

    make.succeeded(await org.admin.mutate(REVOKE_TOKEN, {"id": token["id"]}))
    deleted = make.succeeded(await org.admin.mutate(DELETE_ROLE, {"id": role["id"]}))
    assert deleted["deletedId"] == role["id"]
    assert role["id"] not in {r["id"] for r in (await org.admin.data(ROLES))["roles"]}


async def test_an_expired_token_is_refused(server: Server, org: Org) -> None:
    """Expiry is checked on every request, also while the server holds the verified token
    in memory: a token is refused once its expiresAt has passed, and one already expired
    when first sent is refused too."""
    token, caller = await create_token(org.admin, "VIEWER", days=1)
    expires_at = datetime.now(UTC) + timedelta(seconds=3)
    await set_expiry(server, token["id"], expires_at)
    # Asked without pause until refused, so the server holds a fresh copy when expiry passes.
    deadline = expires_at + timedelta(seconds=15)
    while True:
        sent_at = datetime.now(UTC)
        status, body = await caller.post(WHO)
        if status != 200:
            break
        assert sent_at < expires_at, "served after its expiry"
        assert sent_at < deadline, "never refused"
    assert status == 401
    assert datetime.now(UTC) >= expires_at
    assert "expired" in body["errors"][0]["message"]

    expired, late_caller = await create_token(org.admin, "VIEWER", days=1)
    await set_expiry(server, expired["id"], datetime.now(UTC) - timedelta(days=1))
    status, body = await late_caller.post(WHO)
    assert status == 401
    assert "expired" in body["errors"][0]["message"]


async def set_expiry(server: Server, token_id: str, expires_at: datetime) -> None:
    """Moves a token's expiry, as a shorter lifetime than the API's least (a day) would."""
    import sqlalchemy as sa
    from sqlmodel import col

    from db.access_tables import ApiToken
    from db.engine import Database

    database = Database(server.backend.url)
    try:
        async with database.transaction() as session:
            await session.execute(
                sa.update(ApiToken)
                .where(col(ApiToken.id) == token_id)
                .values(expires_at=expires_at)
            )
    finally:
        await database.dispose()


# -- per-field view policies ----------------------------------------------------------

SPACE_WITH_LINKS = """
{
  spaces(first: 10) {
    nodes { id name cloudAccount { id } environments { id } cloudSpaces { id } namespaces { name } }
  }
}"""


async def test_a_space_view_only_role_sees_spaces_but_no_linked_objects(
    server: Server, org: Org
) -> None:
    space = await make.register_cloud_space(org.admin, "AWS")
    role = await create_role(org.admin, "space:view")
    _, caller = await create_token(org.admin, role["id"])

    response = await caller.call(SPACE_WITH_LINKS)
    assert response["data"] is not None, response["errors"]
    [seen] = [s for s in response["data"]["spaces"]["nodes"] if s["id"] == space["id"]]
    assert seen["name"] == space["name"], "the space itself answers"
    assert seen["cloudAccount"] is None and seen["namespaces"] is None
    assert seen["environments"] == [] and seen["cloudSpaces"] == []
    refused = {tuple(e["path"][-1:]): e for e in response["errors"]}
    for field, policy in [
        ("cloudAccount", "cloudaccount:view"),
        ("environments", "environment:view"),
        ("cloudSpaces", "cloudspace:view"),
        ("namespaces", "namespace:view"),
    ]:
        assert refused[(field,)]["extensions"]["code"] == "FORBIDDEN"
        assert policy in refused[(field,)]["message"]

    payload = await caller.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("s"),
                "provider": "GENERIC",
                "config": make.generic_config(),
            }
        },
    )
    assert [e["code"] for e in payload["userErrors"]] == ["FORBIDDEN"]
    accounts = await caller.call("{ cloudAccounts { totalCount } }")
    assert [e["extensions"]["code"] for e in accounts["errors"]] == ["FORBIDDEN"]

    # The admin, holding every policy, reads the same links without a refusal.
    errors = (await org.admin.call(SPACE_WITH_LINKS))["errors"] or []
    assert "FORBIDDEN" not in {e["extensions"]["code"] for e in errors}


def test_every_nested_field_that_reads_an_object_declares_its_view_policy() -> None:
    """A new field returning a Space, an account, … cannot forget its policy. Roots check
    in their resolvers; payloads answer with the mutation's own policy; edges and
    connections only carry what their (checked) field returned."""
    from graphql import GraphQLObjectType, get_named_type

    from schema.build import schema
    from schema.engine.policies import Needs

    guarded = {
        "Space",
        "CloudAccount",
        "Environment",
        "Namespace",
        "CloudSpace",
        "ClusterAccess",
        "SpaceStatusEvent",
        "SpaceStatusEventConnection",
        "SpaceConnection",
        "CloudSpaceConnection",
        "EnvironmentConnection",
    }
    carriers = ("Query", "Mutation", "Subscription", "Viewer")
    unguarded = []
    for name, kind in schema._schema.type_map.items():
        if not isinstance(kind, GraphQLObjectType) or name in carriers:
            continue
        if name.endswith(("Payload", "Edge", "Connection", "Event")) and name not in (
            "SpaceStatusEvent",
            "CloudSpaceEvent",
        ):
            continue
        for field_name, field in kind.fields.items():
            if get_named_type(field.type).name not in guarded:
                continue
            definition = (field.extensions or {}).get("strawberry-definition")
            if not any(isinstance(e, Needs) for e in getattr(definition, "extensions", [])):
                unguarded.append(f"{name}.{field_name}")
    assert unguarded == [], f"fields without a view policy: {unguarded}"


async def test_a_jwt_where_sso_is_not_configured_is_told_so(server: Server) -> None:
    """Without SPACEDOCK_OIDC_ISSUER a JWT cannot be right; the refusal says that rather
    than "Unknown API token"."""
    jwt_shaped = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJib2IifQ.c2lnbmF0dXJl"
    status, body = await GraphQL(server.url, server.ws_url, jwt_shaped).post(WHO)
    assert status == 401
    [error] = body["errors"]
    assert error["extensions"]["code"] == "UNAUTHENTICATED"
    assert error["message"] == (
        "This looks like a JWT, but SSO is not configured here (SPACEDOCK_OIDC_ISSUER): "
        "send an API token (sdk_…)."
    )
