"""Re-sealing every stored secret under the first key of SPACEDOCK_SECRET_KEY, so that a key
can be rotated without downtime (`spacedock secrets reseal`).

The rotation: every replica runs with `NEW,OLD` (the new key seals, both open); then this
re-seals what the old key sealed; then `OLD` is dropped. It runs beside serving replicas:

- in batches of `batch_size` rows, one transaction each, so it holds no lock for long and
  an interruption loses at most one batch;
- resumable: a row the first key already opens is left alone, so running it again goes on
  where it stopped (and checks the rest cheaply);
- no lost update: each row is swapped only if it still holds the ciphertext that was
  opened (db.sealed.swap); a secret a replica rotated meanwhile is read again, and is
  usually sealed under the first key already.

A secret no key opens is reported by id and left as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from core.common.secrets import SecretBox
from core.common.services import Services
from db import sealed as sealed_rows
from db.sealed import SealedColumn, SealedRow

DEFAULT_BATCH = 100
# A row rewritten this many times while we re-seal it is left for the next run.
MAX_SWAP_ATTEMPTS = 5


@dataclass
class Progress:
    """One sealed column's progress so far."""

    what: str
    total: int
    checked: int = 0
    resealed: int = 0


@dataclass
class Report:
    checked: int = 0
    resealed: int = 0
    # Ids re-sealed, by org, for the audit log (an admission secret's: its CloudSpace's).
    resealed_by_org: dict[str, list[str]] = field(default_factory=dict)
    # Rows no key opens, and rows kept busy by other writers (run again).
    unreadable: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unreadable and not self.busy


async def reseal(
    services: Services,
    batch_size: int = DEFAULT_BATCH,
    on_progress: Callable[[Progress], None] | None = None,
) -> Report:
    report = Report()
    for sealed in sealed_rows.SEALED:
        async with services.read() as session:
            progress = Progress(sealed.what, await sealed_rows.count(session, sealed))
        after: tuple[Any, ...] | None = None
        while True:
            async with services.unit() as unit:
                rows = await sealed_rows.batch(unit.session, sealed, after, batch_size)
                for row in rows:
                    outcome = await _reseal_row(unit.session, services.secrets, sealed, row)
                    _count(report, progress, row, outcome)
            if not rows:
                break
            after = rows[-1].key
            if on_progress is not None:
                on_progress(progress)
        report.checked += progress.checked
        report.resealed += progress.resealed
    return report


CURRENT, RESEALED, UNREADABLE, BUSY, GONE = "current", "resealed", "unreadable", "busy", "gone"


async def _reseal_row(
    session: AsyncSession, box: SecretBox, sealed: SealedColumn, row: SealedRow
) -> str:
    ciphertext: str | None = row.ciphertext
    for _ in range(MAX_SWAP_ATTEMPTS):
        if ciphertext is None:
            return GONE  # its secret was removed meanwhile
        if box.sealed_with_first(ciphertext):
            return CURRENT
        try:
            resealed = box.resealed(ciphertext)
        except RuntimeError:
            return UNREADABLE
        if await sealed_rows.swap(session, sealed, row.key, ciphertext, resealed):
            return RESEALED
        ciphertext = await sealed_rows.ciphertext_of(session, sealed, row.key)
    return BUSY


def _count(report: Report, progress: Progress, row: SealedRow, outcome: str) -> None:
    progress.checked += 1
    if outcome == RESEALED:
        progress.resealed += 1
        report.resealed_by_org.setdefault(row.org_id, []).append(row.target_id)
    elif outcome == UNREADABLE:
        report.unreadable.append(row.target_id)
    elif outcome == BUSY:
        report.busy.append(row.target_id)
