"""Payloads of the CloudSpace mutations."""

from __future__ import annotations

import strawberry

from schema.cloudspaces.types import CloudSpace, VCluster
from schema.common.payloads import UserError


@strawberry.type(description="The CloudSpace as changed, or userErrors and nothing changed.")
class CloudSpacePayload:
    cloud_space: CloudSpace | None = strawberry.field(
        description="Null when userErrors is not empty."
    )
    user_errors: list[UserError] = strawberry.field(description="Why nothing changed.")


@strawberry.type(description="The vCluster as changed, or userErrors and nothing changed.")
class VClusterPayload:
    vcluster: VCluster | None = strawberry.field(description="Null when userErrors is not empty.")
    user_errors: list[UserError] = strawberry.field(description="Why nothing changed.")
