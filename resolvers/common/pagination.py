"""Connection arguments: `first`/`last` are 1..100 (rejected, never clamped) and cursors
are opaque.

A cursor names a position in one list under one order: the id alone for lists in id
order, or the order, the sort key's value and the id for ordered lists. A cursor of
another list or another order would silently start the page somewhere unrelated, so
it is refused with BAD_USER_INPUT instead.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from core.common.errors import ApiError
from core.common.ids import kind_of
from db.pages import Keyset, Page

DEFAULT_FIRST = 50
MAX_FIRST = 100
T = TypeVar("T")


def checked_first(first: int | None, default: int = DEFAULT_FIRST, name: str = "first") -> int:
    if first is None:
        return default
    if not 1 <= first <= MAX_FIRST:
        raise ApiError("BAD_USER_INPUT", f"{name} must be between 1 and {MAX_FIRST}, got {first}")
    return first


def window(first: int | None, after: str | None, kind: str | None = None) -> tuple[int, str | None]:
    """`kind` names what the list holds: a cursor of another list is refused."""
    object_id = None if after is None else decode_cursor(after)
    if kind is not None and object_id is not None and kind_of(object_id) != kind:
        raise ApiError("BAD_USER_INPUT", "after is a cursor of another list")
    return checked_first(first), object_id


def keyset(
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
    kind: str,
    order: str | None,
    key_tag: str | None = None,
) -> Keyset:
    """The page that first/after or last/before asks for, in a list of `kind` under
    `order` (a label such as "NAME:ASC"; None for id order) whose sort key is of
    `key_tag` ("text", "time" or "int", as the cursors say)."""
    size, backward, cursor, name = direction(first, after, last, before)
    if cursor is None:
        return Keyset(size, backward)
    return Keyset(size, backward, position(cursor, name, kind, order, key_tag))


def direction(
    first: int | None, after: str | None, last: int | None, before: str | None
) -> tuple[int, bool, str | None, str]:
    """(size, backward, cursor, the cursor argument's name) of first/after or last/before."""
    if first is not None and last is not None:
        raise ApiError("BAD_USER_INPUT", "give first (with after) or last (with before), not both")
    if (after is not None and (last is not None or before is not None)) or (
        before is not None and first is not None
    ):
        raise ApiError("BAD_USER_INPUT", "page forward with first/after or back with last/before")
    backward = last is not None or before is not None
    size = checked_first(last, name="last") if backward else checked_first(first)
    cursor, name = (before, "before") if backward else (after, "after")
    return size, backward, cursor, name


def position(
    cursor: str, name: str, kind: str, order: str | None, key_tag: str | None = None
) -> tuple[Any, str]:
    """(sort key value, id) of a cursor given as argument `name`; a value of another type
    than the order's key (`key_tag`) is no cursor this API gave out under that order."""
    if order is None:
        object_id = decode_cursor(cursor, name)
        if kind_of(object_id) != kind:
            raise ApiError("BAD_USER_INPUT", f"{name} is a cursor of another list")
        return None, object_id
    try:
        label, tag, value, object_id = json.loads(_unbase64(cursor))
    except (ValueError, TypeError):
        raise ApiError(
            "BAD_USER_INPUT", f"{name} is not a cursor of this list under orderBy {order}"
        ) from None
    if label != f"{kind}:{order}" or not isinstance(object_id, str) or kind_of(object_id) != kind:
        raise ApiError("BAD_USER_INPUT", f"{name} is a cursor of another list or another order")
    key = _key_of(tag, value) if key_tag in (None, tag) else None
    if key is None:
        raise ApiError("BAD_USER_INPUT", f"{name} is not a cursor this API gave out")
    return key, object_id


def _key_of(tag: object, value: object) -> Any:
    """The sort key a cursor's tagged value stands for; None when it stands for none."""
    if tag == "time" and isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    if tag == "text" and isinstance(value, str):
        return value
    if tag == "int" and type(value) is int:
        return value
    return None


def with_cursors(page: Page[T], kind: str, order: str | None) -> Page[T]:
    """The page with a cursor for each item; ordered lists' cursors carry the order."""
    if order is None:
        return page
    cursors = [
        _ordered_cursor(f"{kind}:{order}", key, item.id)  # type: ignore[attr-defined]
        for key, item in zip(page.keys, page.items, strict=True)
    ]
    return replace(page, cursors=cursors)


def _ordered_cursor(label: str, key: Any, object_id: str) -> str:
    tag, value = tagged(key)
    text = json.dumps([label, tag, value, object_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def tagged(key: Any) -> tuple[str, Any]:
    """A sort key's value as a cursor holds it, with its type's tag."""
    if isinstance(key, datetime):
        return "time", key.isoformat()
    if type(key) is int:
        return "int", key
    return "text", str(key)


def cursors_of(page: Page[Any]) -> Sequence[str]:
    if page.cursors is not None:
        return page.cursors
    return [encode_cursor(item.id) for item in page.items]


def encode_cursor(object_id: str) -> str:
    return base64.urlsafe_b64encode(object_id.encode()).decode().rstrip("=")


def _unbase64(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return ""


def decode_cursor(cursor: str, name: str = "after") -> str:
    object_id = _unbase64(cursor)
    if kind_of(object_id) is None:
        raise ApiError("BAD_USER_INPUT", f"{name} is not a cursor this API gave out")
    return object_id
