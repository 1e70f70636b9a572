"""The CloudSpace reconciler's steps: what each persisted step does on the host space
and inside the vCluster, and whether it is done, waiting or failed.

The loop (core.cloudspaces.reconciler) claims a CloudSpace, runs its step here outside any
transaction, and persists the outcome. Every write is a server-side apply, so a step that
runs again (a crash, a lost lease) creates nothing twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from core.cloudspaces import admission, chart, kubeconfigs, tenant
from core.cloudspaces import capacity as host_capacity
from core.cloudspaces import lifecycle as rules
from core.cloudspaces import settings as cloudspace_settings
from core.cloudspaces import vclusters as vc
from core.cloudspaces.host_access import AdminReach, address, admin_reach, connect, target_of
from core.common.errors import Problems
from core.common.services import Services, Unit
from db import cloudspaces as cloudspace_rows
from db.cloudspace_tables import CloudSpace
from providers import host as host_api
from providers.cluster_credentials import ClusterCredentials

STEP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Done:
    usage: tenant.Used | None = None


@dataclass(frozen=True)
class Wait:
    message: str | None = None


@dataclass(frozen=True)
class Failed:
    reason: str
    # The soonest a retry is worth it, when the failure says (providers.errors.TemporaryError).
    retry_after_s: float | None = None


Outcome = Done | Wait | Failed


class Steps:
    def __init__(self, services: Services, on_call: Callable[[], None]) -> None:
        self.services = services
        self.settings = services.cloudspaces
        # Counts each call to a host or vCluster API server (the reconciler's metric).
        self._on_call = on_call
        # Each vCluster's address and admin access, read from the host once per run of
        # steps (never stored): a later run reads them again, rotated certificates too.
        self._reach: dict[str, AdminReach] = {}

    def forget(self, cloud_space_id: str) -> None:
        """The run of steps for this CloudSpace ended: its vCluster's access is read anew."""
        self._reach.pop(cloud_space_id, None)

    def _connect(
        self, credentials: ClusterCredentials
    ) -> AbstractAsyncContextManager[host_api.Kube]:
        return connect(self.services, credentials, timeout_s=STEP_TIMEOUT_S, on_call=self._on_call)

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
        capacity = await host_capacity.capacity_of(self.services, host_space)
        problems = Problems()
        async with self.services.read() as session:
            await host_capacity.check_capacity(
                Unit(session),
                self.services,
                problems,
                row.host_space_id,
                row.id,
                row.cpu,
                row.memory_mib,
                capacity,
                row.org_id,
            )
        if problems:
            return Failed("QUOTA_EXCEEDED: " + "; ".join(e.message for e in problems.errors))
        return Done()

    async def _host_namespace(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """The namespace, on a host that runs Flux (else refused, saying what to install)."""
        async with self._connect(host) as kube:
            missing = [
                crd
                for crd in chart.FLUX_CRDS
                if await kube.get(
                    host_api.path_of(
                        "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, crd
                    )
                )
                is None
            ]
            if missing:
                return Failed(chart.MISSING_FLUX.format(missing=", ".join(missing)))
            await kube.apply(vc.host_namespace_object(target_of(row)))
        return Done()

    async def _release(self, kube: host_api.Kube, row: CloudSpace) -> str | None:
        """Applies the chart's repository and the vCluster's HelmRelease; the address it
        exports its kubeconfig with (None: a LoadBalancer without one yet)."""
        target = target_of(row)
        reached = await address(self.services, kube, target)
        await kube.apply(chart.chart_repository(self.settings, target))
        await kube.apply(chart.helm_release(self.settings, target, reached))
        return reached

    async def _vcluster_release(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async with self._connect(host) as kube:
            await self._release(kube, row)
        return Done()

    async def _vcluster_ready(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """The HelmRelease Ready at its generation and the exported kubeconfig Secret; a
        Helm failure is FAILED with Helm's words."""
        target = target_of(row)
        async with self._connect(host) as kube:
            release = await kube.get(
                host_api.path_of(chart.HELM_API, "HelmRelease", target.namespace, target.name)
            )
            state = chart.condition_of(release)
            if state.failed:
                return Failed(f"the vCluster's HelmRelease failed: {state.message}")
            if not state.ready:
                return Wait(f"the vCluster's HelmRelease: {state.message or 'waiting'}")
            if chart.release_server(release) is None:
                # A LoadBalancer had no address at install: export with the one it has now.
                if await self._release(kube, row) is None:
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

    async def _kubeconfig_copy(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        target = target_of(row)
        async with self._connect(host) as kube:
            reach = await admin_reach(self.services, kube, target)
            self._reach[row.id] = reach
            await kube.apply(vc.system_namespace())
            await kube.apply(kubeconfigs.kubeconfig_copy(target, reach.access, reach.address))
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
            await self._apply_all(vcluster, tenant.tenant_account())
            return Done()

        return await self._in_vcluster(row, host, work)

    async def _headroom_in(self, vcluster: host_api.Kube, row: CloudSpace) -> tenant.Used:
        """Places the headroom quotas and defaults in every namespace; the usage."""
        namespaces = [
            str((ns.get("metadata") or {}).get("name"))
            for ns in await vcluster.items("/api/v1/namespaces")
            if (ns.get("status") or {}).get("phase") != "Terminating"
        ]
        used = tenant.used_by_namespace(await vcluster.items("/api/v1/resourcequotas"))
        await self._apply_all(
            vcluster, tenant.headroom_objects(namespaces, used, row.cpu, row.memory_mib)
        )
        # h22admit's hook (strict quota): the webhook registered, the pods observed; what
        # they request in all is the usage.
        return await admission.keep(self.services, row.id, row.name, vcluster)

    async def _headroom(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        async def work(vcluster: host_api.Kube) -> Outcome:
            return Done(await self._headroom_in(vcluster, row))

        return await self._in_vcluster(row, host, work)

    async def _flux(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """Flux's manifests, applied into the vCluster by the host's Flux."""
        target = target_of(row)
        async with self._connect(host) as kube:
            await kube.apply(chart.flux_source(self.settings, target))
            await kube.apply(chart.flux_kustomization(target))
        return Done()

    async def _flux_ready(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """The remote Kustomization Ready, and Flux's controllers available inside."""
        target = target_of(row)
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

        return await self._in_vcluster(row, host, work)

    async def _refresh(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """READY: the release's values (a resize of the chart's host quota takes effect
        here, as a Helm upgrade), the headroom quotas in
        every namespace (new ones too), and the usage."""
        target = target_of(row)
        async with self._connect(host) as kube:
            applied = await kube.get(
                host_api.path_of(chart.HELM_API, "HelmRelease", target.namespace, target.name)
            )
            # Read first: most passes change nothing, and a read costs the host less.
            wanted = chart.helm_release(
                self.settings, target, await address(self.services, kube, target)
            )
            if chart.release_differs(applied, wanted):
                await self._release(kube, row)
            reach = self._reach.get(row.id) or await admin_reach(self.services, kube, target)
        async with self._connect(reach.credentials) as vcluster:
            return Done(await self._headroom_in(vcluster, row))

    async def _delete_vcluster(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """Flux inside first (its Kustomization reaches the vCluster), then the release,
        which Helm uninstalls; the namespace takes the rest."""
        target = target_of(row)
        paths = [
            (chart.KUSTOMIZE_API, "Kustomization", chart.flux_kustomization_name(target)),
            (chart.SOURCE_API, "OCIRepository", chart.FLUX_SOURCE),
            (chart.HELM_API, "HelmRelease", target.name),
            (chart.SOURCE_API, "HelmRepository", chart.CHART_REPOSITORY),
        ]
        async with self._connect(host) as kube:
            for api_version, kind, name in paths:
                # A host without Flux answers 404, which delete takes as gone.
                await kube.delete(host_api.path_of(api_version, kind, target.namespace, name))
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
                    "v1",
                    "Secret",
                    cloudspace_settings.SYSTEM_NAMESPACE,
                    cloudspace_settings.kubeconfig_copy_name(row.id),
                )
            )
        return Done()


StepWork = Callable[[Steps, CloudSpace, ClusterCredentials], Awaitable[Outcome]]
STEPS: dict[str, StepWork] = {
    rules.Step.BEGIN: Steps._begin,
    rules.Step.CAPACITY: Steps._capacity,
    rules.Step.HOST_NAMESPACE: Steps._host_namespace,
    rules.Step.VCLUSTER_RELEASE: Steps._vcluster_release,
    rules.Step.VCLUSTER_READY: Steps._vcluster_ready,
    rules.Step.KUBECONFIG_COPY: Steps._kubeconfig_copy,
    rules.Step.TENANT_ACCOUNT: Steps._tenant_account,
    rules.Step.HEADROOM: Steps._headroom,
    rules.Step.FLUX: Steps._flux,
    rules.Step.FLUX_READY: Steps._flux_ready,
    rules.Step.REFRESH: Steps._refresh,
    rules.Step.DELETE_VCLUSTER: Steps._delete_vcluster,
    rules.Step.DELETE_NAMESPACE: Steps._delete_namespace,
    rules.Step.NAMESPACE_GONE: Steps._namespace_gone,
    rules.Step.DELETE_KUBECONFIG: Steps._delete_kubeconfig,
}
assert set(STEPS) == set(rules.PHASE_OF), "every lifecycle step has its work"
