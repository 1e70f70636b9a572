"""Reading a CloudSpace's vCluster for one run: spacedock's admin access to it (from
core.cloudspaces.host_access, kept in memory a few minutes), then every list the rules
read, in chunks, a few at once, bounded in items and in time.

Secrets and ConfigMaps are never read: no rule needs them, so no secret can reach a
finding or a model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from core.advisor.settings import AdvisorSettings
from core.advisor.snapshot import KINDS, Kind, Snapshot
from core.cloudspaces.host_access import AdminReach, admin_reach, connect, target_of
from core.common.services import Services
from core.spaces.clusters import credentials_for
from db import cloudspaces as cloudspace_rows
from db.cloudspace_tables import CloudSpace
from providers import host as host_api
from providers.errors import PermanentError, ProviderError

# The vCluster's address and admin access are read from the host again after this long
# (a rotated certificate is picked up), or at once after a call fails.
REACH_KEPT_S = 300.0
LISTS_AT_ONCE = 4


class Reader:
    def __init__(
        self, services: Services, settings: AdvisorSettings, on_call: Callable[[], None]
    ) -> None:
        self.services = services
        self.settings = settings
        self._on_call = on_call
        self._reach: dict[str, tuple[AdminReach, float]] = {}

    async def _admin_reach(self, row: CloudSpace) -> AdminReach:
        kept = self._reach.get(row.id)
        if kept is not None and kept[1] > time.monotonic():
            return kept[0]
        async with self.services.read() as session:
            host = await cloudspace_rows.host_space(session, row.host_space_id)
        if host is None:
            raise PermanentError("the CloudSpace's host space no longer exists")
        credentials = await credentials_for(self.services, host)
        async with connect(self.services, credentials, on_call=self._on_call) as kube:
            reach = await admin_reach(self.services, kube, target_of(row))
        self._reach[row.id] = (reach, time.monotonic() + REACH_KEPT_S)
        return reach

    def forget(self, cloud_space_id: str) -> None:
        self._reach.pop(cloud_space_id, None)

    async def snapshot(self, row: CloudSpace) -> Snapshot:
        """Every list the rules read; ProviderError when the vCluster cannot give them."""
        reach = await self._admin_reach(row)
        settings = self.settings
        objects: dict[str, list[dict[str, object]]] = {}
        truncated: set[str] = set()
        absent: set[str] = set()
        gate = asyncio.Semaphore(LISTS_AT_ONCE)

        async def read(kube: host_api.Kube, kind: Kind) -> None:
            async with gate:
                listed = await kube.chunks(
                    kind.path,
                    page_size=settings.page_size,
                    max_items=settings.max_objects,
                    field_selector=kind.field_selector,
                    optional=kind.optional,
                )
            if listed is None:
                absent.add(kind.key)
                return
            objects[kind.key], cut = listed
            if cut:
                truncated.add(kind.key)

        try:
            async with connect(
                self.services,
                reach.credentials,
                timeout_s=settings.read_timeout_s,
                on_call=self._on_call,
            ) as vcluster:
                reads = [asyncio.create_task(read(vcluster, kind)) for kind in KINDS]
                try:
                    await asyncio.gather(*reads)
                finally:  # one list failed: the others stop before the client closes
                    for task in reads:
                        task.cancel()
                    await asyncio.gather(*reads, return_exceptions=True)
        except ProviderError:
            self.forget(row.id)
            raise
        return Snapshot(
            objects=objects,  # type: ignore[arg-type]
            quota_cpu=row.cpu,
            quota_memory_mib=float(row.memory_mib),
            truncated=frozenset(truncated),
            absent=frozenset(absent),
        )
