"""Payloads of the App Advisor's mutations."""

from __future__ import annotations

import strawberry

from schema.advisor.types import AdvisorExemption, AdvisorFinding
from schema.common.payloads import UserError


@strawberry.type(description="The finding as changed, or userErrors and nothing changed.")
class AdvisorFindingPayload:
    finding: AdvisorFinding | None = strawberry.field(
        description="Null when userErrors is not empty."
    )
    user_errors: list[UserError] = strawberry.field(description="Why nothing changed.")


@strawberry.type(description="The exemption made or lifted, or userErrors and nothing changed.")
class AdvisorExemptionPayload:
    exemption: AdvisorExemption | None = strawberry.field(
        description="Null when userErrors is not empty."
    )
    user_errors: list[UserError] = strawberry.field(description="Why nothing changed.")
