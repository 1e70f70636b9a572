"""The DateTime scalar in one format: UTC with milliseconds and a `Z`, as JavaScript's
`Date.prototype.toISOString()` writes it (`2026-05-01T12:00:00.000Z`).

Strawberry's default wrote Python's `isoformat()`: `+00:00`, with microseconds when the
value had any and none when it had not, so one field came in two shapes and a frontend
comparing or sorting the strings, or a codegen mapping to `string`, met both. A JS `Date`
holds milliseconds, so nothing a browser can hold is lost; what the server stores keeps
its own precision. Inputs take any ISO 8601 date-time (Python's `fromisoformat`).
"""

from __future__ import annotations

from datetime import UTC, datetime

import strawberry
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.types.base_scalars import wrap_parser


def datetime_text(value: datetime) -> str:
    """`value` as the API writes every DateTime; a naive value is taken as UTC (the
    database layer gives aware ones)."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


DateTime = strawberry.scalar(
    name="DateTime",
    description="An instant, written in UTC with milliseconds and Z, as JavaScript's "
    "Date.toISOString() writes it: 2026-05-01T12:00:00.000Z (new Date(value) reads it). "
    "Inputs take any ISO 8601 date-time; give an offset or Z.",
    serialize=datetime_text,
    parse_value=wrap_parser(datetime.fromisoformat, "DateTime"),
)

# What the schema is built with: every `datetime` field and argument is this scalar.
CONFIG = StrawberryConfig(scalar_map={datetime: DateTime})
