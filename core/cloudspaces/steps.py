"""The CloudSpace reconciler's steps: what each persisted step does on the host space
and inside the vClusters, and whether it is done, waiting or failed.

The loop (core.cloudspaces.reconciler) claims a CloudSpace, runs its step here outside any
transaction, and persists the outcome. Every write is a server-side apply, so a step that
runs again (a crash, a lost lease) creates nothing twice.

A CloudSpace's own steps (capacity, host namespace; deletion) are its; from its vCluster's
release to READY's refresh, each step takes every vCluster of the CloudSpace through its
own steps (core.cloudspaces.vcluster_steps) up to the CloudSpace's step, and is done once
all are past it. So the CloudSpace is never ahead of its least advanced vCluster on its
way to READY; once READY it stays READY while a vCluster added later
comes up (its message names what that one waits for) or one removed goes; any vCluster
failing makes it FAILED, the message naming the vCluster, retried with backoff.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from core.cloudspaces import capacity as host_capacity
from core.cloudspaces import chart
from core.cloudspaces import lifecycle as rules
from core.cloudspaces import settings as cloudspace_settings
from core.cloudspaces import vclusters as vc
from core.cloudspaces.host_access import target_of
from core.cloudspaces.outcomes import Change, Done, Failed, Outcome, Wait
from core.cloudspaces.tenant import Used
from core.cloudspaces.vcluster_rules import REMOVAL_STEPS, Removal
from core.cloudspaces.vcluster_steps import WORK, VClusterWork
from core.common.errors import Problems
from core.common.services import Unit
from core.spaces.statuses import CloudSpacePhase
from db import admission as admission_rows
from db import cloudspaces as cloudspace_rows
from db import vclusters as vcluster_rows
from db.cloudspace_tables import CloudSpace
from db.vcluster_tables import VCluster
from providers import host as host_api
from providers.cluster_credentials import ClusterCredentials

# The share of the lease in which a run may start vCluster steps: with many vClusters the
# run ends, and what it did is written, instead of all of it running into the step's
# deadline (five sixths of the lease) and being done again; the rest wait for the next run.
SHARE_FOR_VCLUSTERS = 1 / 3

__all__ = ["STEPS", "Done", "Failed", "Outcome", "Steps", "Wait", "persist"]


class Steps(VClusterWork):
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

    async def _vclusters(self, row: CloudSpace, host: ClusterCredentials, upto: str) -> Outcome:
        """Every vCluster through its steps up to `upto` (removals too); done once all
        are past it, the changes to each carried in the outcome."""
        async with self.services.read() as session:
            found = list(await vcluster_rows.of_cloud_space(session, row.id))
        live = [v for v in found if v.step not in REMOVAL_STEPS]
        changes: list[Change] = []
        outcomes: list[tuple[VCluster, Outcome]] = []
        stop_at = time.monotonic() + self.settings.reconcile_lease_s * SHARE_FOR_VCLUSTERS
        for vcluster in found:
            target = target_of(row, vcluster, max(1, len(live)))
            change, outcome = await self._advance(row, vcluster, target, host, upto, stop_at)
            changes.append(change)
            # A removal holds the CloudSpace back only where it polls anyway (READY).
            if vcluster.step not in REMOVAL_STEPS or upto == rules.Step.REFRESH:
                outcomes.append((vcluster, outcome))
        return _together(outcomes, tuple(changes), many=len(found) > 1)

    async def _advance(
        self,
        row: CloudSpace,
        vcluster: VCluster,
        target: vc.Target,
        host: ClusterCredentials,
        upto: str,
        stop_at: float,
    ) -> tuple[Change, Outcome]:
        """One vCluster taken through as many steps as are done at once, up to `upto`,
        starting none after `stop_at` (it then waits for the next run)."""
        step, phase, message = vcluster.step, vcluster.phase, vcluster.message
        outcome: Outcome = Done()
        removed = False
        passed: list[str] = []
        while step in REMOVAL_STEPS or rules.ORDER[step] <= rules.ORDER[upto]:
            if time.monotonic() > stop_at:
                outcome = Wait(f"waiting for its turn at step {step}")
                break
            outcome = await WORK[step](self, row, target, host)
            if isinstance(outcome, Failed):
                if step not in REMOVAL_STEPS:
                    phase = CloudSpacePhase.FAILED
                message = outcome.reason
                break
            if isinstance(outcome, Wait):
                if step not in REMOVAL_STEPS:
                    phase = rules.PHASE_OF[step]
                message = outcome.message
                break
            message = None
            if step == Removal.GONE:
                removed = True
                break
            if step == Removal.DELETE:
                step = Removal.GONE
            elif step == rules.Step.REFRESH:
                phase = CloudSpacePhase.READY
                break
            else:
                step = rules.next_step(step) or step
                # READY is shown once its first refresh has placed every quota.
                if step != rules.Step.REFRESH and rules.PHASE_OF[step] != phase:
                    passed.append(phase)
                    phase = rules.PHASE_OF[step]
        change = Change(
            id=vcluster.id,
            name=vcluster.name,
            read_step=vcluster.step,
            previous=(vcluster.phase, vcluster.message),
            step=step,
            phase=phase,
            message=message,
            removed=removed,
            passed=tuple(passed[1:]),  # the first is the phase it had
        )
        return change, outcome

    async def _delete_vcluster(self, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        """Every vCluster's objects, then the sources they shared; the namespace takes the
        rest."""
        async with self.services.read() as session:
            found = list(await vcluster_rows.of_cloud_space(session, row.id))
        target = target_of(row)
        async with self._connect(host) as kube:
            for vcluster in found:
                await self.delete_objects(kube, target_of(row, vcluster, len(found)))
            for api_version, kind, name in (
                (chart.SOURCE_API, "OCIRepository", chart.FLUX_SOURCE),
                (chart.SOURCE_API, "HelmRepository", chart.CHART_REPOSITORY),
            ):
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
        """The kubeconfig copies (outside the namespace), every vCluster's."""
        async with self.services.read() as session:
            found = list(await vcluster_rows.of_cloud_space(session, row.id))
        names = {target_of(row).copy_name} | {target_of(row, v).copy_name for v in found}
        async with self._connect(host) as kube:
            for name in sorted(names):
                await kube.delete(
                    host_api.path_of("v1", "Secret", cloudspace_settings.SYSTEM_NAMESPACE, name)
                )
        return Done()


