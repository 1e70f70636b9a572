"""Strict quota's SQL: each vCluster's webhook key and observed usage, the pods admitted
but not yet observed (reservations), and admitted workloads' pod shapes.

Admissions and observations of one CloudSpace serialize on its `cloud_spaces` row
(`standing(lock=True)`: FOR UPDATE on Postgres; on SQLite every writing transaction holds the
write lock from BEGIN), so no two of them decide on the same numbers, on any replica.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from db.admission_tables import AdmissionKey, QuotaReservation, WorkloadShape
from db.cloudspace_tables import CloudSpace


@dataclass(frozen=True)
class Standing:
    """A CloudSpace's quota and what its pods use, each as (millicores, bytes): in use is
    what every vCluster's pods were last seen to request, plus the pods admitted since."""

    name: str
    quota: tuple[int, int]
    in_use: tuple[int, int]


def _total(column: Any, owner: Any, cloud_space_id: str) -> Any:
    return (
        sa.select(sa.func.coalesce(sa.func.sum(column), 0))
        .where(owner == cloud_space_id)
        .scalar_subquery()
    )


async def standing(
    session: AsyncSession, cloud_space_id: str, *, lock: bool = False
) -> Standing | None:
    """With `lock`, the CloudSpace's row is locked first, until commit. The sums are read
    by a statement after the lock is held: under READ COMMITTED a statement sees what was
    committed when it began, so sums read by the locking statement itself would miss the
    reservation of the admission it waited for."""
    if lock and session.get_bind().dialect.name != "sqlite":
        # A reservation need not wait for the disk: after a crash of Postgres itself the
        # next observation counts the pods whose reservations were lost.
        await session.execute(sa.text("SET LOCAL synchronous_commit TO OFF"))
        locking = sa.select(col(CloudSpace.id)).where(col(CloudSpace.id) == cloud_space_id)
        await session.execute(locking.with_for_update())
    seen, held = col(AdmissionKey.cloud_space_id), col(QuotaReservation.cloud_space_id)
    query = sa.select(
        col(CloudSpace.name),
        col(CloudSpace.cpu),
        col(CloudSpace.memory_mib),
        _total(AdmissionKey.observed_cpu_m, seen, cloud_space_id)
        + _total(QuotaReservation.cpu_m, held, cloud_space_id),
        _total(AdmissionKey.observed_memory_bytes, seen, cloud_space_id)
        + _total(QuotaReservation.memory_bytes, held, cloud_space_id),
    ).where(col(CloudSpace.id) == cloud_space_id)
    found = (await session.execute(query)).first()
    if found is None:
        return None
    name, cpu, memory_mib, cpu_used, memory_used = found
    return Standing(
        name, (round(cpu * 1000), memory_mib * 2**20), (int(cpu_used), int(memory_used))
    )


async def observed(
    session: AsyncSession, cloud_space_id: str, except_vcluster: str | None = None
) -> tuple[int, int]:
    """(millicores, bytes) every vCluster's pods (but `except_vcluster`'s) were last seen
    to request."""
    query = sa.select(
        sa.func.coalesce(sa.func.sum(AdmissionKey.observed_cpu_m), 0),
        sa.func.coalesce(sa.func.sum(AdmissionKey.observed_memory_bytes), 0),
    ).where(col(AdmissionKey.cloud_space_id) == cloud_space_id)
    if except_vcluster is not None:
        query = query.where(col(AdmissionKey.vcluster) != except_vcluster)
    cpu, memory = (await session.execute(query)).one()
    return int(cpu), int(memory)


async def key(session: AsyncSession, cloud_space_id: str, vcluster: str) -> AdmissionKey | None:
    return await session.get(AdmissionKey, (cloud_space_id, vcluster))


async def add_key(session: AsyncSession, added: AdmissionKey) -> None:
    """db.engine.UniqueViolation at commit when another process added it first."""
    session.add(added)
    await session.flush()


