"""Opaque, globally unique, time-ordered ids.

The prefix names the kind of object so `node(id:)` can resolve any id, and
the time-ordered body makes the id itself the keyset for pagination.
"""

from __future__ import annotations

import os
import time

KINDS = {
    "org": "Org",
    "ca": "CloudAccount",
    "spc": "Space",
    "env": "Environment",
    "cs": "CloudSpace",
    "grant": "ClusterGrant",
    "tok": "ApiToken",
    "sev": "SpaceStatusEvent",
    "role": "RoleDefinition",
    "aud": "AuditEvent",
}


def new_id(prefix: str) -> str:
    assert prefix in KINDS, prefix
    return f"{prefix}_{time.time_ns() // 1000:014x}{os.urandom(8).hex()}"


def kind_of(object_id: str) -> str | None:
    prefix, _, body = object_id.partition("_")
    if not body or len(body) != 30:
        return None
    return KINDS.get(prefix)


def event_id(number: int) -> str:
    """Status events are numbered by the database; their public id keeps that order."""
    return f"sev_{number:030x}"


def event_number(object_id: str) -> int | None:
    if kind_of(object_id) != "SpaceStatusEvent":
        return None
    try:
        return int(object_id.partition("_")[2], 16)
    except ValueError:
        return None
