"""Per-request DataLoaders: every list query costs a fixed number of SQL statements.

A Loaders instance lives for one HTTP request or one subscription event,
never for a WebSocket connection, so no request sees another's stale rows.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col
from strawberry.dataloader import DataLoader

from core.cloudspaces import vcluster_rules
from core.cloudspaces.host_access import MintedKubeconfig
from core.common.errors import ApiError
from core.common.live_calls import LiveCallBudget
from core.common.services import Services
from db import advice_reads, cloud_accounts, cloudspaces, environments, owned
from db import advisor as advice_rows
from db import apps as app_rows
from db import spaces as space_rows
from db import vclusters as vcluster_rows
from db.access_tables import ApiToken, AuditEvent, RoleDefinition
from db.advice_reads import AdviceFilter
from db.advisor_tables import AdvisorExemption, AdvisorFinding, AdvisorSchedule
from db.app_tables import App, AppEvent, AppRevision
from db.cloudspace_tables import CloudSpace, CloudSpaceEvent
from db.pages import Page, pages_by_parent
from db.records import EnvironmentRecord, StatusEventRecord
from db.tables import CloudAccount, ClusterGrant, Environment, Org, Space, SpaceStatusEvent
from db.vcluster_tables import VCluster

log = logging.getLogger("spacedock.loaders")
K = TypeVar("K")
V = TypeVar("V")


def _grouped(rows: Sequence[Any], keys: Sequence[str], parent: str) -> list[list[Any]]:
    by_parent: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        by_parent[getattr(row, parent)].append(row)
    return [by_parent[key] for key in keys]


class _Lazy(Generic[K, V]):
    """A Loaders attribute whose DataLoader is made on first use and then kept in the
    instance's own __dict__ (which `Loaders.close` walks), so later reads skip this."""

    def __init__(self, make: Callable[[Loaders], DataLoader[K, V]]) -> None:
        self.make = make
        self.name = ""

    def __set_name__(self, owner: type[Loaders], name: str) -> None:
        self.name = name

    def __get__(self, loaders: Loaders | None, owner: type[Loaders]) -> DataLoader[K, V]:
        assert loaders is not None, "read on a Loaders instance"
        made = loaders.__dict__[self.name] = self.make(loaders)
        return made


