"""Opaque, globally unique, time-ordered ids.

The prefix names the kind of object so `node(id:)` can resolve any id, and
the time-ordered body makes the id itself the keyset for pagination.
"""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime, timedelta

KINDS = {
    "org": "Org",
    "ca": "CloudAccount",
    "spc": "Space",
    "env": "Environment",
    "cs": "CloudSpace",
    "vc": "VCluster",
    "grant": "ClusterGrant",
    "tok": "ApiToken",
    "sev": "SpaceStatusEvent",
    "role": "RoleDefinition",
    "aud": "AuditEvent",
    "adv": "AdvisorFinding",
    "app": "App",
    "apprev": "AppRevision",
}


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The whole id, matched in full: anything else (a trailing newline, a NUL byte) names nothing.
ID = re.compile(r"(?P<prefix>[a-z]+)_[0-9a-f]{30}")


# What no stored text can hold: Postgres text cannot hold NUL, and no driver can encode a
# lone surrogate.
UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
# ASCII's SUBSTITUTE: any database stores it, and no stored name or id has it, since every
# text a client sends is refused with a control character in it (core.common.names).
SUBSTITUTE = "\x1a"


def harmless(object_id: str) -> str:
    """The id as sent, with each character no database can take replaced by SUBSTITUTE.

    An id that had one could name nothing, and still names nothing (every id this server
    makes is plain ASCII, every name is free of control characters), so it reads as any
    unknown id, wherever it is looked up or filtered on."""
    return UNSTORABLE.sub(SUBSTITUTE, object_id)


def new_id(prefix: str) -> str:
    assert prefix in KINDS, prefix
    return f"{prefix}_{time.time_ns() // 1000:014x}{os.urandom(8).hex()}"


# A probe result is named by its space and the microsecond it finished: results are not
# stored one by one (a space keeps its last), yet a client cache needs a stable id for each.
PROBE_ID = re.compile(r"prb_(?P<space>[0-9a-f]{30})(?P<at>[0-9a-f]{14})")


def kind_of(object_id: str) -> str | None:
    """The kind an id names, or None when it is no id this server could have made."""
    shaped = ID.fullmatch(object_id)
    if shaped is None:
        return "ProbeEvent" if PROBE_ID.fullmatch(object_id) else None
    return KINDS.get(shaped["prefix"])


def probe_event_id(space_id: str, at: datetime) -> str:
    """The id of the probe result of `space_id` that finished at `at` (aware)."""
    since_epoch = at - EPOCH
    micros = (since_epoch.days * 86_400 + since_epoch.seconds) * 1_000_000
    return f"prb_{space_id.partition('_')[2]}{micros + since_epoch.microseconds:014x}"


def probe_event_parts(object_id: str) -> tuple[str, datetime] | None:
    """(space id, when it finished) of a probe result's id; None for any other id."""
    shaped = PROBE_ID.fullmatch(object_id)
    if shaped is None:
        return None
    return f"spc_{shaped['space']}", EPOCH + timedelta(microseconds=int(shaped["at"], 16))


def event_id(number: int) -> str:
    """Status events are numbered by the database; their public id keeps that order."""
    return f"sev_{number:030x}"


def event_number(object_id: str) -> int | None:
    if kind_of(object_id) != "SpaceStatusEvent":
        return None
    return int(object_id.partition("_")[2], 16)
