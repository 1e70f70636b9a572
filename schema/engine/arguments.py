"""Arguments many fields share, described once: what they mean, their defaults and limits."""

from __future__ import annotations

from typing import Annotated

import strawberry

First = Annotated[
    int | None,
    strawberry.argument(
        description="How many items to return from the start: 1 to 100 (default 50); "
        "more is BAD_USER_INPUT, never clamped."
    ),
]
After = Annotated[
    str | None,
    strawberry.argument(
        description="Return the items after this cursor (an edge's cursor or pageInfo.endCursor)."
    ),
]
Last = Annotated[
    int | None,
    strawberry.argument(
        description="How many items to return from the end (or just before `before`): "
        "1 to 100 (default 50 when `before` is given)."
    ),
]
Before = Annotated[
    str | None,
    strawberry.argument(description="Return the items before this cursor (pageInfo.startCursor)."),
]
ObjectId = Annotated[strawberry.ID, strawberry.argument(description="The object's id.")]
# The one argument of every mutation.
INPUT = strawberry.argument(description="The call's input; userErrors paths start at it.")
