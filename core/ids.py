"""Opaque, globally unique, time-ordered ids.

The prefix names the kind of object so `node(id:)` can resolve any id, and
the time-ordered body makes the id itself the keyset for pagination.
"""

from __future__ import annotations

import os
import re
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


# The whole id, matched in full: anything else (a trailing newline, a NUL byte) names nothing.
ID = re.compile(r"(?P<prefix>[a-z]+)_[0-9a-f]{30}")


def new_id(prefix: str) -> str:
    assert prefix in KINDS, prefix
    return f"{prefix}_{time.time_ns() // 1000:014x}{os.urandom(8).hex()}"


def kind_of(object_id: str) -> str | None:
    """The kind an id names, or None when it is no id this server could have made."""
    shaped = ID.fullmatch(object_id)
    return None if shaped is None else KINDS.get(shaped["prefix"])


def event_id(number: int) -> str:
    """Status events are numbered by the database; their public id keeps that order."""
    return f"sev_{number:030x}"


def event_number(object_id: str) -> int | None:
    if kind_of(object_id) != "SpaceStatusEvent":
        return None
    return int(object_id.partition("_")[2], 16)