class Loaders:
    services: Services
    org_id: str
    # Each loader is made on first use (`_Lazy`): an operation uses a few of these, and an
    # idle subscription holds its operation's Loaders for as long as it runs (the fan-out
    # bench's memory per subscription grew by 11 KiB with the loaders made up front).
    # Orgs are looked up across orgs; callers only ever ask for their own.
    org = _Lazy[str, "Org | None"](lambda self: self._by_id(Org, None))
    space = _Lazy[str, "Space | None"](lambda self: self._by_id(Space, self.org_id))
    cloud_account = _Lazy[str, "CloudAccount | None"](
        lambda self: self._by_id(CloudAccount, self.org_id)
    )
    environment = _Lazy[str, "Environment | None"](
        lambda self: self._by_id(Environment, self.org_id)
    )
    environments_of_space = _Lazy[str, "list[EnvironmentRecord]"](
        lambda self: DataLoader(self._environments_of_spaces)
    )
    grants_of_account = _Lazy[str, "list[ClusterGrant]"](lambda self: DataLoader(self._grants))
    recent_events = _Lazy[tuple[str, int], "list[StatusEventRecord]"](
        lambda self: DataLoader(self._recent_events)
    )
    spaces_of_account = _Lazy[tuple[str, int, "str | None"], "Page[Any]"](
        lambda self: self._pages(
            lambda session, ids, first, after: pages_by_parent(
                session,
                Space,
                Space.cloud_account_id,
                ids,
                first,
                after,
                col(Space.org_id) == self.org_id,
                space_rows.LIVE,
            )
        )
    )
    status_event = _Lazy[int, "SpaceStatusEvent | None"](
        lambda self: DataLoader(self._status_events)
    )
    cloud_space = _Lazy[str, "CloudSpace | None"](lambda self: self._by_id(CloudSpace, self.org_id))
    cloud_spaces_of_space = _Lazy[str, "list[CloudSpace]"](
        lambda self: DataLoader(self._cloud_spaces_of_spaces)
    )
    cloud_space_event = _Lazy[int, "CloudSpaceEvent | None"](
        lambda self: DataLoader(self._cloud_space_events)
    )
    vcluster = _Lazy[str, "VCluster | None"](lambda self: self._by_id(VCluster, self.org_id))
    vclusters_of_cloud_space = _Lazy[str, "list[VCluster]"](
        lambda self: DataLoader(self._vclusters_of_cloud_spaces)
    )
    # Keyed by vCluster id.
    kubeconfig = _Lazy[str, "MintedKubeconfig | None"](lambda self: DataLoader(self._kubeconfigs))
    custom_role = _Lazy[str, "RoleDefinition | None"](
        lambda self: self._by_id(RoleDefinition, self.org_id)
    )
    api_token = _Lazy[str, "ApiToken | None"](lambda self: self._by_id(ApiToken, self.org_id))
    audit_event = _Lazy[str, "AuditEvent | None"](lambda self: self._by_id(AuditEvent, self.org_id))
    advisor_finding = _Lazy[str, "AdvisorFinding | None"](
        lambda self: self._by_id(AdvisorFinding, self.org_id)
    )
    advice_counts = _Lazy[tuple[str, str, AdviceFilter], "dict[str, int]"](
        lambda self: DataLoader(self._advice_counts)
    )
    advice_first_page = _Lazy[tuple[str, str, AdviceFilter, int], "list[AdvisorFinding]"](
        lambda self: DataLoader(self._advice_first_pages)
    )
    advisor_schedule = _Lazy[str, "AdvisorSchedule | None"](
        lambda self: DataLoader(self._advisor_schedules)
    )
    advisor_exemptions = _Lazy[str, "list[AdvisorExemption]"](
        lambda self: DataLoader(self._advisor_exemptions)
    )
    app = _Lazy[str, "App | None"](lambda self: self._by_id(App, self.org_id))
    # A CloudSpace's host may be the platform's (another org's): read by id alone, only
    # to tell whether the CloudSpace's apps can be reached, never shown.
    host_space = _Lazy[str, "Space | None"](lambda self: self._by_id(Space, None))
    app_revision = _Lazy[str, "AppRevision | None"](
        lambda self: self._by_id(AppRevision, self.org_id)
    )
    app_event = _Lazy[int, "AppEvent | None"](lambda self: DataLoader(self._app_events))
    latest_revision = _Lazy[str, "AppRevision | None"](
        lambda self: DataLoader(self._latest_revisions)
    )
    apps_of_cloud_space = _Lazy[tuple[str, int, "str | None"], "Page[Any]"](
        lambda self: self._pages(
            lambda session, ids, first, after: app_rows.app_pages(
                session, self.org_id, App.cloud_space_id, ids, first, after
            )
        )
    )
    apps_of_environment = _Lazy[tuple[str, int, "str | None"], "Page[Any]"](
        lambda self: self._pages(
            lambda session, ids, first, after: app_rows.app_pages(
                session, self.org_id, App.environment_id, ids, first, after
            )
        )
    )
    # Revision pages are only asked for apps this org's loaders returned.
    revisions_of_app = _Lazy[tuple[str, int, "str | None"], "Page[Any]"](
        lambda self: self._pages(app_rows.revision_pages)
    )

    def __init__(
        self, services: Services, org_id: str, live_calls: LiveCallBudget | None = None
    ) -> None:
        self.services = services
        self.org_id = org_id
        # Not a loader: this operation's allowance of live cluster calls (core.common.live_calls).
        self.live_calls = live_calls or services.live_calls.budget()
        # A query's reads that queue together share one read-only transaction
        # (`keep_one_session`); it ends as soon as no read waits for it, so no connection
        # sits idle in a transaction while the query waits on anything else (a live
        # cluster call). Otherwise each batch has a transaction of its own.
        self._one_session = False
        self._session: AsyncSession | None = None
        self._transaction: AbstractAsyncContextManager[AsyncSession] | None = None
        self._session_lock = asyncio.Lock()
        self._readers = 0  # batches holding or waiting for the shared session

    def keep_one_session(self) -> None:
        """For a query operation: its reads share transactions (issue 12: a transaction
        per loader batch cost more than the reads). `close` must follow."""
        self._one_session = True

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncSession]:
        """A read-only session: the operation's shared one, or a short transaction of its
        own. Batches take turns on the shared session (one statement at a time on it)."""
        if not self._one_session:
            async with self.services.read() as session:
                yield session
            return
        self._readers += 1
        try:
            async with self._session_lock:
                if self._session is None:
                    self._transaction = self.services.read()
                    self._session = await self._transaction.__aenter__()
                try:
                    yield self._session
                finally:
                    if self._readers == 1:  # nobody queued behind this batch
                        await self._end()
        finally:
            self._readers -= 1

    async def close(self) -> None:
        """At the end of the operation: no more shared transactions, and no cached rows.
        The loaders refer back to this object (a reference cycle), so without emptying
        their caches every row of the operation would wait for the cyclic collector
        (issue 12: a full collection every dozen 100-space reads)."""
        self._one_session = False
        await self._end()
        for loader in vars(self).values():
            if isinstance(loader, DataLoader):
                loader.clear_all()

    async def _end(self) -> None:
        transaction, self._transaction, self._session = self._transaction, None, None
        if transaction is not None:
            try:
                await transaction.__aexit__(None, None, None)
            except Exception as error:  # the reads are done; ending a read-only one changes nothing
                log.warning(
                    "a query's read transaction did not end cleanly: %s", type(error).__name__
                )

    def _by_id(self, model: type[Any], org_id: str | None) -> DataLoader[str, Any]:
        async def load(keys: Sequence[str]) -> list[Any]:
            async with self.reading() as session:
                rows = await owned.by_ids(session, model, org_id, keys)
            found = {row.id: row for row in rows}
            return [found.get(key) for key in keys]

        return DataLoader(load)

    def _pages(
        self,
        read: Callable[
            [AsyncSession, Sequence[str], int, str | None], Awaitable[dict[str, Page[Any]]]
        ],
    ) -> DataLoader[tuple[str, int, str | None], Page[Any]]:
        """A loader of one page of children per parent, keyed (parent id, first, after):
        one batch per distinct window, whatever the number of parents."""

        async def load(keys: Sequence[tuple[str, int, str | None]]) -> list[Page[Any]]:
            results: dict[tuple[str, int, str | None], Page[Any]] = {}
            async with self.reading() as session:
                for first, after in {(first, after) for _, first, after in keys}:
                    ids = [key[0] for key in keys if key[1:] == (first, after)]
                    pages = await read(session, ids, first, after)
                    results.update({(parent, first, after): pages[parent] for parent in ids})
            return [results[key] for key in keys]

        return DataLoader(load)

    async def _latest_revisions(self, keys: Sequence[str]) -> list[AppRevision | None]:
        async with self.reading() as session:
            rows = await app_rows.latest_revisions(session, keys)
        found = {row.app_id: row for row in rows if row.org_id == self.org_id}
        return [found.get(key) for key in keys]

    async def _app_events(self, keys: Sequence[int]) -> list[AppEvent | None]:
        async with self.reading() as session:
            rows = await app_rows.events_by_ids(session, keys)
        found = {row.id: row for row in rows if row.org_id == self.org_id}
        return [found.get(key) for key in keys]

    async def _environments_of_spaces(self, keys: Sequence[str]) -> list[list[EnvironmentRecord]]:
        async with self.reading() as session:
            rows = await environments.environments_of_spaces(session, keys)
        return _grouped(rows, keys, "space_id")

    async def _grants(self, keys: Sequence[str]) -> list[list[ClusterGrant]]:
        async with self.reading() as session:
            rows = await cloud_accounts.grants_of_accounts(session, keys)
        return _grouped(rows, keys, "cloud_account_id")

    async def _recent_events(
        self, keys: Sequence[tuple[str, int]]
    ) -> list[list[StatusEventRecord]]:
        """Keyed by (space id, how many); one query per distinct `first`."""
        results: dict[tuple[str, int], list[StatusEventRecord]] = {}
        async with self.reading() as session:
            for first in {first for _, first in keys}:
                ids = [space_id for space_id, n in keys if n == first]
                grouped = await space_rows.recent_events(session, ids, first)
                results.update({(space_id, first): grouped.get(space_id, []) for space_id in ids})
        return [results[key] for key in keys]

    async def _status_events(self, keys: Sequence[int]) -> list[SpaceStatusEvent | None]:
        async with self.reading() as session:
            rows = await space_rows.events_by_ids(session, keys)
        found = {row.id: row for row in rows if row.org_id == self.org_id}
        return [found.get(key) for key in keys]

    async def _cloud_spaces_of_spaces(self, keys: Sequence[str]) -> list[list[CloudSpace]]:
        async with self.reading() as session:
            rows = await cloudspaces.of_spaces(session, self.org_id, keys)
        return _grouped(rows, keys, "host_space_id")

    async def _vclusters_of_cloud_spaces(self, keys: Sequence[str]) -> list[list[VCluster]]:
        async with self.reading() as session:
            rows = await vcluster_rows.of_cloud_spaces(session, keys)
        return _grouped([r for r in rows if r.org_id == self.org_id], keys, "cloud_space_id")

    async def _cloud_space_events(self, keys: Sequence[int]) -> list[CloudSpaceEvent | None]:
        async with self.reading() as session:
            rows = await cloudspaces.events_by_ids(session, keys)
        found = {row.id: row for row in rows if row.org_id == self.org_id}
        return [found.get(key) for key in keys]

    async def _advice_counts(
        self, keys: Sequence[tuple[str, str, AdviceFilter]]
    ) -> list[dict[str, int]]:
        """Keyed by (by, parent id, filter): one statement per distinct (by, filter)."""
        results: dict[tuple[str, str, AdviceFilter], dict[str, int]] = {}
        async with self.reading() as session:
            for by, found in {(b, f) for b, _, f in keys}:
                ids = [key for b, key, f in keys if (b, f) == (by, found)]
                counted = await advice_reads.counts(session, self.org_id, by, ids, found)
                results.update({(by, key, found): counted[key] for key in ids})
        return [results[key] for key in keys]

    async def _advice_first_pages(
        self, keys: Sequence[tuple[str, str, AdviceFilter, int]]
    ) -> list[list[AdvisorFinding]]:
        """Keyed by (by, parent id, filter, first): one statement per distinct (by, filter,
        first)."""
        results: dict[tuple[str, str, AdviceFilter, int], list[AdvisorFinding]] = {}
        async with self.reading() as session:
            for by, found, first in {(b, f, n) for b, _, f, n in keys}:
                ids = [key for b, key, f, n in keys if (b, f, n) == (by, found, first)]
                pages = await advice_reads.first_pages(session, self.org_id, by, ids, found, first)
                results.update({(by, key, found, first): pages[key] for key in ids})
        return [results[key] for key in keys]

    async def _advisor_schedules(self, keys: Sequence[str]) -> list[AdvisorSchedule | None]:
        async with self.reading() as session:
            rows = await advice_rows.schedules(session, keys)
        found = {row.cloud_space_id: row for row in rows if row.org_id == self.org_id}
        return [found.get(key) for key in keys]

    async def _advisor_exemptions(self, keys: Sequence[str]) -> list[list[AdvisorExemption]]:
        async with self.reading() as session:
            rows = [
                r for r in await advice_reads.exemptions(session, keys) if r.org_id == self.org_id
            ]
        return _grouped(rows, keys, "cloud_space_id")

    async def _kubeconfigs(
        self, keys: Sequence[str]
    ) -> list[MintedKubeconfig | BaseException | None]:
        """A fresh tenant kubeconfig per vCluster: minted once per request, so the
        kubeconfig and its expiry agree; several at once, as the live-call budget lets."""

        async def one(key: str) -> MintedKubeconfig | BaseException | None:
            vcluster = await self.vcluster.load(key)
            row = None if vcluster is None else await self.cloud_space.load(vcluster.cloud_space_id)
            if vcluster is None or row is None:
                return None
            try:
                return await vcluster_rules.mint_kubeconfig(
                    self.services, row, vcluster, self.live_calls
                )
            except ApiError as refused:
                return refused

        return list(await asyncio.gather(*(one(key) for key in keys)))