async def replace_secret(
    session: AsyncSession, key: AdmissionKey, *, sealed: str, sha256: str
) -> bool:
    """Replaces the key's secret if it is still the one `key` holds; False otherwise."""
    result = await session.execute(
        sa.update(AdmissionKey)
        .where(
            col(AdmissionKey.cloud_space_id) == key.cloud_space_id,
            col(AdmissionKey.vcluster) == key.vcluster,
            col(AdmissionKey.secret_sealed) == key.secret_sealed,
        )
        .values(secret_sealed=sealed, secret_sha256=sha256)
    )
    return bool(getattr(result, "rowcount", 0))


async def reserve(session: AsyncSession, reservation: QuotaReservation) -> None:
    """Holds a pod's requests until an observation sees it; a pod of the same name admitted
    before (and refused later in the API server, or replaced) is replaced."""
    values = reservation.model_dump(exclude={"id"})
    insert = postgres_insert if session.get_bind().dialect.name != "sqlite" else sqlite_insert
    statement = insert(QuotaReservation).values(**values)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=["cloud_space_id", "vcluster", "namespace", "name"],
            set_={
                "cpu_m": statement.excluded.cpu_m,
                "memory_bytes": statement.excluded.memory_bytes,
                "made_at": statement.excluded.made_at,
            },
        )
    )


async def observe(
    session: AsyncSession,
    cloud_space_id: str,
    vcluster: str,
    usage: tuple[int, int],
    listed_at: datetime,
    seen: Collection[tuple[str, str]],
    unseen_after: datetime,
) -> bool:
    """Records what a pod list asked for at `listed_at` found: its usage replaces the last
    observation (unless a newer one is there), and reservations end for the pods it saw
    (`seen`: namespace and name) and for those made before `unseen_after` that it did not
    see (refused after the webhook, or gone). False when nothing was recorded."""
    updated = await session.execute(
        sa.update(AdmissionKey)
        .where(
            col(AdmissionKey.cloud_space_id) == cloud_space_id,
            col(AdmissionKey.vcluster) == vcluster,
            sa.or_(
                col(AdmissionKey.observed_at).is_(None), col(AdmissionKey.observed_at) < listed_at
            ),
        )
        .values(observed_cpu_m=usage[0], observed_memory_bytes=usage[1], observed_at=listed_at)
    )
    if getattr(updated, "rowcount", 0) == 0:
        return False
    held = await session.execute(
        sa.select(
            col(QuotaReservation.id),
            col(QuotaReservation.namespace),
            col(QuotaReservation.name),
            col(QuotaReservation.made_at),
        ).where(
            col(QuotaReservation.cloud_space_id) == cloud_space_id,
            col(QuotaReservation.vcluster) == vcluster,
        )
    )
    seen_pods = set(seen)
    ended = [
        reservation_id
        for reservation_id, namespace, name, made_at in held.all()
        if (namespace, name) in seen_pods or made_at < unseen_after
    ]
    if ended:
        await session.execute(
            sa.delete(QuotaReservation).where(col(QuotaReservation.id).in_(ended))
        )
    return True


async def shape(
    session: AsyncSession,
    cloud_space_id: str,
    vcluster: str,
    resource: str,
    namespace: str,
    name: str,
) -> WorkloadShape | None:
    return await session.get(WorkloadShape, (cloud_space_id, vcluster, resource, namespace, name))


async def keep_shape(session: AsyncSession, kept: WorkloadShape) -> None:
    await session.merge(kept)
    await session.flush()


async def forget_vcluster(session: AsyncSession, cloud_space_id: str, vcluster: str) -> None:
    """A removed vCluster's key, observed usage, reservations and shapes: its pods no
    longer count against the CloudSpace's quota, and its webhook URL no longer answers."""
    for model in (AdmissionKey, QuotaReservation, WorkloadShape):
        await session.execute(
            sa.delete(model).where(
                col(model.cloud_space_id) == cloud_space_id, col(model.vcluster) == vcluster
            )
        )
