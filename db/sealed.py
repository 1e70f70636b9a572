"""Every column that holds a sealed secret, and the statements that re-seal them in place
(`spacedock secrets reseal`, core.common.reseal).

A re-seal never overwrites a write it did not see: its UPDATE names the ciphertext it
opened (compare-and-swap), so a secret rotated by a replica meanwhile is left as that
replica wrote it, and the re-seal reads it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from db.admission_tables import AdmissionKey
from db.app_tables import App
from db.cloudspace_tables import CloudSpace
from db.tables import CloudAccount, Space


@dataclass(frozen=True)
class SealedColumn:
    """One table's sealed column, named for progress lines: its rows by primary key, each
    with the org it belongs to and the id an audit event names it by."""

    what: str
    table: Any  # the model's Table
    column: str
    keys: tuple[str, ...]  # the primary key's columns
    # The rows with their org and audit target: (org_id, target id) columns and the FROM.
    owner: Callable[[Any], tuple[Any, Any, Any]]

    @property
    def ciphertexts(self) -> sa.ColumnElement[str | None]:
        found: sa.ColumnElement[str | None] = self.table.c[self.column]
        return found

    def key_of(self, values: tuple[Any, ...]) -> sa.ColumnElement[bool]:
        return sa.and_(*(self.table.c[k] == v for k, v in zip(self.keys, values, strict=True)))


def _own(table: Any) -> tuple[Any, Any, Any]:
    return table.c.org_id, table.c.id, table


def _of_cloud_space(table: Any) -> tuple[Any, Any, Any]:
    spaces = CloudSpace.__table__  # type: ignore[attr-defined]
    joined = table.join(spaces, spaces.c.id == table.c.cloud_space_id)
    return spaces.c.org_id, table.c.cloud_space_id, joined


# Cloud account credentials; a space's cluster secret (CA, token, client certificate and
# key: registerSpace and `space import-kubeconfig`); an app's Git credential; a vCluster's
# admission webhook secret. Nothing else is sealed: API tokens are stored as hashes,
# CloudSpace kubeconfigs minted on demand.
SEALED = (
    SealedColumn(
        "cloud account credentials",
        CloudAccount.__table__,  # type: ignore[attr-defined]
        "credentials_ciphertext",
        ("id",),
        _own,
    ),
    SealedColumn("space secrets", Space.__table__, "secret_ciphertext", ("id",), _own),  # type: ignore[attr-defined]
    SealedColumn("app credentials", App.__table__, "credential_ciphertext", ("id",), _own),  # type: ignore[attr-defined]
    SealedColumn(
        "admission webhook secrets",
        AdmissionKey.__table__,  # type: ignore[attr-defined]
        "secret_sealed",
        ("cloud_space_id", "vcluster"),
        _of_cloud_space,
    ),
)


@dataclass(frozen=True)
class SealedRow:
    key: tuple[Any, ...]
    org_id: str
    target_id: str
    ciphertext: str


async def count(session: AsyncSession, sealed: SealedColumn) -> int:
    query = (
        sa.select(sa.func.count()).select_from(sealed.table).where(sealed.ciphertexts.is_not(None))
    )
    return int((await session.execute(query)).scalar_one())


async def batch(
    session: AsyncSession, sealed: SealedColumn, after: tuple[Any, ...] | None, limit: int
) -> list[SealedRow]:
    """The next `limit` rows holding a secret, by primary key, after the key `after`."""
    keys = [sealed.table.c[k] for k in sealed.keys]
    org_id, target_id, source = sealed.owner(sealed.table)
    query = (
        sa.select(*keys, org_id, target_id, sealed.ciphertexts)
        .select_from(source)
        .where(sealed.ciphertexts.is_not(None))
        .order_by(*keys)
        .limit(limit)
    )
    if after is not None:
        query = query.where(sa.tuple_(*keys) > sa.tuple_(*after))
    width = len(keys)
    return [
        SealedRow(tuple(row[:width]), row[width], row[width + 1], row[width + 2])
        for row in (await session.execute(query)).all()
    ]


async def swap(
    session: AsyncSession, sealed: SealedColumn, key: tuple[Any, ...], was: str, now: str
) -> bool:
    """Replaces the ciphertext `was` with `now`; False when the row holds another by now."""
    result = await session.execute(
        sa.update(sealed.table)
        .where(sealed.key_of(key), sealed.ciphertexts == was)
        .values({sealed.column: now})
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


async def ciphertext_of(
    session: AsyncSession, sealed: SealedColumn, key: tuple[Any, ...]
) -> str | None:
    query = sa.select(sealed.ciphertexts).where(sealed.key_of(key))
    return (await session.execute(query)).scalar_one_or_none()
