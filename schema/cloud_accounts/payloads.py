"""Payloads of the cloud account mutations."""

from __future__ import annotations

import strawberry

from schema.cloud_accounts.types import CloudAccount, ClusterAccess
from schema.common.payloads import UserError


@strawberry.type(description="The result of a mutation: the object, or userErrors.")
class CloudAccountPayload:
    cloud_account: CloudAccount | None = strawberry.field(
        description="The account created or changed; null with userErrors."
    )
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )


@strawberry.type(description="The result of a mutation: the object, or userErrors.")
class ClusterAccessPayload:
    cluster_access: ClusterAccess | None = strawberry.field(
        description="The access granted or revoked; null with userErrors."
    )
    user_errors: list[UserError] = strawberry.field(
        description="Every problem with the call; empty when it succeeded."
    )
