"""Inputs of the App Advisor's mutations."""

from __future__ import annotations

import strawberry


@strawberry.input(description="Dismisses a finding: it stays dismissed whatever runs find.")
class DismissFindingInput:
    id: strawberry.ID = strawberry.field(description="The finding (adv_…).")
    reason: str = strawberry.field(description="Why; required, at most 1,000 characters.")


@strawberry.input(description="Lifts a finding's dismissal.")
class RestoreFindingInput:
    id: strawberry.ID = strawberry.field(description="The finding (adv_…).")
    reason: str = strawberry.field(description="Why; required, at most 1,000 characters.")


@strawberry.input(description="Stops running one rule on one CloudSpace.")
class ExemptAdvisorRuleInput:
    cloud_space_id: strawberry.ID = strawberry.field(description="The CloudSpace.")
    rule_id: str = strawberry.field(description="The rule (advisorRules).")
    reason: str = strawberry.field(description="Why; required, at most 1,000 characters.")


@strawberry.input(description="Runs an exempted rule on the CloudSpace again.")
class RemoveAdvisorExemptionInput:
    cloud_space_id: strawberry.ID = strawberry.field(description="The CloudSpace.")
    rule_id: str = strawberry.field(description="The exempted rule.")
