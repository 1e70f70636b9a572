"""The App Advisor's part of the Query root."""

from __future__ import annotations

import strawberry

from resolvers.advisor import fields as advice
from schema.advisor.types import AdvisorRule
from schema.common.info import GraphInfo


@strawberry.type
class AdvisorQuery:
    @strawberry.field(
        description="Requires advice:view. Every rule the App Advisor runs, with its severity "
        "and what it reads."
    )
    def advisor_rules(self, info: GraphInfo) -> list[AdvisorRule]:
        advice.require_view(info.context)
        return [AdvisorRule.of(rule) for rule in advice.rules()]
