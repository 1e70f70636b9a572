"""Custom roles: an org's named sets of policies, beside the three fixed system roles.

System roles are listed with their names as ids and can never be changed; custom
ones hold only policies that exist, and cannot be deleted while a token uses them.

Escalation is impossible by construction: a caller grants only policies it holds. A
role it creates or updates (its own included) holds only such policies, a role that
grants more than the caller holds is out of its reach (no update, no delete), and a
token it mints or revokes (core.access.tokens) has a role within its own. So `role:manage`
and `token:manage`, alone or together, never reach beyond the caller's own set. The
operator (`spacedock token create`, an ADMIN of the org) is not limited.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from core.common import names
from core.common.errors import Problems, UserErrors
from core.common.ids import kind_of, new_id
from core.common.rbac import ALL_POLICIES, SYSTEM_POLICIES, SYSTEM_ROLES, CustomRole, Role, Viewer
from core.common.services import Unit
from db import orgs as org_rows
from db import owned
from db.access_tables import RoleDefinition

MANAGE = "role:manage"
# A custom role may not be named like a system role in any case or form (fullwidth too).
SYSTEM_NAME_KEYS = frozenset(role.value.casefold() for role in Role)


@dataclass(frozen=True)
class RoleView:
    """A role as the API lists it: system or custom."""

    id: str
    name: str
    system: bool
    policies: tuple[str, ...]


def system_view(role: Role) -> RoleView:
    return RoleView(role.value, role.value, True, SYSTEM_POLICIES[role])


def custom_of(row: RoleDefinition) -> CustomRole:
    return CustomRole(row.id, row.name, tuple(json.loads(row.policies_json)))


def view_of(row: RoleDefinition) -> RoleView:
    return custom_view(custom_of(row))


def custom_view(custom: CustomRole) -> RoleView:
    return RoleView(custom.id, custom.name, False, custom.policies)


def view_for(role: Role, custom: CustomRole | None) -> RoleView:
    return system_view(role) if custom is None else custom_view(custom)


async def roles(unit: Unit, viewer: Viewer) -> list[RoleView]:
    """The system roles, then the org's custom roles, oldest first."""
    custom = await org_rows.roles_of(unit.session, viewer.org_id)
    return [system_view(role) for role in SYSTEM_ROLES] + [view_of(row) for row in custom]


async def resolve(
    unit: Unit, org_id: str, name_or_id: str
) -> tuple[Role, CustomRole | None] | None:
    """A system role by name or a custom role of the org by id (or by name, for JWT claims)."""
    if name_or_id in Role.__members__ and name_or_id != Role.CUSTOM.value:
        return Role(name_or_id), None
    if kind_of(name_or_id) == "RoleDefinition":
        row = await owned.by_id(unit.session, RoleDefinition, org_id, name_or_id)
    else:
        row = await owned.by_name(unit.session, RoleDefinition, org_id, name_or_id)
    return None if row is None else (Role.CUSTOM, custom_of(row))


def require_within(viewer: Viewer, role: RoleView, field: Sequence[str], doing: str) -> None:
    """FORBIDDEN on `field` unless the caller holds every policy of `role`; `doing` names
    the act ("Changing a role")."""
    lacking = viewer.lacks(role.policies)
    if lacking:
        raise UserErrors.one(
            field,
            f"The role {role.name} grants {', '.join(lacking)}, which your role "
            f"{viewer.role_name} lacks: {doing} is limited to roles within your own policies.",
            "FORBIDDEN",
        )


def _granted(problems: Problems, viewer: Viewer, policies: tuple[str, ...]) -> None:
    """FORBIDDEN on `policies` for each one the caller does not hold itself."""
    lacking = viewer.lacks(policies)
    if lacking:
        problems.add(
            ("policies",),
            f"Your role {viewer.role_name} lacks {', '.join(lacking)}: a role may grant only "
            "policies you hold.",
            "FORBIDDEN",
        )


def _checked_policies(problems: Problems, policies: Sequence[str]) -> tuple[str, ...]:
    unknown = sorted(set(policies) - set(ALL_POLICIES))
    if unknown:
        problems.add(
            ("policies",),
            f"Unknown policies: {', '.join(unknown)}. Known: {', '.join(ALL_POLICIES)}.",
        )
    if not policies:
        problems.add(("policies",), "A role needs at least one policy.")
    # Listed in the canonical order, once each, whatever order the caller used.
    return tuple(policy for policy in ALL_POLICIES if policy in set(policies))


async def create(unit: Unit, viewer: Viewer, name: str, policies: Sequence[str]) -> RoleView:
    viewer.require(MANAGE)
    problems = Problems("input")
    name = names.canonical(name).strip(" ")
    if names.name_key(name) in SYSTEM_NAME_KEYS:
        problems.add(("name",), f"{name} is a system role's name.", "CONFLICT")
    else:
        name = await names.check_new_name(
            problems,
            name,
            lambda key: owned.by_name_key(unit.session, RoleDefinition, viewer.org_id, key),
            "a role",
            names.role_name_problem,
        )
    checked = _checked_policies(problems, policies)
    _granted(problems, viewer, checked)
    problems.raise_if_any()
    row = RoleDefinition(
        id=new_id("role"),
        org_id=viewer.org_id,
        name=name,
        name_key=names.name_key(name),
        policies_json=json.dumps(list(checked)),
        created_at=unit.now,
    )
    await owned.add(unit.session, row)
    return view_of(row)


async def _custom_row(unit: Unit, viewer: Viewer, role_id: str) -> RoleDefinition:
    if role_id in Role.__members__:
        raise UserErrors.one(
            ("input", "id"), f"{role_id} is a system role and cannot be changed.", "INVALID"
        )
    row = await owned.by_id(unit.session, RoleDefinition, viewer.org_id, role_id)
    if row is None:
        raise UserErrors.one(("input", "id"), "No such role.", "NOT_FOUND")
    return row


async def update(unit: Unit, viewer: Viewer, role_id: str, policies: Sequence[str]) -> RoleView:
    viewer.require(MANAGE)
    row = await _custom_row(unit, viewer, role_id)
    require_within(viewer, view_of(row), ("input", "id"), "Changing a role")
    problems = Problems("input")
    checked = _checked_policies(problems, policies)
    _granted(problems, viewer, checked)
    problems.raise_if_any()
    row.policies_json = json.dumps(list(checked))
    await owned.add(unit.session, row)
    unit.credentials_changed = True  # tokens holding the role get the new policies at once
    return view_of(row)


async def delete(unit: Unit, viewer: Viewer, role_id: str) -> str:
    viewer.require(MANAGE)
    row = await _custom_row(unit, viewer, role_id)
    require_within(viewer, view_of(row), ("input", "id"), "Deleting a role")
    if await org_rows.role_in_use(unit.session, row.id):
        raise UserErrors.one(
            ("input", "id"),
            f"Tokens still use the role {row.name}; revoke them first.",
            "PRECONDITION_FAILED",
        )
    await org_rows.detach_revoked_tokens(unit.session, row.id)
    await owned.remove(unit.session, row)
    unit.credentials_changed = True
    return row.id
