"""Roles, the policies they grant, and the caller they belong to."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from core.errors import ApiError, UserErrors


class Role(enum.Enum):
    ADMIN = "ADMIN"
    EDITOR = "EDITOR"
    VIEWER = "VIEWER"


VIEW = (
    "space:view",
    "namespace:view",
    "environment:view",
    "cloudspace:view",
    "cloudaccount:view",
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
)
ADMINISTER = (
    "space:delete",
    "cloudaccount:create",
    "cloudaccount:update",
    "cloudaccount:delete",
    "cloudspace:delete",
)

POLICIES: dict[Role, tuple[str, ...]] = {
    Role.VIEWER: VIEW,
    Role.EDITOR: VIEW + EDIT,
    Role.ADMIN: VIEW + EDIT + ADMINISTER,
}


@dataclass(frozen=True)
class Viewer:
    """The authenticated caller: one org, one role."""

    org_id: str
    org_name: str
    role: Role

    @property
    def permissions(self) -> tuple[str, ...]:
        return POLICIES[self.role]

    def can(self, policy: str) -> bool:
        return policy in POLICIES[self.role]

    def require(self, policy: str) -> None:
        """For mutations: a missing policy is a FORBIDDEN userError and changes nothing."""
        if not self.can(policy):
            raise UserErrors.one(None, f"Your role {self.role.value} lacks {policy}.", "FORBIDDEN")

    def require_to_read(self, policy: str) -> None:
        """For query fields: a missing policy nulls the field with a top-level FORBIDDEN."""
        if not self.can(policy):
            raise ApiError("FORBIDDEN", f"Your role {self.role.value} lacks {policy}.")
