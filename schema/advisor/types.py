"""Object types of the App Advisor: findings, their connection with counts by severity,
the rules, exemptions, a CloudSpace's advisor state and the changes adviceChanged streams."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Optional

import strawberry
from strawberry import Private

from core.advisor.findings import Change
from core.advisor.model import Family, Rule, Severity
from db import advisor_tables
from resolvers.advisor import fields as advice_reads
from resolvers.advisor.fields import AdvicePage
from schema.common.enums import contract_enum
from schema.common.info import GraphInfo, type_named
from schema.common.relay import Connection, Node
from schema.engine.policies import needs

if TYPE_CHECKING:
    from schema.cloudspaces.types import CloudSpace

LazyCloudSpace = Annotated["CloudSpace", strawberry.lazy("schema.cloudspaces.types")]

contract_enum(
    Severity,
    "How much a finding matters.",
    {
        "CRITICAL": "Broken now, or a hole anyone can use: fix it first.",
        "WARNING": "Will break, or breaks part of the time.",
        "INFO": "Worth doing: saves quota or trouble.",
    },
    "AdviceSeverity",
)
contract_enum(
    Family,
    "What kind of rule found it.",
    {
        "FAILURE": "What is broken now, from status and events; resolves once fixed.",
        "CONFIGURATION": "What will break later; comes with a patch that clears it.",
    },
    "AdviceFamily",
)
contract_enum(
    Change,
    "What happened to a finding.",
    {
        "NEW": "Found for the first time.",
        "CHANGED": "Its severity, evidence, suggestion or patch changed.",
        "RESOLVED": "A run no longer finds it (fixed, gone, or its rule exempted).",
        "REOPENED": "Found again after it had resolved.",
        "DISMISSED": "Someone dismissed it, with a reason.",
        "RESTORED": "Someone lifted its dismissal.",
        "EXPLAINED": "The model's explanation arrived.",
    },
    "AdviceChange",
)


@strawberry.type(description="A rule the App Advisor runs on every READY CloudSpace.")
class AdvisorRule:
    id: str = strawberry.field(description="Stable id (e.g. crash-loop), for exemptions.")
    family: Family = strawberry.field(description="Failures now, or configuration for later.")
    severity: Severity = strawberry.field(
        description="Its usual severity; a finding may be more severe (every replica down)."
    )
    title: str = strawberry.field(description="What it finds, in a few words.")
    reads: str = strawberry.field(description="What it reads in the vCluster.")

    @classmethod
    def of(cls, rule: Rule) -> AdvisorRule:
        return cls(
            id=rule.id,
            family=rule.family,
            severity=rule.severity,
            title=rule.title,
            reads=rule.reads,
        )


@strawberry.type(description="The Kubernetes object a finding is about.")
class AdvisedObject:
    kind: str = strawberry.field(description="Its kind (Deployment, Service, …).")
    namespace: str = strawberry.field(description="Empty for a cluster-scoped object.")
    name: str = strawberry.field(description="Its name.")


@strawberry.type(
    description="What the App Advisor found on one object: one rule, kept across runs by "
    "its fingerprint (the rule and the object) until a run no longer finds it."
)
class AdvisorFinding(Node):
    row: Private[advisor_tables.AdvisorFinding]
    id: strawberry.ID = strawberry.field(description="Opaque id (adv_…).")
    cloud_space_id: strawberry.ID = strawberry.field(description="The CloudSpace it is in.")
    rule_id: str = strawberry.field(description="The rule (advisorRules).")
    family: Family = strawberry.field(description="Failure now, or configuration for later.")
    severity: Severity = strawberry.field(description="How much it matters.")
    object: AdvisedObject = strawberry.field(
        description="The object: a pod's failures are reported on the workload that controls it."
    )
    app_id: strawberry.ID | None = strawberry.field(
        description="The app whose inventory holds the object; null when none does."
    )
    title: str = strawberry.field(description="What is wrong, in a line.")
    evidence: list[str] = strawberry.field(
        description="What was seen: status, conditions, events, with the cluster's words."
    )
    suggestion: str = strawberry.field(description="What to do about it.")
    patch: str | None = strawberry.field(
        description="For configuration rules: a strategic merge patch (YAML) of the object "
        "that clears the finding once applied (`kubectl patch … --patch-file`)."
    )
    explanation: str | None = strawberry.field(
        description="A model's plain-language explanation, when a model is configured "
        "(SPACEDOCK_ADVISOR_MODEL_URL); null until it arrives, and without a model."
    )
    explained_at: datetime | None = strawberry.field(description="When the explanation arrived.")
    fingerprint: str = strawberry.field(description="Digest of the rule and the object.")
    first_seen_at: datetime = strawberry.field(description="The first run that found it.")
    last_seen_at: datetime = strawberry.field(description="The last run that found it.")
    resolved_at: datetime | None = strawberry.field(
        description="When a run no longer found it; null while open. Resolved findings are "
        "kept 7 days."
    )
    dismissed: bool = strawberry.field(
        description="Dismissed findings stay dismissed whatever runs find, until restored."
    )
    dismissed_at: datetime | None = strawberry.field(description="When it was dismissed.")
    dismiss_reason: str | None = strawberry.field(description="Why, as the dismisser said.")
    dismissed_by: str | None = strawberry.field(
        description="Who dismissed it: the token's name or the OIDC subject."
    )

    @classmethod
    def from_row(cls, row: advisor_tables.AdvisorFinding) -> AdvisorFinding:
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            cloud_space_id=strawberry.ID(row.cloud_space_id),
            rule_id=row.rule_id,
            family=Family(row.family),
            severity=Severity(row.severity),
            object=AdvisedObject(kind=row.kind, namespace=row.namespace, name=row.name),
            app_id=None if row.app_id is None else strawberry.ID(row.app_id),
            title=row.title,
            evidence=[str(text) for text, _ in json.loads(row.evidence_json)],
            suggestion=row.suggestion,
            patch=row.patch,
            explanation=row.explanation,
            explained_at=row.explained_at,
            fingerprint=row.fingerprint,
            first_seen_at=row.first_seen_at,
            last_seen_at=row.last_seen_at,
            resolved_at=row.resolved_at,
            dismissed=row.dismissed_at is not None,
            dismissed_at=row.dismissed_at,
            dismiss_reason=row.dismiss_reason,
            dismissed_by=row.dismissed_by,
        )

    @strawberry.field(
        description="The CloudSpace it was found in; null once deleted.",
        extensions=needs("cloudspace:view"),
        graphql_type=Optional[LazyCloudSpace],  # noqa: UP045 (a lazy type has no `|`)
    )
    async def cloud_space(self, info: GraphInfo) -> CloudSpace | None:
        row = await info.context.loaders.cloud_space.load(self.row.cloud_space_id)
        return None if row is None else type_named(info, "CloudSpace").from_row(row)


@strawberry.type(description="Open findings by severity.")
class AdviceCounts:
    critical: int = strawberry.field(description="CRITICAL findings.")
    warning: int = strawberry.field(description="WARNING findings.")
    info: int = strawberry.field(description="INFO findings.")
    total: int = strawberry.field(description="All of them.")

    @classmethod
    def of(cls, counted: dict[str, int]) -> AdviceCounts:
        critical, warning, info = (counted.get(s.value, 0) for s in Severity)
        return cls(critical=critical, warning=warning, info=info, total=critical + warning + info)


@strawberry.type(
    description="A page of a CloudSpace's findings, most severe first, then oldest first; "
    "with counts by severity."
)
class AdvisorFindingConnection(Connection[AdvisorFinding]):
    counts: AdviceCounts = strawberry.field(
        description="The list's findings by severity (every severity, whatever `severity` "
        "filters: a tab strip's numbers)."
    )

    @classmethod
    def of_advice(cls, read: AdvicePage) -> AdvisorFindingConnection:
        nodes = [AdvisorFinding.from_row(row) for row in read.page.items]
        return cls(
            page=read.page,
            nodes=nodes,
            total_count=read.page.total,
            counts=AdviceCounts.of(read.counts),
        )


@strawberry.type(description="A rule the advisor does not run on one CloudSpace.")
class AdvisorExemption:
    row: Private[advisor_tables.AdvisorExemption]
    cloud_space_id: strawberry.ID = strawberry.field(description="The CloudSpace.")
    rule_id: str = strawberry.field(description="The rule not run there.")
    reason: str = strawberry.field(description="Why, as its author said.")
    created_by: str = strawberry.field(description="The token's name or the OIDC subject.")
    created_at: datetime = strawberry.field(description="When it was made.")

    @classmethod
    def from_row(cls, row: advisor_tables.AdvisorExemption) -> AdvisorExemption:
        return cls(
            row=row,
            cloud_space_id=strawberry.ID(row.cloud_space_id),
            rule_id=row.rule_id,
            reason=row.reason,
            created_by=row.created_by,
            created_at=row.created_at,
        )


@strawberry.type(description="How the App Advisor serves a CloudSpace.")
class CloudSpaceAdvisor:
    cloud_space_id: Private[str]
    enabled: bool = strawberry.field(
        description="True once the CloudSpace is READY: every READY CloudSpace is analysed "
        "every SPACEDOCK_ADVISOR_INTERVAL_S, and soon after it changes."
    )
    last_run_at: datetime | None = strawberry.field(description="When the last run merged.")
    last_error: str | None = strawberry.field(
        description="Why the last run could not read the vCluster (retried with backoff)."
    )
    objects_read: int | None = strawberry.field(description="Objects the last run read.")
    complete: bool = strawberry.field(
        description="The last run read every list whole; a list cut at its bound "
        "(SPACEDOCK_ADVISOR_MAX_OBJECTS) resolves nothing."
    )

    @classmethod
    def of(
        cls, cloud_space_id: str, schedule: advisor_tables.AdvisorSchedule | None
    ) -> CloudSpaceAdvisor:
        if schedule is None:
            return cls(
                cloud_space_id=cloud_space_id,
                enabled=False,
                last_run_at=None,
                last_error=None,
                objects_read=None,
                complete=False,
            )
        return cls(
            cloud_space_id=cloud_space_id,
            enabled=True,
            last_run_at=schedule.last_run_at,
            last_error=schedule.last_error,
            objects_read=schedule.objects_read,
            complete=schedule.last_run_at is not None and not schedule.truncated,
        )

    @strawberry.field(description="The rules exempted on this CloudSpace.")
    async def exemptions(self, info: GraphInfo) -> list[AdvisorExemption]:
        rows = await advice_reads.exemptions(info.context, self.cloud_space_id)
        return [AdvisorExemption.from_row(row) for row in rows]


@strawberry.type(description="A change of one finding of a CloudSpace.")
class AdviceEvent:
    cloud_space_id: strawberry.ID = strawberry.field(description="The CloudSpace.")
    change: Change = strawberry.field(description="What happened to the finding.")
    at: datetime = strawberry.field(description="When it happened (the run's or the call's).")
    finding: AdvisorFinding = strawberry.field(description="The finding as it is now.")

    @classmethod
    def of(cls, changed: advice_reads.Changed) -> AdviceEvent:
        return cls(
            cloud_space_id=strawberry.ID(changed.cloud_space_id),
            change=Change(changed.change),
            at=changed.at,
            finding=AdvisorFinding.from_row(changed.finding),
        )
