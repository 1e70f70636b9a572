"""Payloads of the app mutations."""

from __future__ import annotations

import strawberry

from core.apps.lifecycle import Delivered
from core.common.errors import UserError as CoreUserError
from schema.apps.types import App, AppRevision
from schema.common.payloads import UserError, user_errors


@strawberry.type(
    description="The app as changed (and the revision made or acted on), or userErrors."
)
class AppPayload:
    app: App | None = strawberry.field(description="Null when userErrors is not empty.")
    revision: AppRevision | None = strawberry.field(
        description="The revision the call made or requeued (createApp, updateApp, rollbackApp, "
        "requeueAppRevision)."
    )
    user_errors: list[UserError] = strawberry.field(description="Why nothing changed.")

    @classmethod
    def of(cls, outcome: tuple[Delivered | None, list[CoreUserError]]) -> AppPayload:
        done, problems = outcome
        return cls(
            app=None if done is None else App.from_row(done.app),
            revision=None
            if done is None or done.revision is None
            else AppRevision.from_row(done.revision),
            user_errors=user_errors(problems),
        )
