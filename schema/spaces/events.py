"""Events and results of a space: its status transitions (the history) and its probe
results, each a Node whose `space` is the space as it is now, so a client cache merges it."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry import Private

from core.common.ids import event_id, probe_event_id
from core.spaces.health import last_error
from db import tables
from db.records import SpaceRow, StatusEventRecord
from resolvers.spaces import reads
from schema.common.enums import SpaceStatus, StatusReasonCode
from schema.common.info import GraphInfo, type_named
from schema.common.relay import Node
from schema.engine.policies import needs

if TYPE_CHECKING:
    from schema.spaces.types import Space

# The space type, named lazily: its module imports this one (Space.lastProbe, statusEvents).
LazySpace = Annotated["Space", strawberry.lazy("schema.spaces.types")]


@strawberry.type(description="The outcome of one reachability probe (GET /version).")
class ProbeResult:
    at: datetime = strawberry.field(description="When the probe finished.")
    ok: bool = strawberry.field(description="True when the cluster answered with its version.")
    version: str | None = strawberry.field(description="gitVersion reported by GET /version.")
    latency_ms: float | None = strawberry.field(
        description="How long the probe took, in milliseconds."
    )
    error: str | None = strawberry.field(
        description="What failed, in the words statusReason uses; null when ok."
    )
    error_code: StatusReasonCode | None = strawberry.field(
        description="What failed, for programs; null when ok."
    )

    @classmethod
    def of_space(cls, row: SpaceRow) -> ProbeResult | None:
        if row.last_probe_at is None or row.last_probe_ok is None:
            return None
        error = last_error(row)
        return cls(
            at=row.last_probe_at,
            ok=row.last_probe_ok,
            version=row.last_probe_version,
            latency_ms=row.last_probe_latency_ms,
            error=None if error is None else error.words,
            error_code=None if error is None else StatusReasonCode[error.code],
        )


@strawberry.type(
    description="One probe result of a space, as spaceProbed streams it. Select `space { id "
    "lastProbe { ... } consecutiveFailures }` and a normalized client cache (Apollo, urql) "
    "merges the result into the space it already holds."
)
class ProbeEvent(Node):
    # The space, when the event was made from it (node(id:)); else read when selected.
    space_row: Private[SpaceRow | None]
    id: strawberry.ID = strawberry.field(
        description="Stable for this probe result (its space and when it finished). "
        "node(id:) resolves it while it is its space's last probe; a space keeps only that one."
    )
    space_id: strawberry.ID = strawberry.field(description="The space probed.")
    result: ProbeResult = strawberry.field(description="What the probe found.")
    consecutive_failures: int = strawberry.field(
        description="Failed probes in a row, this one included; 0 after a success."
    )

    @classmethod
    def of(
        cls, space_id: str, result: ProbeResult, failures: int, space: SpaceRow | None = None
    ) -> ProbeEvent:
        return cls(
            space_row=space,
            id=strawberry.ID(probe_event_id(space_id, result.at)),
            space_id=strawberry.ID(space_id),
            result=result,
            consecutive_failures=failures,
        )

    @classmethod
    def from_row(cls, row: SpaceRow) -> ProbeEvent:
        """The space's last probe as an event (node(id:) found it still the last)."""
        result = ProbeResult.of_space(row)
        assert result is not None, "node(id:) finds a probe event only as a space's last probe"
        return cls.of(row.id, result, row.consecutive_failures, row)

    @strawberry.field(
        description="The space probed, as it is once this result is written: its lastProbe, "
        "consecutiveFailures and status are this result's or newer.",
        extensions=needs("space:view"),
    )
    async def space(self, info: GraphInfo) -> LazySpace | None:
        row = self.space_row
        if row is None:
            row = await reads.probed_space(info.context, self.space_id, self.result.at)
        return None if row is None else type_named(info, "Space").from_row(row)


@strawberry.type(
    description="One status transition of a space, kept in its history (the last 1,000 per space)."
)
class SpaceStatusEvent(Node):
    row: Private[tables.SpaceStatusEvent | StatusEventRecord]
    id: strawberry.ID = strawberry.field(
        description="Stable, and increasing in the order events happened: statusEvents(after:) "
        "catches up from the last id a client saw."
    )
    space_id: strawberry.ID = strawberry.field(description="The space that changed.")
    previous: SpaceStatus | None = strawberry.field(
        description="The status before; null for the first event of a registration."
    )
    status: SpaceStatus = strawberry.field(description="The status from this event on.")
    at: datetime = strawberry.field(description="When the transition happened.")
    reason: str | None = strawberry.field(
        description='Why, in the words statusReason and lastProbe.error use (e.g. "TLS: …"). '
        "statusReason is the same under Space's name."
    )
    reason_code: StatusReasonCode = strawberry.field(
        description="Why, for programs. statusReasonCode is the same under Space's name."
    )

    @classmethod
    def from_row(cls, row: tables.SpaceStatusEvent | StatusEventRecord) -> SpaceStatusEvent:
        return cls(
            row=row,
            id=strawberry.ID(event_id(row.id or 0)),
            reason_code=StatusReasonCode[reads.event_reason_code(row)],
            space_id=strawberry.ID(row.space_id),
            previous=None if row.previous is None else SpaceStatus[row.previous],
            status=SpaceStatus[row.status],
            at=row.at,
            reason=row.reason,
        )

    @strawberry.field(
        description="The same as reason, under Space's name: a space and its events read alike."
    )
    def status_reason(self) -> str | None:
        return self.reason

    @strawberry.field(
        description="The same as reasonCode, under Space's name: a space and its events read alike."
    )
    def status_reason_code(self) -> StatusReasonCode:
        return self.reason_code

    @strawberry.field(
        description="The space that changed, deregistered or not, as it is now (on a "
        "subscription: when the event is delivered). Select it with its id and a normalized "
        "client cache merges the new status into the space it already holds.",
        extensions=needs("space:view"),
    )
    async def space(self, info: GraphInfo) -> LazySpace | None:
        row = await info.context.loaders.space.load(self.row.space_id)
        return None if row is None else type_named(info, "Space").from_row(row)
