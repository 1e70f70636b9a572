"""The CloudSpace reconciler: the second background loop beside the probe loop, built on
the same kit (`core.loops`) and the same claims (`db.claims`), with leases.

A claimer leases due CloudSpaces (`next_attempt_at` has come, no live lease) to this
process and spawns one worker per CloudSpace, at most `concurrency` at once. A worker
runs the CloudSpace's persisted step against the clusters (outside any transaction),
then persists the outcome in one transaction per step, fenced on its lease and on the
step it ran: a worker whose lease was taken over, or whose CloudSpace was resized or
deleted meanwhile, writes nothing. Events go out after commit. Replicas share the
work through the leases, and a crash resumes from the persisted step once the lease
runs out; every write being a server-side apply, a step that runs again creates
nothing twice.

Outcomes: a step done advances to the next (PENDING → PROVISIONING → INSTALLING_FLUX
→ READY, each phase change an event); a step waiting (a StatefulSet not ready, a
namespace lingering) releases the CloudSpace for a short poll, its blocker in
`message`; a step failing makes it FAILED with the reason, retried from that step
with exponential backoff (while DELETING the phase stays and the reason is the
message). READY re-runs `refresh` every SPACEDOCK_RECONCILE_INTERVAL_S. The last
DELETING step removes the row and sends DELETED, once.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from core import cloudspaces as rules
from core import vclusters as vc
from core.cloudspace_access import AdminReach, address, admin_reach, connect, target_of
from core.clusters import credentials_for
from core.errors import Problems
from core.loops import Loop, LoopStats, describe, metric, seconds_until_due
from core.services import Services, Unit
from db import claims
from db import cloudspaces as cloudspace_rows
from db.tables import CloudSpace, Space
from providers import host as host_api
from providers.credentials import ClusterCredentials
from providers.errors import ProviderError

log = logging.getLogger("spacedock.reconciler")

# A worker renews its lease at every step; a dead worker's CloudSpaces wait this long.
LEASE = timedelta(seconds=30)
STEP_TIMEOUT_S = 20.0
MAX_RETRY_S = 300.0
# CloudSpaces made by another process (a replica; `spacedock token create` making an org's
# default one) cannot wake this loop: it looks for due work this often, and this rarely
# while there is no CloudSpace at all.
LOOK_FOR_DUE_S = 2.0
LOOK_WHEN_NONE_S = 10.0


@dataclass
class ReconcileStats(LoopStats):
    loop: ClassVar[str] = "reconcile"

    steps: int = metric("counter", "spacedock_reconcile_steps_total", "CloudSpace steps done.")
    waits: int = metric(
        "counter",
        "spacedock_reconcile_waits_total",
        "CloudSpace steps that found something not ready yet and polled again later.",
    )
    failures: int = metric(
        "counter",
        "spacedock_reconcile_failures_total",
        "CloudSpace steps that failed (FAILED, retried with backoff).",
    )
    api_calls: int = metric(
        "counter",
        "spacedock_reconcile_api_calls_total",
        "Calls the reconciler made to host and vCluster API servers.",
    )
    deleted: int = metric(
        "counter", "spacedock_reconcile_deleted_total", "CloudSpaces removed (DELETED sent)."
    )


@dataclass(frozen=True)
class Done:
    usage: vc.Used | None = None


@dataclass(frozen=True)
class Wait:
    message: str | None = None


@dataclass(frozen=True)
class Failed:
    reason: str


Outcome = Done | Wait | Failed


def owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Reconciler:
    def __init__(self, services: Services, concurrency: int = 32) -> None:
        self.services = services
        self.settings = services.cloudspaces
        self.owner = owner_name()
        self.stats = ReconcileStats()
        self.loop = Loop("reconcile", self.stats, concurrency)
        # The Flux manifests, read once per process (a release URL's content is fixed).
        self._flux_objects: list[dict[str, Any]] | None = None
        # Each vCluster's address and admin access, read from the host once per run of
        # steps (never stored): a later run reads them again, rotated certificates too.
        self._reach: dict[str, AdminReach] = {}

    @property
    def poll_s(self) -> float:
        """How soon a waiting step looks again."""
        return min(2.0, self.settings.reconcile_interval_s)

    def retry_in(self, failures: int) -> float:
        first = min(5.0, self.settings.reconcile_interval_s)
        return float(min(MAX_RETRY_S, first * 2 ** max(0, failures - 1)))

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> None:
        self.loop.run("claims", self._claim_step)
        log.info(
            "CloudSpace reconciler started as %s: READY re-checked every %gs",
            self.owner,
            self.settings.reconcile_interval_s,
        )

    async def stop(self) -> None:
        """Stops claiming and abandons the steps in flight, then hands their CloudSpaces
        back, so the persisted steps run again at once, here after a restart or on another
        replica. (After a crash, the leases run out instead.)"""
        await self.loop.stop()
        try:
            async with self.services.unit() as unit:
                await cloudspace_rows.release_all(unit.session, self.owner, unit.now)
        except Exception as error:  # shutting down: the leases run out by themselves
            log.warning("CloudSpace leases not handed back: %s", describe(error))

    # -- claiming ---------------------------------------------------------------
    async def _claim_step(self) -> None:
        await self.loop.wait_for_free(1, LOOK_FOR_DUE_S)
        free = self.loop.free
        if free <= 0:
            return
        self.services.reconcile_wanted.clear()  # a wish from here on wakes the nap below
        async with self.services.unit() as unit:
            rows = await claims.claim_due(
                unit.session,
                cloudspace_rows.RECONCILE_QUEUE,
                now=unit.now,
                due_again=unit.now + LEASE,
                limit=free,
                owner=self.owner,
                lease_until=unit.now + LEASE,
            )
        for row in rows:
            self.loop.spawn(row.id, self._work(row))
        if len(rows) < free:
            due_in = await seconds_until_due(
                self.services,
                cloudspace_rows.earliest_due,
                longest_s=LOOK_FOR_DUE_S,
                when_none_s=LOOK_WHEN_NONE_S,  # no CloudSpace at all: looked at rarely
            )
            await self.loop.nap(due_in, self.services.reconcile_wanted)

    # -- one CloudSpace -----------------------------------------------------------
    async def _work(self, row: CloudSpace | None) -> None:
        """Runs the CloudSpace's steps while they are done at once; stops at a wait, a
        failure, READY's refresh, the end of deletion, or a lost lease. The host space is
        read once for the whole run (it cannot be deregistered while it hosts this)."""
        host: Space | None = None
        cloud_space_id = None if row is None else row.id
        try:
            while row is not None and not self.loop.stopped:
                if host is None:
                    async with self.services.read() as session:
                        host = await cloudspace_rows.host_space(session, row.host_space_id)
                step = row.step
                outcome = await self._run(row, host)
                row = await self._persist(row.id, step, outcome)
        finally:
            if cloud_space_id is not None:
                self._reach.pop(cloud_space_id, None)

    async def _run(self, row: CloudSpace, host: Space | None) -> Outcome:
        try:
            if host is None:
                return Failed("the host space no longer exists")
            credentials = await credentials_for(self.services, host)
            return await STEPS[row.step](self, row, credentials)
        except ProviderError as failed:
            return Failed(failed.reason)
        except ValueError as bad:  # e.g. Flux manifests that are not Kubernetes YAML
            return Failed(str(bad))
        except Exception as error:  # ours, not the cluster's: logged, retried like a failure
            self.stats.errors += 1
            log.warning("CloudSpace %s step %s: %s", row.id, row.step, describe(error))
            return Failed(f"internal error in step {row.step}; retrying")

    async def _persist(self, cloud_space_id: str, step: str, outcome: Outcome) -> CloudSpace | None:
        """One transaction: the outcome of `step`, if this worker still holds the lease and
        the CloudSpace is still at that step. The row when its next step runs now."""
        async with self.services.unit() as unit:
            row = await cloudspace_rows.locked_if_claimed(unit.session, cloud_space_id, self.owner)
            if row is None:
                return None  # deleted, or the lease passed to another reconciler
            if row.step != step:  # changed under us (deleteCloudSpace): its new step is due
                row.claimed_by, row.lease_until, row.next_attempt_at = None, None, unit.now
                unit.session.add(row)
                return None
            after = await self._apply(unit, row, outcome)
            if after == "removed":
                return None
            if after == "continue":
                row.lease_until = row.next_attempt_at = unit.now + LEASE
            else:
                row.claimed_by, row.lease_until = None, None
            unit.session.add(row)
        return row if after == "continue" else None

    async def _apply(self, unit: Unit, row: CloudSpace, outcome: Outcome) -> str:
        """Writes the outcome on the locked row: "continue" when the next step runs now,
        "release" when the CloudSpace waits, "removed" when it is gone."""
        before = (row.phase, row.message)
        after = "release"
        if isinstance(outcome, Failed):
            self.stats.failures += 1
            row.failures += 1
            if row.phase == "DELETING":
                row.message = f"retrying: {outcome.reason}"
            else:
                row.phase, row.message = "FAILED", outcome.reason
            row.next_attempt_at = unit.now + timedelta(seconds=self.retry_in(row.failures))
            log.info("CloudSpace %s step %s failed: %s", row.id, row.step, outcome.reason)
        elif isinstance(outcome, Wait):
            self.stats.waits += 1
            row.phase, row.message = rules.PHASE_OF[row.step], outcome.message
            row.next_attempt_at = unit.now + timedelta(seconds=self.poll_s)
        else:
            self.stats.steps += 1
            row.failures = 0
            if outcome.usage is not None:
                row.usage_cpu = round(outcome.usage.cpu, 3)
                row.usage_memory_mib = round(outcome.usage.memory_mib)
            following = rules.next_step(row.step)
            if row.step == "delete-kubeconfig":
                await self._remove(unit, row)
                return "removed"
            if following is None:  # READY's refresh: again after the interval
                row.phase, row.message = "READY", None
                interval = timedelta(seconds=self.settings.reconcile_interval_s)
                row.next_attempt_at = unit.now + interval
            else:
                row.step = following
                # READY is announced once its first refresh has placed every quota.
                if following != "refresh":
                    row.phase = rules.PHASE_OF[following]
                row.message = None
                after = "continue"
        if (row.phase, row.message) != before:
            await rules.record_phase(unit, row, before[0], row.phase, row.message)
        return after

    async def _remove(self, unit: Unit, row: CloudSpace) -> None:
        """The last step: the row goes, and DELETED is sent once."""
        self.stats.deleted += 1
        await rules.record_phase(unit, row, row.phase, "DELETED", None)
        unit.session.expunge(row)
        await cloudspace_rows.delete(unit.session, row.id)
        log.info("CloudSpace %s deleted", row.id)

    # -- steps ----------------------------------------------------------------------
    def _connect(
        self, credentials: ClusterCredentials
    ) -> AbstractAsyncContextManager[host_api.Kube]:
        return connect(
            self.services, credentials, timeout_s=STEP_TIMEOUT_S, on_call=self._count_call
        )

    def _count_call(self) -> None:
        self.stats.api_calls += 1

    async def _apply_all(self, kube: host_api.Kube, manifests: list[dict[str, object]]) -> None:
        for manifest in manifests:
            await kube.apply(manifest)

    async def _begin(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        return Done()

    async def _capacity(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """Checked again here: a default CloudSpace was never checked, and two creations
        racing for the last room would both have passed."""
        async with self.services.read() as session:
            host_space = await cloudspace_rows.host_space(session, row.host_space_id)
        assert host_space is not None
        capacity = await rules.capacity_of(self.services, host_space)
        problems = Problems()
        async with self.services.read() as session:
            await rules.check_capacity(
                Unit(session),
                self.services,
                problems,
                row.host_space_id,
                row.id,
                row.cpu,
                row.memory_mib,
                capacity,
            )
        if problems:
            return Failed("QUOTA_EXCEEDED: " + "; ".join(e.message for e in problems.errors))
        return Done()

    async def _host_namespace(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async with self._connect(host) as kube:
            await self._apply_all(kube, vc.host_namespace_objects(self.settings, target_of(row)))
        return Done()

    async def _vcluster_services(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async with self._connect(host) as kube:
            await self._apply_all(kube, vc.vcluster_services(self.settings, target_of(row)))
        return Done()

    async def _vcluster_workload(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        target = target_of(row)
        async with self._connect(host) as kube:
            reached = await address(self.services, kube, target)
            if reached is None:
                return Wait(f"waiting for the LoadBalancer Service {target.name} to get an address")
            await self._apply_all(kube, vc.vcluster_workload(self.settings, target, reached))
        return Done()

    async def _vcluster_ready(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        target = target_of(row)
        async with self._connect(host) as kube:
            statefulset = await kube.get(
                host_api.path_of("apps/v1", "StatefulSet", target.namespace, target.name)
            )
            if not vc.statefulset_ready(statefulset):
                return Wait()
            secret = await kube.get(
                host_api.path_of(
                    "v1", "Secret", target.namespace, vc.admin_secret_name(target.name)
                )
            )
        return Done() if secret is not None else Wait()

    async def _kubeconfig_copy(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        target = target_of(row)
        async with self._connect(host) as kube:
            reach = await admin_reach(self.services, kube, target)
            self._reach[row.id] = reach
            await kube.apply(vc.system_namespace())
            await kube.apply(vc.kubeconfig_copy(target, reach.access, reach.address))
        return Done()

    async def _in_vcluster(
        self,
        row: CloudSpace,
        host: ClusterCredentials,
        work: Callable[[host_api.Kube], Awaitable[Outcome]],
    ) -> Outcome:
        reach = self._reach.get(row.id)
        if reach is None:
            async with self._connect(host) as kube:
                reach = await admin_reach(self.services, kube, target_of(row))
            self._reach[row.id] = reach
        async with self._connect(reach.credentials) as vcluster:
            return await work(vcluster)

    async def _tenant_account(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async def work(vcluster: host_api.Kube) -> Outcome:
            await self._apply_all(vcluster, vc.tenant_account())
            return Done()

        return await self._in_vcluster(row, host, work)

    async def _headroom_in(self, vcluster: host_api.Kube, row: CloudSpace) -> vc.Used:
        """Places the headroom quotas and defaults in every namespace; the usage."""
        namespaces = [
            str((ns.get("metadata") or {}).get("name"))
            for ns in await vcluster.items("/api/v1/namespaces")
            if (ns.get("status") or {}).get("phase") != "Terminating"
        ]
        used = vc.used_by_namespace(await vcluster.items("/api/v1/resourcequotas"))
        await self._apply_all(
            vcluster, vc.headroom_objects(namespaces, used, row.cpu, row.memory_mib)
        )
        return vc.Used(sum(u.cpu for u in used.values()), sum(u.memory_mib for u in used.values()))

    async def _headroom(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async def work(vcluster: host_api.Kube) -> Outcome:
            return Done(await self._headroom_in(vcluster, row))

        return await self._in_vcluster(row, host, work)

    async def _flux(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        if self._flux_objects is None:
            text = await host_api.read_manifests(self.settings.flux_manifests)
            self._flux_objects = vc.flux_objects(text)
        objects = self._flux_objects

        async def work(vcluster: host_api.Kube) -> Outcome:
            await self._apply_all(vcluster, objects)
            return Done()

        return await self._in_vcluster(row, host, work)

    async def _flux_ready(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async def work(vcluster: host_api.Kube) -> Outcome:
            deployments = await vcluster.items(
                host_api.path_of("apps/v1", "Deployment", vc.FLUX_NAMESPACE)
            )
            return Done() if vc.flux_installed(deployments) else Wait()

        return await self._in_vcluster(row, host, work)

    async def _refresh(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """READY: the host quota (a resize takes effect here), the headroom quotas in
        every namespace (new ones too), and the usage."""
        target = target_of(row)
        async with self._connect(host) as kube:
            await self._apply_all(kube, vc.host_namespace_objects(self.settings, target))
            reach = self._reach.get(row.id) or await admin_reach(self.services, kube, target)
        async with self._connect(reach.credentials) as vcluster:
            return Done(await self._headroom_in(vcluster, row))

    async def _delete_vcluster(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async with self._connect(host) as kube:
            for api_version, kind, namespace, name in vc.vcluster_object_paths(target_of(row)):
                await kube.delete(host_api.path_of(api_version, kind, namespace, name))
        return Done()

    async def _delete_namespace(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async with self._connect(host) as kube:
            await kube.delete(host_api.path_of("v1", "Namespace", None, target_of(row).namespace))
        return Done()

    async def _namespace_gone(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async with self._connect(host) as kube:
            namespace = await kube.get(
                host_api.path_of("v1", "Namespace", None, target_of(row).namespace)
            )
        return Done() if namespace is None else Wait(vc.namespace_blocker(namespace))

    async def _delete_kubeconfig(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async with self._connect(host) as kube:
            await kube.delete(
                host_api.path_of(
                    "v1", "Secret", vc.SYSTEM_NAMESPACE, vc.kubeconfig_copy_name(row.id)
                )
            )
        return Done()


Step = Callable[[Reconciler, CloudSpace, ClusterCredentials], Awaitable[Outcome]]
STEPS: dict[str, Step] = {
    "begin": Reconciler._begin,
    "capacity": Reconciler._capacity,
    "host-namespace": Reconciler._host_namespace,
    "vcluster-services": Reconciler._vcluster_services,
    "vcluster-workload": Reconciler._vcluster_workload,
    "vcluster-ready": Reconciler._vcluster_ready,
    "kubeconfig-copy": Reconciler._kubeconfig_copy,
    "tenant-account": Reconciler._tenant_account,
    "headroom": Reconciler._headroom,
    "flux": Reconciler._flux,
    "flux-ready": Reconciler._flux_ready,
    "refresh": Reconciler._refresh,
    "delete-vcluster": Reconciler._delete_vcluster,
    "delete-namespace": Reconciler._delete_namespace,
    "namespace-gone": Reconciler._namespace_gone,
    "delete-kubeconfig": Reconciler._delete_kubeconfig,
}
assert set(STEPS) == set(rules.PHASE_OF), "every lifecycle step has its work"
