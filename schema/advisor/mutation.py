"""The App Advisor's part of the Mutation root."""

from __future__ import annotations

from typing import Annotated

import strawberry

from resolvers.advisor import fields as advice
from schema.advisor.inputs import (
    DismissFindingInput,
    ExemptAdvisorRuleInput,
    RemoveAdvisorExemptionInput,
    RestoreFindingInput,
)
from schema.advisor.payloads import AdvisorExemptionPayload, AdvisorFindingPayload
from schema.advisor.types import AdvisorExemption, AdvisorFinding
from schema.common.info import GraphInfo
from schema.common.payloads import payload
from schema.engine.arguments import INPUT


@strawberry.type
class AdvisorMutation:
    @strawberry.mutation(
        description="Requires advice:manage. Dismisses a finding with a reason: it stays "
        "dismissed (hidden from `advice` unless includeDismissed) whatever runs find."
    )
    async def dismiss_finding(
        self, info: GraphInfo, input: Annotated[DismissFindingInput, INPUT]
    ) -> AdvisorFindingPayload:
        outcome = await advice.dismiss(info.context, input.id, input.reason)
        return payload(AdvisorFindingPayload, "finding", outcome, AdvisorFinding.from_row)

    @strawberry.mutation(
        description="Requires advice:manage. Lifts a dismissal; PRECONDITION_FAILED when the "
        "finding is not dismissed."
    )
    async def restore_finding(
        self, info: GraphInfo, input: Annotated[RestoreFindingInput, INPUT]
    ) -> AdvisorFindingPayload:
        outcome = await advice.restore(info.context, input.id, input.reason)
        return payload(AdvisorFindingPayload, "finding", outcome, AdvisorFinding.from_row)

    @strawberry.mutation(
        description="Requires advice:manage. The rule no longer runs on the CloudSpace; its "
        "open findings resolve at once. Exempting a rule twice keeps the first reason."
    )
    async def exempt_advisor_rule(
        self, info: GraphInfo, input: Annotated[ExemptAdvisorRuleInput, INPUT]
    ) -> AdvisorExemptionPayload:
        outcome = await advice.exempt(
            info.context, input.cloud_space_id, input.rule_id, input.reason
        )
        return payload(AdvisorExemptionPayload, "exemption", outcome, AdvisorExemption.from_row)

    @strawberry.mutation(
        description="Requires advice:manage. The rule runs on the CloudSpace again, from a run "
        "that starts now."
    )
    async def remove_advisor_exemption(
        self, info: GraphInfo, input: Annotated[RemoveAdvisorExemptionInput, INPUT]
    ) -> AdvisorExemptionPayload:
        outcome = await advice.lift(info.context, input.cloud_space_id, input.rule_id)
        return payload(AdvisorExemptionPayload, "exemption", outcome, AdvisorExemption.from_row)