def _named(vcluster: VCluster, text: str | None, many: bool) -> str | None:
    if text is None or not many:
        return text
    return f"vCluster {vcluster.name}: {text}"


def _together(
    outcomes: list[tuple[VCluster, Outcome]], changes: tuple[Change, ...], many: bool
) -> Outcome:
    """The CloudSpace's outcome from its vClusters': the first failure, else the first
    wait, else done; the usage the last vCluster observed (each observes the whole
    CloudSpace's)."""
    usage: Used | None = None
    for _, outcome in outcomes:
        if not isinstance(outcome, Failed) and outcome.usage is not None:
            usage = outcome.usage
    for vcluster, outcome in outcomes:
        if isinstance(outcome, Failed):
            reason = _named(vcluster, outcome.reason, many) or outcome.reason
            return Failed(reason, outcome.retry_after_s, changes)
    for vcluster, outcome in outcomes:
        if isinstance(outcome, Wait):
            return Wait(_named(vcluster, outcome.message, many), usage, changes)
    return Done(usage, changes)


async def persist(unit: Unit, row: CloudSpace, outcome: Outcome) -> None:
    """The vClusters' changes, in the transaction of the CloudSpace's outcome (its row
    locked, the lease held): each only if the vCluster is still at the step read."""
    for change in outcome.vclusters:
        if change.removed:
            if not await vcluster_rows.delete_at(unit.session, change.id, change.read_step):
                continue
            await admission_rows.forget_vcluster(unit.session, row.id, change.name)
            await rules.record_phase(
                unit,
                row,
                change.previous[0],
                CloudSpacePhase.DELETED,
                None,
                vcluster_id=change.id,
            )
            continue
        now = (change.phase, change.message)
        if change.step == change.read_step and now == change.previous:
            continue
        written = await vcluster_rows.advance(
            unit.session,
            change.id,
            change.read_step,
            step=change.step,
            phase=change.phase,
            message=change.message,
        )
        if not written:
            continue
        previous = change.previous[0]
        for phase in change.passed:
            await rules.record_phase(unit, row, previous, phase, None, vcluster_id=change.id)
            previous = phase
        if now != change.previous:
            await rules.record_phase(
                unit, row, previous, change.phase, change.message, vcluster_id=change.id
            )


def _for_vclusters(step: str) -> StepWork:
    async def work(steps: Steps, row: CloudSpace, host: ClusterCredentials) -> Outcome:
        return await steps._vclusters(row, host, step)

    return work


StepWork = Callable[[Steps, CloudSpace, ClusterCredentials], Awaitable[Outcome]]
STEPS: dict[str, StepWork] = {
    rules.Step.BEGIN: Steps._begin,
    rules.Step.CAPACITY: Steps._capacity,
    rules.Step.HOST_NAMESPACE: Steps._host_namespace,
    **{step: _for_vclusters(step) for step in rules.VCLUSTER_STEPS},
    rules.Step.DELETE_VCLUSTER: Steps._delete_vcluster,
    rules.Step.DELETE_NAMESPACE: Steps._delete_namespace,
    rules.Step.NAMESPACE_GONE: Steps._namespace_gone,
    rules.Step.DELETE_KUBECONFIG: Steps._delete_kubeconfig,
}
assert set(STEPS) == set(rules.PHASE_OF), "every lifecycle step has its work"
