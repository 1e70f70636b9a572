"""List chunking (`?limit=` and `?continue=`) as the API server serves it.

A list with `limit` answers at most that many items, oldest key first, and when more
follow, `metadata.continue`: an opaque token the client sends back to get the next
chunk (the real server's is base64 of `{"v":"meta.k8s.io/v1","rv":…,"start":…}`,
the storage key to start after, and so is this one). `remainingItemCount` is given
only for an unfiltered list, as the real server gives it. A token that does not decode
is 400 BadRequest. The real server serves every chunk from the snapshot of the first
(and answers 410 once that snapshot is compacted); the stand-in serves later chunks
from the objects as they are then, which a client must tolerate anyway, since a
410 makes it start over on a newer snapshot.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

Obj = dict[str, Any]


class BadContinue(ValueError):
    """A list request the server refuses with 400 BadRequest, with its words."""


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def encode(start: str, revision: int) -> str:
    token = {"v": "meta.k8s.io/v1", "rv": revision, "start": start + "\x00"}
    return base64.b64encode(json.dumps(token, separators=(",", ":")).encode()).decode()


def decode(token: str) -> str:
    """The key a continue token starts after; BadContinue for anything else."""
    try:
        decoded = json.loads(base64.b64decode(token, validate=True))
    except (binascii.Error, ValueError) as error:
        raise BadContinue(f"continue key is not valid: {error}") from None
    if not isinstance(decoded, dict) or decoded.get("v") != "meta.k8s.io/v1":
        raise BadContinue("continue key is not valid: incorrect encoded start resourceVersion")
    start = decoded.get("start")
    if not isinstance(start, str) or not start.endswith("\x00"):
        raise BadContinue("continue key is not valid: invalid start key")
    return start[:-1]


def page_of(
    items: list[Obj], query: Any, revision: int, *, filtered: bool
) -> tuple[list[Obj], Obj]:
    """The chunk of `items` (in key order) the query asks for, and the list metadata
    that goes with it (`continue`, `remainingItemCount`); BadContinue for a bad token or
    limit. Items come in storage-key order (`namespace/name`), as etcd keeps them."""
    items = sorted(items, key=_key)
    token, limit_text = query.get("continue"), query.get("limit")
    if token:
        start = decode(token)
        items = [item for item in items if _key(item) > start]
    if not limit_text:
        return items, {}
    try:
        limit = int(limit_text)
    except ValueError:
        raise BadContinue(f'strconv.ParseInt: parsing "{limit_text}": invalid syntax') from None
    if limit <= 0 or len(items) <= limit:
        return items, {}
    page = items[:limit]
    paging: Obj = {"continue": encode(_key(page[-1]), revision)}
    if not filtered:
        paging["remainingItemCount"] = len(items) - limit
    return page, paging
