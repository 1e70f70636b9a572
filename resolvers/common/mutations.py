"""Write paths: each mutation is one unit of work; userErrors roll it back whole. Every
unit that changes something records the audit event of its call in the same transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from core.common.errors import UserError, UserErrors
from core.common.rbac import Viewer
from core.common.services import Unit
from db.engine import UniqueViolation
from resolvers.common import audit
from resolvers.common.context import Context

T = TypeVar("T")


Outcome = tuple[T | None, list[UserError]]


RACE_LOST = UserError(None, "Another change to the same object won; try again.", "CONFLICT")


async def run(context: Context, action: Callable[[Unit, Viewer], Awaitable[T]]) -> Outcome[T]:
    # A unique violation means a concurrent write got there first; one retry lets the
    # domain see it and refuse (CONFLICT on the right field) or succeed idempotently.
    for _attempt in range(2):
        try:
            async with context.services.unit() as unit:
                result = await action(unit, context.caller)
                call = await audit.in_effect(unit, context, result)
            audit.committed(call)
            return result, []
        except UserErrors as refused:
            return None, refused.errors
        except UniqueViolation:
            continue
    return None, [RACE_LOST]
