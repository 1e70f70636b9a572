"""What each of a CloudSpace's vClusters goes through on the host and inside itself: its
Helm release, its exported kubeconfig, its tenant account, the headroom quotas and the
admission webhook inside, Flux through the host's Flux, READY's refresh, and its removal.

The CloudSpace's reconciler (one lease per CloudSpace) runs these for every vCluster of
the CloudSpace from the CloudSpace's own step (core.cloudspaces.steps): a vCluster is
taken through as many of its steps as are done at once, up to the CloudSpace's step.
Every write is a server-side apply, so a step that runs again creates nothing twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from core.cloudspaces import admission, chart, kubeconfigs, tenant
from core.cloudspaces import lifecycle as rules
from core.cloudspaces import settings as cloudspace_settings
from core.cloudspaces import vclusters as vc
from core.cloudspaces.host_access import AdminReach, address, admin_reach, connect
from core.cloudspaces.outcomes import Done, Failed, Outcome, Wait
from core.cloudspaces.vcluster_rules import Removal
from core.common.services import Services, utcnow
from db import admission as admission_rows
from db.cloudspace_tables import CloudSpace
from providers import host as host_api
from providers.cluster_credentials import ClusterCredentials

STEP_TIMEOUT_S = 20.0


class VClusterWork:
    def __init__(self, services: Services, on_call: Callable[[], None]) -> None:
        self.services = services
        self.settings = services.cloudspaces
        # Counts each call to a host or vCluster API server (the reconciler's metric).
        self._on_call = on_call
        # Each vCluster's address and admin access, read from the host once per run of
        # steps (never stored), by (CloudSpace, vCluster name): a later run reads them
        # again, rotated certificates too.
        self._reach: dict[tuple[str, str], AdminReach] = {}

    def forget(self, cloud_space_id: str) -> None:
        """The run of steps for this CloudSpace ended: its vClusters' access is read anew."""
        for key in [key for key in self._reach if key[0] == cloud_space_id]:
            del self._reach[key]

    def _connect(
        self, credentials: ClusterCredentials
    ) -> AbstractAsyncContextManager[host_api.Kube]:
        return connect(self.services, credentials, timeout_s=STEP_TIMEOUT_S, on_call=self._on_call)

    async def _apply_all(self, kube: host_api.Kube, manifests: list[dict[str, object]]) -> None:
        for manifest in manifests:
            await kube.apply(manifest)

    async def _release(self, kube: host_api.Kube, target: vc.Target) -> str | None:
        """Applies the chart's repository and the vCluster's HelmRelease; the address it
        exports its kubeconfig with (None: a LoadBalancer without one yet)."""
        reached = await address(self.services, kube, target)
        await kube.apply(chart.chart_repository(self.settings, target))
        await kube.apply(chart.helm_release(self.settings, target, reached))
        return reached

    async def release(
        self, row: CloudSpace, target: vc.Target, host: ClusterCredentials
    ) -> Outcome:
        async with self._connect(host) as kube:
            await self._release(kube, target)
        return Done()

    async def release_ready(
        self, row: CloudSpace, target: vc.Target, host: ClusterCredentials
    ) -> Outcome:
        """The HelmRelease Ready at its generation and the exported kubeconfig Secret; a
        Helm failure is FAILED with Helm's words."""
        async with self._connect(host) as kube:
            release = await kube.get(
                host_api.path_of(chart.HELM_API, "HelmRelease", target.namespace, target.name)
            )
            state = chart.condition_of(release)
            if state.stalled:  # tried again at this step's retry, once the cause is fixed
                path = host_api.path_of(
                    chart.HELM_API, "HelmRelease", target.namespace, target.name
                )
                await kube.annotate(path, chart.reset_request(utcnow()))
            if state.failed:
                return Failed(f"the vCluster's HelmRelease failed: {state.message}")
            if not state.ready:
                return Wait(f"the vCluster's HelmRelease: {state.message or 'waiting'}")
            if chart.release_server(release) is None:
                # A LoadBalancer had no address at install: export with the one it has now.
                if await self._release(kube, target) is None:
                    return Wait(
                        f"waiting for the LoadBalancer Service {target.name} to get an address"
                    )
                return Wait("the vCluster's HelmRelease: exporting the kubeconfig with its address")
            secret = await kube.get(
                host_api.path_of(
                    "v1",
                    "Secret",
                    target.namespace,
                    cloudspace_settings.admin_secret_name(target.name),
                )
            )
        if secret is None:
            return Wait("the vCluster's HelmRelease: waiting for the exported kubeconfig")
        return Done()

    async def kubeconfig_copy(
        self, row: CloudSpace, target: vc.Target, host: ClusterCredentials
    ) -> Outcome:
        async with self._connect(host) as kube:
            reach = await admin_reach(self.services, kube, target)
            self._reach[(row.id, target.name)] = reach
            await kube.apply(vc.system_namespace())
            await kube.apply(kubeconfigs.kubeconfig_copy(target, reach.access, reach.address))
        return Done()

    async def _in_vcluster(
        self,
        row: CloudSpace,
        target: vc.Target,
        host: ClusterCredentials,
        work: Callable[[host_api.Kube], Awaitable[Outcome]],
    ) -> Outcome:
        reach = self._reach.get((row.id, target.name))
        if reach is None:
            async with self._connect(host) as kube:
                reach = await admin_reach(self.services, kube, target)
            self._reach[(row.id, target.name)] = reach
        async with self._connect(reach.credentials) as vcluster:
            return await work(vcluster)

    async def tenant_account(
        self, row: CloudSpace, target: vc.Target, host: ClusterCredentials
    ) -> Outcome:
        async def work(vcluster: host_api.Kube) -> Outcome:
            await self._apply_all(vcluster, tenant.tenant_account())
            return Done()

        return await self._in_vcluster(row, target, host, work)

    async def _headroom_in(
        self, vcluster: host_api.Kube, row: CloudSpace, target: vc.Target
    ) -> tenant.Used:
        """Places the headroom quotas and defaults in every namespace, counting what the
        CloudSpace's other vClusters use; the CloudSpace's usage."""
        namespaces = [
            str((ns.get("metadata") or {}).get("name"))
            for ns in await vcluster.items("/api/v1/namespaces")
            if (ns.get("status") or {}).get("phase") != "Terminating"
        ]
        used = tenant.used_by_namespace(await vcluster.items("/api/v1/resourcequotas"))
        async with self.services.read() as session:
            cpu_m, memory_bytes = await admission_rows.observed(session, row.id, target.name)
        elsewhere = tenant.Used(cpu_m / 1000, memory_bytes / 2**20)
        await self._apply_all(
            vcluster,
            tenant.headroom_objects(namespaces, used, row.cpu, row.memory_mib, elsewhere),
        )
        # Strict quota: the webhook registered, the pods observed; what the pods of every
        # vCluster of the CloudSpace request in all is the usage.
        return await admission.keep(self.services, row.id, target.name, vcluster)

    async def headroom(
        self, row: CloudSpace, target: vc.Target, host: ClusterCredentials
    ) -> Outcome:
        async def work(vcluster: host_api.Kube) -> Outcome:
            return Done(await self._headroom_in(vcluster, row, target))

        return await self._in_vcluster(row, target, host, work)

    async def flux(self, row: CloudSpace, target: vc.Target, host: ClusterCredentials) -> Outcome:
        """Flux's manifests, applied into the vCluster by the host's Flux."""
        async with self._connect(host) as kube:
            await kube.apply(chart.flux_source(self.settings, target))
            await kube.apply(chart.flux_kustomization(target))
        return Done()

    async def flux_ready(
        self, row: CloudSpace, target: vc.Target, host: ClusterCredentials
    ) -> Outcome:
        """The remote Kustomization Ready, and Flux's controllers available inside."""
        async with self._connect(host) as kube:
            applied = await kube.get(
                host_api.path_of(
                    chart.KUSTOMIZE_API,
                    "Kustomization",
                    target.namespace,
                    chart.flux_kustomization_name(target),
                )
            )
        state = chart.condition_of(applied, chart.KUSTOMIZE_FAILURES)
        if state.failed:
            return Failed(f"installing Flux into the vCluster failed: {state.message}")
        if not state.ready:
            return Wait(f"Flux into the vCluster: {state.message or 'waiting'}")

        async def work(vcluster: host_api.Kube) -> Outcome:
            deployments = await vcluster.items(
                host_api.path_of("apps/v1", "Deployment", cloudspace_settings.FLUX_NAMESPACE)
            )
            if chart.flux_deployments_available(deployments):
                return Done()
            return Wait("Flux into the vCluster: waiting for its controllers to be available")

        return await self._in_vcluster(row, target, host, work)

    async def refresh(
        self, row: CloudSpace, target: vc.Target, host: ClusterCredentials
    ) -> Outcome:
        """READY: the release's values (a resize, or a vCluster added or removed beside it,
        takes effect here, as a Helm upgrade), the headroom quotas in every namespace (new
        ones too), and the usage."""
        async with self._connect(host) as kube:
            applied = await kube.get(
                host_api.path_of(chart.HELM_API, "HelmRelease", target.namespace, target.name)
            )
            # Read first: most passes change nothing, and a read costs the host less.
            wanted = chart.helm_release(
                self.settings, target, await address(self.services, kube, target)
            )
            if chart.release_differs(applied, wanted):
                await self._release(kube, target)
            reach = self._reach.get((row.id, target.name)) or await admin_reach(
                self.services, kube, target
            )
        async with self._connect(reach.credentials) as vcluster:
            return Done(await self._headroom_in(vcluster, row, target))

    async def delete_objects(self, kube: host_api.Kube, target: vc.Target) -> None:
        """Flux inside first (its Kustomization reaches the vCluster), then the release,
        which Helm uninstalls, and spacedock's copy of its kubeconfig."""
        paths = [
            host_api.path_of(
                chart.KUSTOMIZE_API,
                "Kustomization",
                target.namespace,
                chart.flux_kustomization_name(target),
            ),
            host_api.path_of(chart.HELM_API, "HelmRelease", target.namespace, target.name),
            host_api.path_of(
                "v1", "Secret", cloudspace_settings.SYSTEM_NAMESPACE, target.copy_name
            ),
        ]
        for path in paths:
            # A host without Flux answers 404, which delete takes as gone.
            await kube.delete(path)

    async def remove(self, row: CloudSpace, target: vc.Target, host: ClusterCredentials) -> Outcome:
        async with self._connect(host) as kube:
            await self.delete_objects(kube, target)
        return Done()

    async def removed(
        self, row: CloudSpace, target: vc.Target, host: ClusterCredentials
    ) -> Outcome:
        """Done once Helm has uninstalled the release (its control plane and the exported
        kubeconfig are gone)."""
        lingering = [
            ("apps/v1", "StatefulSet", target.name),
            ("v1", "Secret", cloudspace_settings.admin_secret_name(target.name)),
        ]
        async with self._connect(host) as kube:
            for api_version, kind, name in lingering:
                if await kube.get(host_api.path_of(api_version, kind, target.namespace, name)):
                    return Wait(f"being removed: waiting for Helm to uninstall {kind} {name}")
        self._reach.pop((row.id, target.name), None)
        return Done()


VClusterStep = Callable[
    [VClusterWork, CloudSpace, vc.Target, ClusterCredentials], Awaitable[Outcome]
]
WORK: dict[str, VClusterStep] = {
    rules.Step.VCLUSTER_RELEASE: VClusterWork.release,
    rules.Step.VCLUSTER_READY: VClusterWork.release_ready,
    rules.Step.KUBECONFIG_COPY: VClusterWork.kubeconfig_copy,
    rules.Step.TENANT_ACCOUNT: VClusterWork.tenant_account,
    rules.Step.HEADROOM: VClusterWork.headroom,
    rules.Step.FLUX: VClusterWork.flux,
    rules.Step.FLUX_READY: VClusterWork.flux_ready,
    rules.Step.REFRESH: VClusterWork.refresh,
    Removal.DELETE: VClusterWork.remove,
    Removal.GONE: VClusterWork.removed,
}
assert set(WORK) == {*rules.VCLUSTER_STEPS, *Removal}, "every vCluster step has its work"
