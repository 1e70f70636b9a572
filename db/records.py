"""The shapes the read path hands up the layers: records of rows read for lists (their
columns in tuples, no ORM object to build and track; issue 12), the unions read-only code
takes (a record or its ORM row), and the filters of list reads. No query lives here, so
schema/ may name these without reaching the database (import-linter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from db.tables import CloudAccount, Space


class CloudAccountRecord(NamedTuple):
    """A cloud account read with a page of spaces: its columns in a tuple (issue 12).
    Read-only code takes either (`CloudAccountRow`)."""

    id: str
    org_id: str
    name: str
    provider: str
    credentials_ciphertext: str
    created_at: datetime


CloudAccountRow = CloudAccount | CloudAccountRecord


@dataclass(frozen=True)
class SpaceWhere:
    """Which spaces a list or count covers; every condition given must hold."""

    statuses: Sequence[str] | None = None
    provider: str | None = None
    providers: Sequence[str] | None = None
    cloud_account_ids: Sequence[str] | None = None
    held: bool | None = None
    search: str | None = None
    scalable: bool | None = None
    include_deregistered: bool = False


@dataclass(frozen=True)
class CloudSpaceWhere:
    """Which of an org's CloudSpaces a list holds; every condition given must hold."""

    phases: Sequence[str] | None = None
    # Host spaces of the org's own: another org's host (the platform's) matches nothing.
    host_space_ids: Sequence[str] | None = None
    # Case-insensitive substring of the name.
    search: str | None = None


class SpaceRecord(NamedTuple):
    """A space as a page of spaces shows it: the columns reads use, in a tuple, no ORM
    object to build and track (issue 12). Read-only code takes either (`SpaceRow`)."""

    id: str
    org_id: str
    name: str
    provider: str
    space_type: str
    cloud_account_id: str | None
    config_json: str
    secret_ciphertext: str | None
    synthetic: bool
    probe_status: str
    held: bool
    consecutive_failures: int
    last_probe_at: datetime | None
    last_probe_ok: bool | None
    last_probe_version: str | None
    last_probe_latency_ms: float | None
    last_probe_error: str | None
    last_probe_error_code: str | None
    created_at: datetime
    deregistered_at: datetime | None
    # Its cloud account, when the page was read with them (`list_spaces(with_accounts=)`).
    account: CloudAccountRecord | None = None


SpaceRow = Space | SpaceRecord


class StatusEventRecord(NamedTuple):
    """A status event as a list read shows it: its columns in a tuple, no ORM object
    (issue 12)."""

    id: int
    space_id: str
    previous: str | None
    status: str
    reason: str | None
    reason_code: str | None
    at: datetime


class EnvironmentRecord(NamedTuple):
    """An environment as a list read shows it: its columns in a tuple, no ORM object to
    build and track (issue 12: ORM rows were a tenth of a 100-space read's CPU)."""

    id: str
    name: str
    namespace: str
    space_id: str


@dataclass(frozen=True)
class AuditWhere:
    actor: str | None = None
    action: str | None = None
    target_id: str | None = None
    since: datetime | None = None
    actor_token_id: str | None = None
    via: str | None = None
