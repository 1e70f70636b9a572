"""Connection arguments: `first` is 1..100 (rejected, never clamped) and cursors are opaque."""

from __future__ import annotations

import base64
import binascii

from core.errors import ApiError
from core.ids import kind_of

DEFAULT_FIRST = 50
MAX_FIRST = 100


def checked_first(first: int | None, default: int = DEFAULT_FIRST) -> int:
    if first is None:
        return default
    if not 1 <= first <= MAX_FIRST:
        raise ApiError("BAD_USER_INPUT", f"first must be between 1 and {MAX_FIRST}, got {first}")
    return first


def window(first: int | None, after: str | None, kind: str | None = None) -> tuple[int, str | None]:
    """`kind` names what the list holds: a cursor from another list would silently start
    the page at an unrelated position, so it is refused instead."""
    object_id = None if after is None else decode_cursor(after)
    if kind is not None and object_id is not None and kind_of(object_id) != kind:
        raise ApiError("BAD_USER_INPUT", "after is a cursor of another list")
    return checked_first(first), object_id


def encode_cursor(object_id: str) -> str:
    return base64.urlsafe_b64encode(object_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        object_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        object_id = ""
    if kind_of(object_id) is None:
        raise ApiError("BAD_USER_INPUT", "after is not a cursor this API gave out")
    return object_id
