"""Object types of apps: the App, its revisions and their sources, the workloads it runs, and
the events appChanged streams."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import strawberry
from strawberry import Private

from core.advisor.model import Severity
from core.apps import sources
from core.apps.status import workloads_of
from db import app_tables
from resolvers.advisor import fields as advice_fields
from resolvers.apps import reads
from schema.advisor.types import AdvisorFindingConnection
from schema.apps.enums import AppEventKind, AppRevisionState, AppStatus
from schema.cloudspaces.types import CloudSpace
from schema.common.info import GraphInfo
from schema.common.relay import Connection, Node
from schema.engine.arguments import After, First
from schema.engine.policies import needs
from schema.spaces.types import Environment


@strawberry.type(
    description="A Git repository Flux applies from (a GitRepository and a Kustomization)."
)
class GitSource:
    url: str = strawberry.field(description="https://, http:// or ssh:// URL of the repository.")
    branch: str | None = strawberry.field(
        description="The branch followed (main when no ref was given)."
    )
    tag: str | None = strawberry.field(description="The tag checked out.")
    semver: str | None = strawberry.field(description="The newest tag in this semver range.")
    commit: str | None = strawberry.field(description="The commit checked out.")
    path: str = strawberry.field(
        description="The directory applied (plain YAML or a kustomization.yaml)."
    )
    interval: str = strawberry.field(
        description="How often Flux fetches and applies it (Go duration)."
    )


@strawberry.type(description="A Helm chart Flux installs (a HelmRepository and a HelmRelease).")
class HelmSource:
    repository_url: str = strawberry.field(
        description="The chart repository (https://) or OCI registry (oci://)."
    )
    chart: str = strawberry.field(description="The chart's name.")
    version: str = strawberry.field(description="A version or semver range (* for the newest).")
    values: str | None = strawberry.field(description="The values, as YAML, as given.")
    interval: str = strawberry.field(
        description="How often Flux checks for a new chart (Go duration)."
    )


AppSource = Annotated[
    GitSource | HelmSource,
    strawberry.union("AppSource", description="What an app delivers: Git or Helm."),
]


def source_of(text: str) -> GitSource | HelmSource:
    found = sources.from_json(text)
    if isinstance(found, sources.GitSource):
        return GitSource(
            url=found.url,
            branch=found.ref.get("branch"),
            tag=found.tag,
            semver=found.semver,
            commit=found.commit,
            path=found.path,
            interval=found.interval,
        )
    return HelmSource(
        repository_url=found.repository_url,
        chart=found.chart,
        version=found.version,
        values=found.values,
        interval=found.interval,
    )


@strawberry.type(
    description="A workload an app runs, from its Kustomization's or HelmRelease's inventory."
)
class Workload:
    kind: str = strawberry.field(description="Deployment, StatefulSet or DaemonSet.")
    namespace: str = strawberry.field(description="Its namespace in the target.")
    name: str = strawberry.field(description="Its name.")
    ready_replicas: int | None = strawberry.field(
        description="Pods ready now; null when it could not be read."
    )
    desired_replicas: int | None = strawberry.field(description="Pods it asks for.")


@strawberry.type(
    description="One change of an app's source and how its delivery went. Numbered per app; "
    "QUEUED → APPLYING → APPLIED → READY or FAILED, or DEAD_LETTERED."
)
class AppRevision(Node):
    row: Private[app_tables.AppRevision]
    id: strawberry.ID = strawberry.field(description="Opaque id (apprev_…).")
    number: int = strawberry.field(description="1 for the app's first revision, then up by one.")
    state: AppRevisionState = strawberry.field(description="Where its delivery stands.")
    tries: int = strawberry.field(
        description="Tries spent against an unavailable target (at most 3, then DEAD_LETTERED)."
    )
    reason: str | None = strawberry.field(
        description="Why it waits, failed or was dead-lettered, in Flux's or the target's words."
    )
    rollback_of: int | None = strawberry.field(description="The revision rollbackApp copied.")
    created_by: str = strawberry.field(
        description="Who made it (the token's name or OIDC subject)."
    )
    created_at: datetime = strawberry.field(description="When it was made.")
    applied_at: datetime | None = strawberry.field(
        description="When its Flux objects were written."
    )
    finished_at: datetime | None = strawberry.field(
        description="When it became READY, FAILED, DEAD_LETTERED or SUPERSEDED."
    )
    flux_revision: str | None = strawberry.field(
        description="What Flux applied for it: main@sha1:…, a tag, a chart version."
    )

    @classmethod
    def from_row(cls, row: app_tables.AppRevision) -> AppRevision:
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            number=row.number,
            state=AppRevisionState(row.state),
            tries=row.tries,
            reason=row.reason,
            rollback_of=row.rollback_of,
            created_by=row.created_by,
            created_at=row.created_at,
            applied_at=row.applied_at,
            finished_at=row.finished_at,
            flux_revision=row.flux_revision,
        )

    @strawberry.field(description="The source it asks for (credentials are never shown).")
    def source(self) -> AppSource:
        return source_of(self.row.source_json)

    @strawberry.field(description="The app it belongs to; null once the app is deleted.")
    async def app(self, info: GraphInfo) -> App | None:
        row = await reads.revision_app(info.context, self.row)
        return None if row is None else App.from_row(row)


@strawberry.type(description="A page of an app's revisions, newest first.")
class AppRevisionConnection(Connection[AppRevision]):
    pass


@strawberry.type(
    description="A Git or Helm source delivered by Flux into a CloudSpace's vCluster or an "
    "environment's namespace; every change is a revision."
)
class App(Node):
    row: Private[app_tables.App]
    id: strawberry.ID = strawberry.field(description="Opaque id (app_…).")
    name: str = strawberry.field(
        description="A DNS-1123 label of at most 53 characters, unique per target; its Flux "
        "objects are named like it."
    )
    namespace: str = strawberry.field(
        description="Where its Flux objects and workloads go in the target (an environment's namespace)."
    )
    vcluster_name: str | None = strawberry.field(
        description="The CloudSpace's vCluster it runs in."
    )
    suspended: bool = strawberry.field(description="suspendApp: Flux applies no change.")
    has_credential: bool = strawberry.field(
        description="A Git credential is kept for it (sealed; never returned)."
    )
    status: AppStatus = strawberry.field(description="What Flux says, in one vocabulary.")
    status_reason: str | None = strawberry.field(
        description="The reason word of the Flux object that decides the status (e.g. "
        "GitOperationFailed, InvalidChartReference, ReconciliationSucceeded)."
    )
    status_message: str | None = strawberry.field(description="Flux's (or spacedock's) message.")
    status_changed_at: datetime | None = strawberry.field(
        description="When the status last changed."
    )
    last_applied_revision: str | None = strawberry.field(
        description="What Flux last applied: main@sha1:… for Git, the chart version for Helm."
    )
    last_attempted_revision: str | None = strawberry.field(
        description="What Flux last tried to apply."
    )
    last_sync_handled_at: str | None = strawberry.field(
        description="The syncApp request Flux handled last (its requestedAt)."
    )
    created_at: datetime = strawberry.field(description="When it was created.")

    @classmethod
    def from_row(cls, row: app_tables.App) -> App:
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            name=row.name,
            namespace=row.namespace,
            vcluster_name=row.vcluster,
            suspended=row.suspended,
            has_credential=row.credential_ciphertext is not None,
            status=AppStatus(row.status),
            status_reason=row.status_reason,
            status_message=row.status_message,
            status_changed_at=row.status_read_at,
            last_applied_revision=row.last_applied_revision,
            last_attempted_revision=row.last_attempted_revision,
            last_sync_handled_at=row.last_handled_sync_at,
            created_at=row.created_at,
        )

    @strawberry.field(description="The workloads it runs, with their replicas.")
    def workloads(self) -> list[Workload]:
        return [
            Workload(
                kind=w.kind,
                namespace=w.namespace,
                name=w.name,
                ready_replicas=w.ready,
                desired_replicas=w.desired,
            )
            for w in workloads_of(self.row.workloads_json)
        ]

    @strawberry.field(
        description='Why its revisions cannot reach the target now ("Space deregistered", '
        '"CloudSpace deleted", "Space dev is INACTIVE (…)"); null when they can.'
    )
    async def gate(self, info: GraphInfo) -> str | None:
        return await reads.gate(info.context, self.row)

    @strawberry.field(description="The source its newest revision asks for.")
    async def source(self, info: GraphInfo) -> AppSource:
        latest = await reads.latest_revision(info.context, self.row)
        assert latest is not None, "every app has a revision"
        return source_of(latest.source_json)

    @strawberry.field(description="Its newest revision.")
    async def latest_revision(self, info: GraphInfo) -> AppRevision | None:
        latest = await reads.latest_revision(info.context, self.row)
        return None if latest is None else AppRevision.from_row(latest)

    @strawberry.field(description="Its revisions, newest first.")
    async def revisions(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> AppRevisionConnection:
        page = await reads.revisions(info.context, self.row, first, after)
        return AppRevisionConnection.of(page, AppRevision)  # type: ignore[return-value]

    @strawberry.field(
        description="The CloudSpace it runs in (null for an environment's app, or once the "
        "CloudSpace is deleted). Needs cloudspace:view.",
        extensions=needs("cloudspace:view"),
    )
    async def cloud_space(self, info: GraphInfo) -> CloudSpace | None:
        if self.row.cloud_space_id is None:
            return None
        row = await info.context.loaders.cloud_space.load(self.row.cloud_space_id)
        return None if row is None else CloudSpace.from_row(row)

    @strawberry.field(
        description="The environment it runs in (null for a CloudSpace's app). Needs environment:view.",
        extensions=needs("environment:view"),
    )
    async def environment(self, info: GraphInfo) -> Environment | None:
        if self.row.environment_id is None:
            return None
        row = await info.context.loaders.environment.load(self.row.environment_id)
        return None if row is None else Environment.from_row(row)

    @strawberry.field(
        description="Requires advice:view. What the App Advisor found on the objects of its "
        "inventory (what Flux applied for it), most severe first: open findings that are "
        "not dismissed, unless asked otherwise. Empty for an environment's app (the advisor "
        "reads CloudSpaces); a page of apps reads all of theirs in the same statements.",
        extensions=needs("advice:view"),
    )
    async def advice(
        self,
        info: GraphInfo,
        severity: Annotated[
            Severity | None, strawberry.argument(description="Only findings of this severity.")
        ] = None,
        include_resolved: Annotated[
            bool, strawberry.argument(description="Resolved findings too (kept 7 days).")
        ] = False,
        include_dismissed: Annotated[
            bool, strawberry.argument(description="Dismissed findings too.")
        ] = False,
        first: First = None,
        after: After = None,
    ) -> AdvisorFindingConnection | None:
        wanted = advice_fields.wanted(
            None if severity is None else severity.value, None, include_resolved, include_dismissed
        )
        read = await advice_fields.app_page(info.context, self.row, wanted, first, after)
        return AdvisorFindingConnection.of_advice(read)


@strawberry.type(description="A page of apps, oldest first.")
class AppConnection(Connection[App]):
    pass


@strawberry.type(description="A change of an app's status or of one of its revisions.")
class AppEvent:
    row: Private[app_tables.AppEvent]
    kind: AppEventKind = strawberry.field(description="What changed.")
    app_id: strawberry.ID = strawberry.field(description="The app it is about.")
    previous_status: AppStatus | None = strawberry.field(
        description="The status before (STATUS events)."
    )
    status: AppStatus = strawberry.field(description="The app's status at the time.")
    reason: str | None = strawberry.field(
        description="The status reason (STATUS), or the revision's reason (REVISION)."
    )
    message: str | None = strawberry.field(description="The status message (STATUS events).")
    revision_number: int | None = strawberry.field(description="The revision (REVISION events).")
    revision_state: AppRevisionState | None = strawberry.field(
        description="The revision's new state (REVISION events)."
    )
    at: datetime = strawberry.field(description="When it happened.")

    @classmethod
    def from_row(cls, row: app_tables.AppEvent) -> AppEvent:
        return cls(
            row=row,
            kind=AppEventKind(row.kind),
            app_id=strawberry.ID(row.app_id),
            previous_status=None if row.previous_status is None else AppStatus(row.previous_status),
            status=AppStatus(row.status),
            reason=row.reason,
            message=row.message,
            revision_number=row.revision_number,
            revision_state=None
            if row.revision_state is None
            else AppRevisionState(row.revision_state),
            at=row.at,
        )

    @strawberry.field(description="The app as it is now; null once it is deleted.")
    async def app(self, info: GraphInfo) -> App | None:
        row = await info.context.loaders.app.load(self.row.app_id)
        return None if row is None else App.from_row(row)

    @strawberry.field(description="The revision as it is now (REVISION events).")
    async def revision(self, info: GraphInfo) -> AppRevision | None:
        if self.row.revision_id is None:
            return None
        row = await info.context.loaders.app_revision.load(self.row.revision_id)
        return None if row is None else AppRevision.from_row(row)
