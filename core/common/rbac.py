"""Roles, the policies they grant, and the caller they belong to.

The three system roles are fixed policy sets; a custom role is an org's own named
set of the same policies. A Viewer carries the policies it resolved to, so every
check is a set lookup whatever kind of role granted them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from core.common.errors import ApiError, UserErrors


class Role(enum.Enum):
    ADMIN = "ADMIN"
    EDITOR = "EDITOR"
    VIEWER = "VIEWER"
    CUSTOM = "CUSTOM"


class CredentialKind(enum.Enum):
    API_TOKEN = "API_TOKEN"
    OIDC = "OIDC"
    # An operator's `spacedock` command on the server's database: the subject is the OS user.
    OS_USER = "OS_USER"


VIEW = (
    "space:view",
    "namespace:view",
    "environment:view",
    "cloudspace:view",
    "cloudaccount:view",
    "advice:view",
    "app:view",
)
EDIT = (
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
)
ADMINISTER = (
    "space:delete",
    "cloudaccount:create",
    "cloudaccount:update",
    "cloudaccount:delete",
    "cloudspace:delete",
    "app:delete",
    "role:manage",
    "token:manage",
    "audit:view",
)

SYSTEM_POLICIES: dict[Role, tuple[str, ...]] = {
    Role.ADMIN: VIEW + EDIT + ADMINISTER,
    Role.EDITOR: VIEW + EDIT,
    Role.VIEWER: VIEW,
}
SYSTEM_ROLES = tuple(SYSTEM_POLICIES)
# Every policy there is; a custom role grants a subset of these.
ALL_POLICIES = SYSTEM_POLICIES[Role.ADMIN]


@dataclass(frozen=True)
class CustomRole:
    """An org's own role, as a token or a JWT claim names it."""

    id: str
    name: str
    policies: tuple[str, ...]


@dataclass(frozen=True)
class Viewer:
    """The authenticated caller: one org, one role, and how it signed in."""

    org_id: str
    org_name: str
    role: Role
    custom_role: CustomRole | None = None
    # The API token's name or the OIDC subject.
    subject: str = "operator"
    credential_kind: CredentialKind = CredentialKind.API_TOKEN
    # The API token behind this caller (None for OIDC and operator commands).
    token_id: str | None = None
    # When the credential stops being valid (token expiry or JWT exp); None: never.
    expires_at: datetime | None = None

    @property
    def role_name(self) -> str:
        return self.custom_role.name if self.custom_role is not None else self.role.value

    @property
    def credential(self) -> str:
        """The credential itself, however its header was spelled: the API token's id, or
        the OIDC subject (of the one configured issuer). What per-credential limits count."""
        if self.token_id is not None:
            return self.token_id
        return f"{self.credential_kind.value}:{self.subject}"

    @property
    def permissions(self) -> tuple[str, ...]:
        if self.custom_role is not None:
            return self.custom_role.policies
        return SYSTEM_POLICIES[self.role]

    def can(self, policy: str) -> bool:
        return policy in self.permissions

    def lacks(self, policies: Iterable[str]) -> tuple[str, ...]:
        """Which of these (known) policies the caller does not hold, in the canonical order."""
        wanted, held = set(policies), set(self.permissions)
        return tuple(policy for policy in ALL_POLICIES if policy in wanted and policy not in held)

    def require(self, policy: str) -> None:
        """For mutations: a missing policy is a FORBIDDEN userError and changes nothing."""
        if not self.can(policy):
            raise UserErrors.one(None, f"Your role {self.role_name} lacks {policy}.", "FORBIDDEN")

    def require_to_read(self, policy: str) -> None:
        """For query fields: a missing policy nulls the field with a top-level FORBIDDEN."""
        if not self.can(policy):
            raise ApiError("FORBIDDEN", f"Your role {self.role_name} lacks {policy}.")
