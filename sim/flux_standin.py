"""Flux's controllers (v2.9.4: source-controller v1.9.4, helm-controller v1.6.3,
kustomize-controller v1.9.4) as their objects show them, on the host stand-in and
inside any vCluster stand-in that runs Flux.

What a test registers (`host.flux`, a `Flux`; callable from any thread):

* Git repositories: `flux.git("https://git.example/app.git")` gives a `GitRemote`;
  `.commit({"deploy/app.yaml": text}, branch="main")` returns the sha, `.tag("v1")`
  tags the branch head; `private(username=, password=)` / `private(token=)` /
  `private(ssh=True)` make it want a matching `secretRef`.
* Helm repositories: `flux.helm("https://charts.example")` gives a `HelmRemote`;
  `.add_chart(name, version, render=..., defaults=, schema=)` where `render(values,
  release, namespace)` returns the objects the chart installs (or `objects=[...]`);
  an `oci://` URL is an OCI registry of charts (HelmRepository `type: oci`, or an
  OCIRepository + `chartRef`).
* The vCluster chart 0.36.1: `flux.serve_vcluster_chart("https://charts.loft.sh")`
  (or a mirror's URL, http(s) or oci); see vcluster_chart.py for what it checks
  and renders.
* OCI artifacts: `flux.oci(url).push(tag, files)`; Flux's own manifests:
  `flux.serve_flux_manifests("oci://ghcr.io/fluxcd/flux-manifests", tag="v2.9.4",
  registry="ghcr.io/fluxcd")` (gotk-components.yaml, see flux_manifests.py).
* `flux.unreachable(url)` / `flux.reachable(url)`: a registered URL that stops
  answering. A URL never registered is unknown (`no such host`). Nothing is fetched
  from the network: every remote lives in memory, so tests stay on loopback.

What the controllers do with the objects of a cluster (reconciled when they change or
something their last reconcile read changes, sim/flux_schedule.py, not on `interval`
timers; `suspend: true` leaves an object alone; `reconcile.fluxcd.io/requestedAt` is
copied to `status.lastHandledReconcileAt`):

* GitRepository, OCIRepository, HelmRepository: Ready=True `Succeeded` with
  `status.artifact` (revision `main@sha1:<40 hex>`, `<tag>@sha256:<hex>`,
  `sha256:<index digest>`) and `observedGeneration`; else Ready=False with Flux's
  reason and message (`GitOperationFailed` `failed to checkout and determine
  revision: unable to clone '<url>': couldn't find remote ref "refs/heads/x"`,
  `AuthenticationFailed` `failed to get secret 'ns/name': secrets "name" not found`,
  `Failed` `failed to fetch Helm repository index: ...`, `OCIArtifactPullFailed`).
  A HelmRepository of `type: oci` is static (no status), as in source-controller v1.
* HelmRelease: a HelmChart `<ns>-<name>` beside its HelmRepository (`pulled
  'vcluster' chart with version '0.36.1'`, or `InvalidChartReference` `no 'vcluster'
  chart with version matching '9.9.9' found`), then Helm: values coalesced and
  checked, objects rendered and applied (server-side, field manager
  `helm-controller`, Helm's labels and annotations) into the release namespace of
  the same cluster or of `spec.kubeConfig.secretRef`'s; Helm waits for workloads
  (not with `disableWait`): `Ready=Unknown Progressing`, then Ready=True
  `InstallSucceeded` / `UpgradeSucceeded` `Helm install succeeded for release
  <ns>/<name>.v1 with chart <chart>@<version>`, or Ready=False `InstallFailed`
  `Helm install failed for release <ns>/<release> with chart <chart>@<version>:
  <Helm's error>` and Stalled `RetriesExceeded` once `install.remediation.retries`
  are spent; the failure counts are cleared and Helm tries again when the generation,
  chart version or values change, or on a reset request (`reconcile.fluxcd.io/resetAt`
  equal to a new `requestedAt`, `status.lastHandledResetAt`); `SourceNotReady`, `ValuesError`, `RESTClientError` for what comes
  before. `status.history` (newest first), `lastAttemptedRevision`,
  `lastAttemptedConfigDigest`, `lastAttemptedReleaseAction`, `helmChart`,
  `storageNamespace`, `inventory`; Helm's release Secret
  `sh.helm.release.v1.<release>.v<N>`. Deleting it uninstalls.
* Kustomization: the source's artifact files at `spec.path` (plain YAML, or a
  `kustomization.yaml` with `resources` and `namespace`), `targetNamespace` and
  `images` applied, staged (Namespaces and CRDs first), dry-run then server-side apply
  (field manager `kustomize-controller`) into the same cluster or the one its
  `spec.kubeConfig.secretRef {name, key}` kubeconfig points at (it must exist, hold
  that key, name a cluster of this stand-in with its CA and a credential that
  cluster accepts); `status.inventory.entries` (`<ns>_<name>_<group>_<kind>`, `v`),
  `lastAppliedRevision`, `lastAttemptedRevision`; with `wait` or `healthChecks`,
  Ready only once those objects are current (Deployments available at their
  generation, as kstatus reads them); `prune` deletes what left the inventory, and
  everything when the Kustomization is deleted. Ready=True `ReconciliationSucceeded`
  `Applied revision: <rev>`; else `ArtifactFailed`, `ReconciliationFailed`
  (`unable to read KubeConfig secret '<ns>/<name>' error: secrets "<name>" not
  found`), `BuildFailed`, `HealthCheckFailed`, `DependencyNotReady`.

A cluster runs each kind only while the controller for it runs: on the host from the
start (`HostStandIn(flux=True)`, the default), inside a vCluster once Deployment
`source-controller` / `helm-controller` / `kustomize-controller` in `flux-system` is
available (Flux's manifests applied and ready).

Fault switches: `flux.stall(kind, namespace, name)` keeps an object progressing
(Ready=Unknown), `flux.fail(kind, namespace, name, message, reason=None)` makes it
fail with exactly that message, `flux.heal()` drops both. Waiting without sleeps:
`flux.wait_ready(kind, namespace, name, api=None)` (returns the object; raises with
its conditions when the timeout passes), `flux.wait_for(check)` for anything else,
both also as `until_ready` / `until` coroutines.

What it does not do: Buckets, ExternalArtifacts, notification and image automation,
Helm tests, rollbacks and drift detection, post-renderers, kustomize patches,
components and variable substitution (a Kustomization that asks for them fails with
BuildFailed saying so), `serviceAccountName` impersonation, verification (cosign),
finalizers (deletion is immediate). Real controllers answer on intervals and retry
with backoff; these answer as soon as anything they depend on changes.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import gzip
import hashlib
import json
import re
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from sim import vcluster_chart
from sim.flux_manifests import CONTROLLER_OF, NAMESPACE, flux_install
from sim.flux_schedule import RESOLVED, Schedule
from sim.kube_admission import UserInfo
from sim.kube_api import READS, ApiRequest, KubeApi, Obj, Resource, now_text

T = TypeVar("T")

APPLY_TYPE = "application/apply-patch+yaml"
SOURCE_GROUP = "source.toolkit.fluxcd.io"
HELM_GROUP = "helm.toolkit.fluxcd.io"
KUSTOMIZE_GROUP = "kustomize.toolkit.fluxcd.io"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"
RESET_AT = "reconcile.fluxcd.io/resetAt"
STORAGE = "http://source-controller.flux-system.svc.cluster.local."
KIND_ORDER = (
    "GitRepository",
    "OCIRepository",
    "HelmRepository",
    "HelmChart",
    "HelmRelease",
    "Kustomization",
)
PLURALS = {
    "GitRepository": (SOURCE_GROUP, "gitrepositories"),
    "OCIRepository": (SOURCE_GROUP, "ocirepositories"),
    "HelmRepository": (SOURCE_GROUP, "helmrepositories"),
    "HelmChart": (SOURCE_GROUP, "helmcharts"),
    "HelmRelease": (HELM_GROUP, "helmreleases"),
    "Kustomization": (KUSTOMIZE_GROUP, "kustomizations"),
}
KIND_OF = {where: kind for kind, where in PLURALS.items()}
DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
FIRST_STAGE = ("CustomResourceDefinition", "Namespace")
RETRY_S = 0.05  # between a failed Helm action and its remediation retry


def seconds_of(text: str | None, default: float) -> float:
    if not text:
        return default
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in DURATION.findall(text)) or default


def go_duration(seconds: float) -> str:
    """time.Duration.String(): 5m0s, 1h0m0s, 30s, 500ms."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _sha256(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


class FluxError(Exception):
    """One failure as a Flux controller reports it: a condition reason and message."""

    def __init__(self, reason: str, message: str, *, stalled: bool = False) -> None:
        super().__init__(message)
        self.reason, self.message, self.stalled = reason, message, stalled


# -- the remotes a test registers ---------------------------------------------
@dataclass
class GitRemote:
    """A Git repository: refs to commits, commits to files."""

    url: str
    flux: Flux
    refs: dict[str, str] = field(default_factory=dict)  # refs/heads/main -> sha
    commits: dict[str, dict[str, str]] = field(default_factory=dict)
    credentials: dict[str, str] | None = None  # the secret data it wants

    def commit(self, files: dict[str, str], branch: str = "main") -> str:
        """A new commit of exactly these files at the head of `branch`; its sha."""
        sha = hashlib.sha1(
            json.dumps([self.url, branch, len(self.commits), files], sort_keys=True).encode()
        ).hexdigest()
        self.commits[sha] = dict(files)
        self.refs[f"refs/heads/{branch}"] = sha
        self.flux.changed()
        return sha

    def tag(self, name: str, sha: str | None = None, branch: str = "main") -> str:
        found = sha or self.refs[f"refs/heads/{branch}"]
        self.refs[f"refs/tags/{name}"] = found
        self.flux.changed()
        return found

    def private(
        self, *, username: str = "", password: str = "", token: str = "", ssh: bool = False
    ) -> None:
        """From now on a clone needs a secretRef with these keys (SSH: an identity)."""
        if ssh:
            self.credentials = {"identity": ""}
        elif token:
            self.credentials = {"bearerToken": token}
        else:
            self.credentials = {"username": username, "password": password}
        self.flux.changed()


@dataclass
class Chart:
    """One version of a chart: its defaults and schema, and what it installs."""

    name: str
    version: str
    render: Callable[[Obj, str, str], list[Obj]]
    defaults: Obj = field(default_factory=dict)
    schema: Obj | None = None
    app_version: str = ""
    template_failure: Callable[[Obj], str | None] | None = None
    vcluster: bool = False

    @property
    def digest(self) -> str:
        return "sha256:" + _sha256([self.name, self.version, self.defaults])


@dataclass
class HelmRemote:
    """A Helm repository (http/https index) or an OCI registry of charts."""

    url: str
    flux: Flux
    charts: dict[str, dict[str, Chart]] = field(default_factory=dict)

    @property
    def oci(self) -> bool:
        return self.url.startswith("oci://")

    def add_chart(
        self,
        name: str,
        version: str,
        *,
        render: Callable[[Obj, str, str], list[Obj]] | None = None,
        objects: list[Obj] | None = None,
        defaults: Obj | None = None,
        schema: Obj | None = None,
        app_version: str = "",
    ) -> Chart:
        """A chart version; `render(values, release, namespace)` (or the fixed
        `objects`) is what it installs."""
        fixed = copy.deepcopy(objects or [])
        chart = Chart(
            name,
            version,
            render or (lambda values, release, namespace: copy.deepcopy(fixed)),
            copy.deepcopy(defaults or {}),
            schema,
            app_version or version,
        )
        self.charts.setdefault(name, {})[version] = chart
        self.flux.changed()
        return chart

    def index_digest(self) -> str:
        return "sha256:" + _sha256({n: sorted(v) for n, v in self.charts.items()})


@dataclass
class OciArtifact:
    digest: str
    files: dict[str, str]


@dataclass
class OciRemote:
    url: str
    flux: Flux
    tags: dict[str, OciArtifact] = field(default_factory=dict)

    def push(self, tag: str, files: dict[str, str]) -> str:
        """Push an artifact of these files under `tag`; its digest."""
        digest = "sha256:" + _sha256([self.url, tag, files])
        self.tags[tag] = OciArtifact(digest, dict(files))
        self.flux.changed()
        return digest


def vcluster_chart_release() -> Chart:
    return Chart(
        vcluster_chart.CHART_NAME,
        vcluster_chart.CHART_VERSION,
        vcluster_chart.render,
        vcluster_chart.default_values(),
        vcluster_chart.values_schema(),
        vcluster_chart.APP_VERSION,
        vcluster_chart.template_failure,
        vcluster=True,
    )


# -- versions ----------------------------------------------------------------
def _version_key(text: str) -> tuple[int, int, int, str] | None:
    match = re.fullmatch(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+.*)?", text)
    if match is None:
        return None
    return int(match[1]), int(match[2] or 0), int(match[3] or 0), match[4] or "~"


Version = tuple[int, int, int, str]


def _check(op: str | None, bound: Version) -> Callable[[Version], bool]:
    def meets(k: Version) -> bool:
        if op == "^":
            upper = (bound[0] + 1, 0, 0) if bound[0] else (0, bound[1] + 1, 0)
            return bound[:3] <= k[:3] < upper
        if op == "~":
            return k[:3] >= bound[:3] and k[:2] == bound[:2]
        if op == ">=":
            return k[:3] >= bound[:3]
        if op == ">":
            return k[:3] > bound[:3]
        if op == "<=":
            return k[:3] <= bound[:3]
        if op == "<":
            return k[:3] < bound[:3]
        return k == bound

    return meets


def _wildcard(fixed: list[int]) -> Callable[[Version], bool]:
    return lambda k: list(k[: len(fixed)]) == fixed


def semver_best(constraint: str, versions: Iterable[str]) -> str | None:
    """The highest version meeting a Masterminds-style constraint (`*`, `1.2.3`,
    `>=1 <2`, `^1.2`, `~1.2`, `1.x`), pre-releases only when asked for."""
    candidates = [(k, v) for v in versions if (k := _version_key(v)) is not None]
    wanted = constraint.strip() or "*"
    if wanted in {v for _, v in candidates}:
        return wanted
    checks: list[Callable[[Version], bool]] = []
    for term in re.split(r"[\s,]+", wanted):
        if term in ("*", "x", "X", ""):
            continue
        operator = re.match(r"^(>=|<=|>|<|=|\^|~)?", term)
        op = operator.group(1) if operator else None
        bound_text = term[len(op or "") :]
        parts = bound_text.lstrip("v").split(".")
        if any(p in ("x", "X", "*") for p in parts):
            checks.append(_wildcard([int(p) for p in parts if p.isdigit()]))
            continue
        bound = _version_key(bound_text)
        if bound is None:
            return None
        checks.append(_check(op, bound))
    prerelease = "-" in wanted
    matching = [
        (k, v)
        for k, v in candidates
        if all(check(k) for check in checks) and (prerelease or k[3] == "~")
    ]
    return max(matching)[1] if matching else None


# -- conditions and status ----------------------------------------------------
Condition = tuple[str, str, str, str]  # type, status, reason, message


def conditions_of(old: Obj | None, generation: int, wanted: list[Condition]) -> list[Obj]:
    """Conditions as Flux writes them; a condition keeps its lastTransitionTime while
    its status stays."""
    previous = {c.get("type"): c for c in (old or {}).get("conditions") or []}
    found = []
    for kind, state, reason, message in wanted:
        before = previous.get(kind)
        moment = (
            before["lastTransitionTime"] if before and before.get("status") == state else now_text()
        )
        found.append(
            {
                "type": kind,
                "status": state,
                "observedGeneration": generation,
                "lastTransitionTime": moment,
                "reason": reason,
                "message": message[:32768],
            }
        )
    return found


def ready_condition(obj: Obj | None) -> Obj | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            found: Obj = condition
            return found
    return None


def is_ready(obj: Obj | None) -> bool:
    """Ready=True for the object's current generation, as `flux` and kstatus read it."""
    if obj is None:
        return False
    condition = ready_condition(obj)
    generation = obj["metadata"].get("generation")
    status = obj.get("status") or {}
    return (
        condition is not None
        and condition.get("status") == "True"
        and status.get("observedGeneration") == generation
        and condition.get("observedGeneration", generation) == generation
    )


def workload_current(obj: Obj) -> tuple[bool, str]:
    """kstatus for the kinds that take time: (current, why not)."""
    kind, status = obj.get("kind"), obj.get("status") or {}
    generation = obj["metadata"].get("generation")
    spec = obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        observed = status.get("observedGeneration")
        if observed is None:
            return False, "status.observedGeneration not found"
        if observed != generation:
            return (
                False,
                f"{kind} generation is {generation}, but latest observed generation is {observed}",
            )
        wanted = spec.get("replicas", 1)
        ready = status.get("readyReplicas", 0) or 0
        if ready < wanted:
            return False, f"Ready: {ready}/{wanted}"
        if kind == "Deployment" and (status.get("availableReplicas") or 0) < wanted:
            return False, f"Available: {status.get('availableReplicas') or 0}/{wanted}"
    if kind == "Namespace" and (status.get("phase") or "Active") != "Active":
        return False, "Namespace is terminating"
    if (
        kind in KIND_ORDER
        and obj.get("apiVersion", "").split("/")[0]
        in (
            SOURCE_GROUP,
            HELM_GROUP,
            KUSTOMIZE_GROUP,
        )
        and not is_ready(obj)
        and obj["kind"] != "HelmRepository"
    ):
        condition = ready_condition(obj)
        return False, (condition or {}).get("message", "not ready")
    return True, ""


def inventory_id(obj: Obj) -> str:
    meta = obj["metadata"]
    group = obj["apiVersion"].rpartition("/")[0]
    name = meta["name"].replace(":", "__") if group == "rbac.authorization.k8s.io" else meta["name"]
    return f"{meta.get('namespace', '')}_{name}_{group}_{obj['kind']}"


def fmt_object(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    if meta.get("namespace"):
        return f"{obj.get('kind')}/{meta['namespace']}/{meta.get('name')}"
    return f"{obj.get('kind')}/{meta.get('name')}"


# -- clusters ----------------------------------------------------------------
@dataclass
class Cluster:
    """One cluster Flux can write to: its API, and who Flux is there."""

    api: KubeApi
    user: UserInfo


Resolver = Callable[[Obj], "Cluster | str"]  # a parsed kubeconfig -> a cluster, or why not


class ClusterFlux:
    """Flux's controllers on one cluster."""

    def __init__(self, flux: Flux, api: KubeApi, *, installed: bool) -> None:
        self.flux, self.api, self.installed = flux, api, installed
        self._done: dict[tuple[str, str, str], Any] = {}  # what was last applied, per object
        api.listeners.append(self._touched)
        api.deletion_listeners.append(self._deleted)

    def _touched(self, resource: Resource | None, namespace: str, name: str) -> None:
        self.flux.touched(self, resource, namespace, name)

    def wake(self, key: tuple[str, str, str]) -> None:
        """Reconcile this object (kind, namespace, name) soon: its timer fired."""
        self.flux.schedule.wake(self, *key)
        self.flux._schedule()

    def running(self, controller: str) -> bool:
        if self.installed:
            return True
        deployment = self.api._find(self.api.resource("apps", "deployments"), NAMESPACE, controller)
        return deployment is not None and workload_current(deployment)[0]

    def _resource(self, kind: str) -> Resource | None:
        group, plural = PLURALS[kind]
        version = {"HelmRelease": "v2"}.get(kind, "v1")
        return self.api.resources.get((group, version, plural))

    async def reconcile(self, everything: bool) -> None:
        """One pass over the objects due (flux_schedule.py), kind by kind in KIND_ORDER
        so a source written in this pass is read by what uses it in the same pass."""
        every = self.flux.schedule.whole(self) or everything
        for kind in KIND_ORDER:
            group, plural = PLURALS[kind]
            stored = self.api._store.get((group, plural)) or {}
            due = self.flux.schedule.take(self, kind, every, stored)
            resource = self._resource(kind)
            if resource is None:
                continue
            for namespace, name in due:
                await self._visit(kind, resource, namespace, name)

    async def _visit(self, kind: str, resource: Resource, namespace: str, name: str) -> None:
        """Reconcile one object, recording what it reads: a change to any of it wakes it."""
        reads: set[tuple[Any, ...]] = set()
        token = READS.set(reads)
        try:
            if not self.running(CONTROLLER_OF[kind]):
                return  # woken when the controller's Deployment changes
            current = self.api._find(resource, namespace, name)
            if current is None:
                reads.clear()
                return
            if (current.get("spec") or {}).get("suspend"):
                return
            await self._reconcile(kind, resource, current)
        except Exception:  # a stand-in bug must be loud, never a silent pass
            self.flux.errors.append(traceback.format_exc())
        finally:
            READS.reset(token)
            self.flux.schedule.record((self, kind, namespace, name), reads)

    async def _reconcile(self, kind: str, resource: Resource, obj: Obj) -> None:
        self.flux.reconciled += 1
        key = (kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        switch = self.flux.switch(*key)
        if switch is not None:
            self._set(resource, obj, self._switched(kind, obj, *switch))
            return
        handler = {
            "GitRepository": self._git,
            "OCIRepository": self._oci,
            "HelmRepository": self._helm_repository,
            "HelmChart": self._helm_chart,
            "HelmRelease": self._helm_release,
            "Kustomization": self._kustomization,
        }[kind]
        status = await handler(obj)
        requested = (obj["metadata"].get("annotations") or {}).get(REQUESTED_AT)
        if status is None and requested != (obj.get("status") or {}).get("lastHandledReconcileAt"):
            status = self._base(obj)  # handled, nothing else to change
        if status is not None:
            self._set(resource, obj, status)

    # -- status plumbing -----------------------------------------------------
    def _set(self, resource: Resource, obj: Obj, status: Obj) -> None:
        meta = obj["metadata"]
        current = self.api._find(resource, meta.get("namespace", ""), meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        requested = (meta.get("annotations") or {}).get(REQUESTED_AT)
        if requested:
            status["lastHandledReconcileAt"] = requested
        if current.get("status") == status:
            return
        updated = {**current, "status": status}
        self.api._validate_status(resource, updated)  # the stand-in writes only what Flux may
        self.api._put(resource, updated, current)

    def _base(self, obj: Obj) -> Obj:
        return copy.deepcopy(obj.get("status") or {})

    def _switched(self, kind: str, obj: Obj, mode: str, message: str, reason: str | None) -> Obj:
        status = self._base(obj)
        generation = obj["metadata"]["generation"]
        status["observedGeneration"] = generation
        if mode == "stall":
            status["conditions"] = conditions_of(
                status,
                generation,
                [
                    ("Ready", "Unknown", "Progressing", "Reconciliation in progress"),
                    ("Reconciling", "True", "Progressing", "Reconciliation in progress"),
                ],
            )
        else:
            default = {
                "HelmRelease": "InstallFailed",
                "Kustomization": "ReconciliationFailed",
                "GitRepository": "GitOperationFailed",
                "OCIRepository": "OCIArtifactPullFailed",
            }.get(kind, "Failed")
            status["conditions"] = conditions_of(
                status, generation, [("Ready", "False", reason or default, message)]
            )
        return status

    def _source_status(
        self,
        obj: Obj,
        artifact: Obj | None,
        ready_message: str,
        error: FluxError | None,
        reason: str = "Succeeded",
    ) -> Obj:
        status = self._base(obj)
        generation = obj["metadata"]["generation"]
        status["observedGeneration"] = generation
        if error is None:
            status["artifact"] = artifact
            status["conditions"] = conditions_of(
                status,
                generation,
                [
                    ("Ready", "True", reason, ready_message),
                    ("ArtifactInStorage", "True", reason, ready_message),
                ],
            )
        else:
            wanted: list[Condition] = [
                ("Ready", "False", error.reason, error.message),
                ("FetchFailed", "True", error.reason, error.message),
            ]
            if error.stalled:
                wanted.append(("Stalled", "True", error.reason, error.message))
            status["conditions"] = conditions_of(status, generation, wanted)
        return status

    def _chart_status(self, obj: Obj, found: tuple[Chart, str] | FluxError) -> Obj:
        if isinstance(found, FluxError):
            return self._source_status(obj, None, "", found)
        chart, version = found
        message = f"pulled '{chart.name}' chart with version '{version}'"
        artifact = self._artifact("HelmChart", obj, version, chart.digest)
        status = self._source_status(obj, artifact, message, None, reason="ChartPullSucceeded")
        status["observedChartName"] = chart.name
        return status

    def _artifact(self, kind: str, obj: Obj, revision: str, content: Any) -> Obj:
        meta = obj["metadata"]
        digest, size = self.flux.digest_of(revision, content)
        path = f"{kind.lower()}/{meta['namespace']}/{meta['name']}/{digest[:12]}.tar.gz"
        previous = (obj.get("status") or {}).get("artifact") or {}
        stamp = (
            previous.get("lastUpdateTime") if previous.get("revision") == revision else now_text()
        )
        return {
            "digest": f"sha256:{digest}",
            "lastUpdateTime": stamp or now_text(),
            "path": path,
            "revision": revision,
            "size": size,
            "url": f"{STORAGE}/{path}",
        }

    def _secret(self, namespace: str, name: str) -> Obj | None:
        return self.api._find(self.api.resource("", "secrets"), namespace, name)

    @staticmethod
    def _secret_data(secret: Obj) -> dict[str, str]:
        decoded = {
            k: base64.b64decode(v).decode(errors="replace")
            for k, v in (secret.get("data") or {}).items()
        }
        return {**decoded, **(secret.get("stringData") or {})}

    # -- sources ----------------------------------------------------------------
    async def _git(self, obj: Obj) -> Obj:
        spec, meta = obj["spec"], obj["metadata"]
        url = spec["url"]
        try:
            credentials = self._git_credentials(meta["namespace"], spec, url)
            remote = self.flux.git_remote(
                url, "failed to checkout and determine revision: unable to clone"
            )
            if remote.credentials is not None and not _authorized(remote.credentials, credentials):
                raise FluxError(
                    "GitOperationFailed",
                    f"failed to checkout and determine revision: unable to clone '{url}': authentication required",
                )
            revision, sha = _git_ref(remote, spec.get("ref") or {}, url)
        except FluxError as error:
            return self._source_status(obj, None, "", error)
        artifact = self._artifact("GitRepository", obj, revision, remote.commits[sha])
        return self._source_status(
            obj, artifact, f"stored artifact for revision '{revision}'", None
        )

    def _git_credentials(self, namespace: str, spec: Obj, url: str) -> dict[str, str] | None:
        ref = spec.get("secretRef")
        if not ref:
            return None
        secret = self._secret(namespace, ref["name"])
        if secret is None:
            raise FluxError(
                "AuthenticationFailed",
                f"failed to get secret '{namespace}/{ref['name']}': secrets \"{ref['name']}\" not found",
            )
        data = self._secret_data(secret)
        if url.startswith("ssh://") and "known_hosts" not in data:
            raise FluxError(
                "AuthenticationFailed",
                "failed to configure authentication options: invalid 'ssh' auth option: 'known_hosts' is required",
            )
        return data

    async def _oci(self, obj: Obj) -> Obj:
        spec = obj["spec"]
        try:
            artifact_of = self.flux.oci_artifact(spec["url"], spec.get("ref") or {})
        except FluxError as error:
            return self._source_status(obj, None, "", error)
        revision, content = artifact_of
        artifact = self._artifact("OCIRepository", obj, revision, content)
        return self._source_status(obj, artifact, f"stored artifact for digest '{revision}'", None)

    async def _helm_repository(self, obj: Obj) -> Obj | None:
        spec = obj["spec"]
        if spec.get("type") == "oci":
            return {} if obj.get("status") else None  # static since source-controller v1
        url = spec["url"]
        try:
            if url.startswith("oci://"):
                raise FluxError(
                    "URLInvalid",
                    "invalid Helm repository URL: 'oci' URL scheme cannot be used with 'default' HelmRepository type",
                    stalled=True,
                )
            remote = self.flux.helm_remote(url)
        except FluxError as error:
            return self._source_status(obj, None, "", error)
        revision = remote.index_digest()
        artifact = self._artifact("HelmRepository", obj, revision, revision)
        artifact["revision"] = revision
        return self._source_status(obj, artifact, f"stored artifact: revision '{revision}'", None)

    def _chart_of(self, chart_spec: Obj, namespace: str) -> tuple[Chart, str] | FluxError:
        """The chart a HelmChart (or a HelmRelease's chart template) names, from its
        HelmRepository: the chart and its artifact revision, or why not."""
        source = chart_spec.get("sourceRef") or {}
        kind, name = source.get("kind"), source.get("name", "")
        ns = source.get("namespace") or namespace
        if kind != "HelmRepository":
            return FluxError(
                "UnsupportedSourceKind",
                f"failed to get source: the stand-in serves charts of HelmRepositories, not {kind}",
            )
        resource = self._resource("HelmRepository")
        repository = self.api._find(resource, ns, name) if resource else None
        if repository is None:
            return FluxError(
                "SourceUnavailable",
                f'failed to get source: helmrepositories.source.toolkit.fluxcd.io "{name}" not found',
            )
        url = repository["spec"]["url"]
        oci = repository["spec"].get("type") == "oci"
        if not oci and not (
            (repository.get("status") or {}).get("artifact") and is_ready(repository)
        ):
            return FluxError(
                "NoSourceArtifact", f"no artifact available for HelmRepository source '{name}'"
            )
        try:
            remote = self.flux.helm_remote(url)
        except FluxError as error:
            return FluxError("ChartPullError", f"chart pull error: {error.message}")
        wanted = str(chart_spec.get("version") or "*")
        versions = remote.charts.get(chart_spec.get("chart", ""), {})
        found = semver_best(wanted, versions)
        if found is None:
            chart = chart_spec.get("chart", "")
            detail = (
                f"no '{chart}' chart with version matching '{wanted}' found"
                if versions
                else "no chart name found"
            )
            return FluxError(
                "InvalidChartReference",
                f"invalid chart reference: failed to get chart version for remote reference: {detail}",
                stalled=True,
            )
        return versions[found], found

    async def _helm_chart(self, obj: Obj) -> Obj:
        return self._chart_status(obj, self._chart_of(obj["spec"], obj["metadata"]["namespace"]))

    # -- HelmRelease ---------------------------------------------------------------
    async def _helm_release(self, obj: Obj) -> Obj | None:
        return await HelmReleaseReconcile(self, obj).run()

    # -- Kustomization -------------------------------------------------------------
    async def _kustomization(self, obj: Obj) -> Obj | None:
        return await KustomizationReconcile(self, obj).run()

    # -- targets -------------------------------------------------------------------
    def target(self, namespace: str, kube_config: Obj | None, controller: str) -> Cluster | str:
        """The cluster an object applies to: this one, or the one its kubeConfig names."""
        if not kube_config:
            return Cluster(self.api, UserInfo.service_account(NAMESPACE, controller))
        ref = kube_config.get("secretRef") or {}
        name, key = ref.get("name", ""), ref.get("key")
        secret = self._secret(namespace, name)
        if secret is None:
            return f"unable to read KubeConfig secret '{namespace}/{name}' error: secrets \"{name}\" not found"
        data = self._secret_data(secret)
        text = data.get(key) if key else data.get("value", data.get("value.yaml"))
        if text is None:
            return f"KubeConfig secret '{namespace}/{name}' does not contain a '{key or 'value'}' key with a kubeconfig"
        try:
            config = copy.deepcopy(_kubeconfig(text))
        except yaml.YAMLError as error:
            return f"failed to load kubeconfig from secret '{namespace}/{name}': {error}"
        if not isinstance(config, dict):
            return f"failed to load kubeconfig from secret '{namespace}/{name}': not a kubeconfig"
        return self.flux.resolve(config)

    def _deleted(self, resource: Resource, obj: Obj) -> None:
        kind = resource.kind
        if kind not in ("HelmRelease", "Kustomization") or resource.group not in (
            HELM_GROUP,
            KUSTOMIZE_GROUP,
        ):
            return
        self._done.pop((kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]), None)
        self.flux.loop.create_task(self._cleanup(kind, obj))

    async def _cleanup(self, kind: str, obj: Obj) -> None:
        try:
            if kind == "HelmRelease":
                await HelmReleaseReconcile(self, obj).uninstall()
            elif (obj.get("spec") or {}).get("prune"):
                await KustomizationReconcile(self, obj).prune_all()
        except Exception:
            self.flux.errors.append(traceback.format_exc())


def _authorized(wanted: dict[str, str], given: dict[str, str] | None) -> bool:
    if given is None:
        return False
    if "identity" in wanted:
        return bool(given.get("identity"))
    return all(given.get(k) == v for k, v in wanted.items())


def _git_ref(remote: GitRemote, ref: Obj, url: str) -> tuple[str, str]:
    """The revision and commit a GitRepository's ref picks: commit > name > semver >
    tag > branch (default master)."""
    unable = f"failed to checkout and determine revision: unable to clone '{url}'"

    def head(full: str) -> str:
        if full not in remote.refs:
            raise FluxError("GitOperationFailed", f'{unable}: couldn\'t find remote ref "{full}"')
        return remote.refs[full]

    def short(full: str) -> str:
        return full.removeprefix("refs/heads/").removeprefix("refs/tags/").removeprefix("refs/")

    if ref.get("commit"):
        sha = ref["commit"]
        if sha not in remote.commits:
            raise FluxError("GitOperationFailed", f"{unable}: object not found")
        branch = ref.get("branch")
        return (f"{branch}@sha1:{sha}" if branch else f"sha1:{sha}"), sha
    if ref.get("name"):
        return f"{short(ref['name'])}@sha1:{head(ref['name'])}", head(ref["name"])
    if ref.get("semver"):
        tags = [r.removeprefix("refs/tags/") for r in remote.refs if r.startswith("refs/tags/")]
        best = semver_best(ref["semver"], tags)
        if best is None:
            raise FluxError(
                "GitOperationFailed", f"{unable}: no match found for semver: {ref['semver']}"
            )
        sha = remote.refs[f"refs/tags/{best}"]
        return f"{best}@sha1:{sha}", sha
    if ref.get("tag"):
        sha = head(f"refs/tags/{ref['tag']}")
        return f"{ref['tag']}@sha1:{sha}", sha
    branch = ref.get("branch") or "master"
    sha = head(f"refs/heads/{branch}")
    return f"{branch}@sha1:{sha}", sha


# -- applying objects into a cluster ------------------------------------------
class Applier:
    """Server-side apply into a cluster as a Flux controller does it."""

    def __init__(self, cluster: Cluster, manager: str) -> None:
        self.cluster, self.manager = cluster, manager

    def resource(self, obj: Obj) -> Resource | None:
        group, _, version = obj.get("apiVersion", "").rpartition("/")
        return next(
            (
                r
                for r in self.cluster.api.resources.values()
                if (r.group, r.version, r.kind) == (group, version, obj.get("kind"))
            ),
            None,
        )

    async def apply(self, obj: Obj, *, dry_run: bool = False) -> tuple[int, Obj]:
        resource = self.resource(obj)
        if resource is None:
            return 404, {
                "message": f'no matches for kind "{obj.get("kind")}" in version "{obj.get("apiVersion")}"',
                "reason": "NotFound",
            }
        meta = obj.get("metadata") or {}
        path = self.cluster.api.path_for(resource, meta.get("namespace", ""), meta.get("name", ""))
        query = {"fieldManager": self.manager, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        token = READS.set(None)  # what the API server reads to answer is not Flux's input
        try:
            answer = await self.cluster.api.serve(
                ApiRequest(
                    "PATCH", path, query, APPLY_TYPE, json.dumps(obj).encode(), self.cluster.user
                )
            )
        finally:
            READS.reset(token)
        return answer.code, answer.body

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        resource = self.resource({"apiVersion": api_version, "kind": kind})
        if resource is None:
            return
        path = self.cluster.api.path_for(resource, namespace, name)
        token = READS.set(None)
        try:
            await self.cluster.api.serve(
                ApiRequest("DELETE", path, {}, "application/json", b"", self.cluster.user)
            )
        finally:
            READS.reset(token)

    def find(self, obj: Obj) -> Obj | None:
        resource = self.resource(obj)
        if resource is None:
            return None
        meta = obj["metadata"]
        return self.cluster.api._find(
            resource, meta.get("namespace", "") if resource.namespaced else "", meta["name"]
        )

    def namespaced(self, obj: Obj) -> bool | None:
        resource = self.resource(obj)
        return None if resource is None else resource.namespaced


def _failure(obj: Obj, code: int, body: Obj, *, dry_run: bool) -> str:
    """fluxcd/pkg ssa's words for a refused object."""
    message = str(body.get("message", ""))
    named = fmt_object(obj)
    if code == 404:
        if not (obj.get("metadata") or {}).get("namespace"):
            return f"{named} namespace not specified: {message}"
        return f"{named} not found: {message}"
    reason = body.get("reason") or ""
    shown = f" ({reason})" if reason else ""
    return (
        f"{named} dry-run failed{shown}: {message}"
        if dry_run
        else f"{named} apply failed: {message}"
    )


# -- HelmRelease ---------------------------------------------------------------
class Reconcile:
    """One pass of a controller over one object: what it read, and the status it makes."""

    kind = ""

    def __init__(self, owner: ClusterFlux, obj: Obj) -> None:
        self.owner, self.obj = owner, obj
        self.meta, self.spec = obj["metadata"], obj.get("spec") or {}
        self.namespace = self.meta["namespace"]
        self.generation = self.meta["generation"]
        self.status = copy.deepcopy(obj.get("status") or {})
        self.key = (self.kind, self.namespace, self.meta["name"])

    def _finish(self, conditions: list[Condition], **fields: Any) -> Obj:
        self.status.update(fields)
        self.status["observedGeneration"] = self.generation
        self.status["conditions"] = conditions_of(self.status, self.generation, conditions)
        return self.status

    def _failed(self, reason: str, message: str) -> Obj:
        return self._finish([("Ready", "False", reason, message)])


class HelmReleaseReconcile(Reconcile):
    """One pass of helm-controller over one HelmRelease."""

    kind = "HelmRelease"

    def __init__(self, owner: ClusterFlux, obj: Obj) -> None:
        super().__init__(owner, obj)
        target = self.spec.get("targetNamespace")
        self.release_namespace = target or self.namespace
        self.release = self.spec.get("releaseName") or release_name(self.meta["name"], target)
        self.storage_namespace = self.spec.get("storageNamespace") or self.namespace

    def _chart_name(self) -> str:
        return f"{self.namespace}-{self.meta['name']}"

    async def run(self) -> Obj | None:
        found = await self._chart()
        if isinstance(found, dict):
            return found
        chart, revision = found
        values = self._values()
        if isinstance(values, str):
            return self._failed("ValuesError", values)
        cluster = self.owner.target(self.namespace, self.spec.get("kubeConfig"), "helm-controller")
        if isinstance(cluster, str):
            return self._failed("RESTClientError", cluster)
        digest = "sha256:" + _sha256(values)
        annotations = self.meta.get("annotations") or {}
        wanted = (
            self.generation,
            chart.name,
            revision,
            digest,
            annotations.get("reconcile.fluxcd.io/forceAt"),
            self.meta["uid"],
        )
        done = self.owner._done.get(self.key)
        action = "upgrade" if (self.status.get("history") or []) and self._deployed() else "install"
        handled_before = self.status.get("lastHandledResetAt")
        reset = self._must_reset_failures(revision, digest)
        if done is not None and done["wanted"] == wanted and done.get("failed") and not reset:
            retry = done.get("retry_at")
            if retry is None or self.owner.flux.loop.time() < retry:
                # Stalled until the spec changes or a reset, or waiting to retry.
                changed = self.status.get("lastHandledResetAt") != handled_before
                return self.status if changed else None
            done = None
        if reset:
            done = None
        elif done is None and self._retries_spent(action):
            # Stalled: helm-controller reads that from the counts, not from its memory.
            changed = self.status.get("lastHandledResetAt") != handled_before
            return self.status if changed else None
        if done is None or done["wanted"] != wanted or done.get("cluster") is not cluster.api:
            failures = self.status.get(
                "installFailures" if action == "install" else "upgradeFailures", 0
            )
            return await self._act(
                chart, revision, values, digest, cluster, wanted, action, failures
            )
        return self._waited(chart, revision, done, cluster)

    def _must_reset_failures(self, revision: str, digest: str) -> bool:
        """helm-controller's MustResetFailures: the failure counts are cleared, so a
        Stalled release is tried again, when the generation, chart version or values
        differ from the last attempt, or a reset is requested (`reconcile.fluxcd.io/
        resetAt` equal to `requestedAt`, both not handled yet: fluxcd/pkg's
        HandleAnnotationRequest, which records the resetAt it saw either way)."""
        annotations = self.meta.get("annotations") or {}
        reset_at = annotations.get(RESET_AT)
        requested = False
        if reset_at is not None:
            handled = self.status.get("lastHandledResetAt")
            self.status["lastHandledResetAt"] = reset_at
            requested = (
                reset_at == annotations.get(REQUESTED_AT)
                and self.status.get("lastHandledReconcileAt") != reset_at
                and handled != reset_at
            )
        changed = bool(self.status) and (
            self.status.get("lastAttemptedGeneration") != self.generation
            or self.status.get("lastAttemptedRevision") != revision
            or self.status.get("lastAttemptedConfigDigest") != digest
        )
        if not (requested or changed):
            return False
        for counter in ("failures", "installFailures", "upgradeFailures"):
            self.status.pop(counter, None)
        return requested

    def _retries_spent(self, action: str) -> bool:
        key = "installFailures" if action == "install" else "upgradeFailures"
        counter = int(self.status.get(key) or 0)
        retries = int(((self.spec.get(action) or {}).get("remediation") or {}).get("retries") or 0)
        return counter > 0 and retries >= 0 and counter > retries

    def _deployed(self) -> bool:
        return any(entry.get("status") == "deployed" for entry in self.status.get("history") or [])

    async def _chart(self) -> tuple[Chart, str] | Obj:
        """The chart: through a HelmChart beside its HelmRepository, or a chartRef."""
        if self.spec.get("chartRef"):
            ref = self.spec["chartRef"]
            if ref.get("kind") != "OCIRepository":
                return self._failed(
                    "ArtifactFailed",
                    f"could not get Source object: the stand-in serves chartRef of OCIRepository, not {ref.get('kind')}",
                )
            resource = self.owner._resource("OCIRepository")
            ns = ref.get("namespace") or self.namespace
            source = self.owner.api._find(resource, ns, ref["name"]) if resource else None
            if source is None:
                return self._failed(
                    "ArtifactFailed",
                    f'could not get Source object: ocirepositories.source.toolkit.fluxcd.io "{ref["name"]}" not found',
                )
            if not is_ready(source):
                message = (ready_condition(source) or {}).get(
                    "message", "latest generation of object has not been reconciled"
                )
                return self._failed(
                    "SourceNotReady", f"OCIRepository '{ns}/{ref['name']}' is not ready: {message}"
                )
            chart = self.owner.flux.oci_chart(
                source["spec"]["url"], source["spec"].get("ref") or {}
            )
            if chart is None:
                return self._failed(
                    "ArtifactFailed",
                    f"failed to load chart from OCIRepository '{ns}/{ref['name']}': no chart in artifact",
                )
            digest = source["status"]["artifact"]["digest"].removeprefix("sha256:")[:12]
            return chart, f"{chart.version}+{digest}"
        template = ((self.spec.get("chart") or {}).get("spec")) or {}
        source_ns = (template.get("sourceRef") or {}).get("namespace") or self.namespace
        helm_chart = await self._ensure_helm_chart(template, source_ns)
        ready = is_ready(helm_chart)
        if not ready:
            condition = ready_condition(helm_chart)
            stalled = next(
                (
                    c
                    for c in (helm_chart or {}).get("status", {}).get("conditions", [])
                    if c["type"] == "Stalled" and c["status"] == "True"
                ),
                None,
            )
            message = (stalled or condition or {}).get(
                "message", "latest generation of object has not been reconciled"
            )
            if (
                helm_chart is not None
                and (helm_chart.get("status") or {}).get("observedGeneration")
                != helm_chart["metadata"]["generation"]
            ):
                message = "latest generation of object has not been reconciled"
            return self._failed(
                "SourceNotReady",
                f"HelmChart '{source_ns}/{self._chart_name()}' is not ready: {message}",
            )
        found = self.owner._chart_of(template, self.namespace)
        if isinstance(found, FluxError):
            return self._failed(
                "SourceNotReady",
                f"HelmChart '{source_ns}/{self._chart_name()}' is not ready: {found.message}",
            )
        return found

    async def _ensure_helm_chart(self, template: Obj, namespace: str) -> Obj | None:
        resource = self.owner._resource("HelmChart")
        if resource is None:
            return None
        source = template.get("sourceRef") or {}
        desired: Obj = {
            "apiVersion": f"{SOURCE_GROUP}/v1",
            "kind": "HelmChart",
            "metadata": {
                "name": self._chart_name(),
                "namespace": namespace,
                "labels": {
                    "helm.toolkit.fluxcd.io/name": self.meta["name"],
                    "helm.toolkit.fluxcd.io/namespace": self.namespace,
                },
            },
            "spec": {
                "chart": template.get("chart", ""),
                "version": template.get("version") or "*",
                "sourceRef": {
                    "kind": source.get("kind", "HelmRepository"),
                    "name": source.get("name", ""),
                },
                "interval": template.get("interval") or self.spec.get("interval", "5m"),
                "reconcileStrategy": template.get("reconcileStrategy") or "ChartVersion",
            },
        }
        existing = self.owner.api._find(resource, namespace, self._chart_name())
        if existing is None or existing.get("spec") != {
            **(existing.get("spec") or {}),
            **desired["spec"],
        }:
            applier = Applier(
                Cluster(self.owner.api, UserInfo.service_account(NAMESPACE, "helm-controller")),
                "helm-controller",
            )
            code, body = await applier.apply(desired)
            if code >= 400:
                self.owner.flux.errors.append(f"HelmChart apply refused: {body}")
                return None
        self.status["helmChart"] = f"{namespace}/{self._chart_name()}"
        return self.owner.api._find(resource, namespace, self._chart_name())

    def _values(self) -> Obj | str:
        merged: Obj = {}
        for ref in self.spec.get("valuesFrom") or []:
            kind, name = ref.get("kind"), ref.get("name", "")
            key = ref.get("valuesKey") or "values.yaml"
            plural = "secrets" if kind == "Secret" else "configmaps"
            found = self.owner.api._find(self.owner.api.resource("", plural), self.namespace, name)
            if found is None:
                if ref.get("optional"):
                    continue
                return f"could not resolve {kind} chart values reference '{self.namespace}/{name}' with key '{key}': {plural} \"{name}\" not found"
            data = (
                ClusterFlux._secret_data(found)
                if kind == "Secret"
                else dict(found.get("data") or {})
            )
            if key not in data:
                return f"could not resolve {kind} chart values reference '{self.namespace}/{name}' with key '{key}': key not found"
            if ref.get("targetPath"):
                return "the stand-in does not support valuesFrom[].targetPath"
            try:
                loaded = yaml.safe_load(data[key]) or {}
            except yaml.YAMLError as error:
                return f"unable to read values from key '{key}' in {kind} '{self.namespace}/{name}': {error}"
            merged = vcluster_chart.coalesce(merged, loaded)
        values: Obj = vcluster_chart.coalesce(merged, self.spec.get("values") or {})
        return values

    async def _act(
        self,
        chart: Chart,
        revision: str,
        values: Obj,
        digest: str,
        cluster: Cluster,
        wanted: tuple[Any, ...],
        action: str,
        failures: int,
    ) -> Obj:
        version = (
            len(self.status.get("history") or []) + 1
            if action == "install"
            else max((e.get("version", 0) for e in self.status.get("history") or []), default=0) + 1
        )
        self.status.update(
            lastAttemptedGeneration=self.generation,
            lastAttemptedRevision=revision,
            lastAttemptedConfigDigest=digest,
            lastAttemptedReleaseAction=action,
            storageNamespace=self.storage_namespace,
        )
        error = await self._install(chart, values, cluster, version)
        if error is not None:
            counter = "installFailures" if action == "install" else "upgradeFailures"
            self.status[counter] = failures + 1
            self.status["failures"] = self.status.get("failures", 0) + 1
            retries = int(
                (((self.spec.get(action) or {}).get("remediation") or {}).get("retries")) or 0
            )
            verb = "install" if action == "install" else "upgrade"
            message = (
                f"Helm {verb} failed for release {self.release_namespace}/{self.release} with chart "
                f"{chart.name}@{chart.version}: {error}"
            )
            spent = retries >= 0 and failures + 1 > retries
            retry_at = None if spent else self.owner.flux.loop.time() + RETRY_S
            if retry_at is not None:
                self.owner.flux.loop.call_later(RETRY_S, self.owner.wake, self.key)
            self.owner._done[self.key] = {
                "wanted": wanted,
                "failed": True,
                "retry_at": retry_at,
                "cluster": cluster.api,
            }
            reason = "InstallFailed" if action == "install" else "UpgradeFailed"
            conditions: list[Condition] = [
                ("Ready", "False", reason, message),
                ("Released", "False", reason, message),
            ]
            if spent:
                attempts = failures + 1
                conditions.append(
                    (
                        "Stalled",
                        "True",
                        "RetriesExceeded",
                        f"Failed to {verb} after {attempts} attempt(s)",
                    )
                )
            self._history(chart, version, digest, "failed", action)
            return self._finish(conditions)
        timeout = seconds_of(
            (self.spec.get(action) or {}).get("timeout") or self.spec.get("timeout"), 300
        )
        deadline = self.owner.flux.loop.time() + timeout
        self.owner.flux.loop.call_later(timeout, self.owner.wake, self.key)
        self.owner._done[self.key] = {
            "wanted": wanted,
            "failed": False,
            "cluster": cluster.api,
            "version": version,
            "action": action,
            "digest": digest,
            "deadline": deadline,
            "waited": False,
            "timeout": timeout,
        }
        self._history(chart, version, digest, "pending-" + action, action)
        waited = self._waited(chart, revision, self.owner._done[self.key], cluster)
        return waited if waited is not None else self.status

    async def _install(
        self, chart: Chart, values: Obj, cluster: Cluster, version: int
    ) -> str | None:
        """Render and apply the chart; Helm's error, or None."""
        failure = vcluster_chart.release_name_failure(self.release)
        if failure:
            return failure
        merged = vcluster_chart.coalesce(chart.defaults, values)
        if chart.schema is not None and not (self.spec.get("install") or {}).get(
            "disableSchemaValidation"
        ):
            failure = vcluster_chart.schema_failure(chart.name, merged, chart.schema)
            if failure:
                return failure
        if chart.template_failure is not None:
            failure = chart.template_failure(merged)
            if failure:
                return failure
        try:
            objects = chart.render(merged, self.release, self.release_namespace)
        except Exception as error:  # a chart a test wrote: Helm reports template errors
            return f"template: {chart.name}: {error}"
        applier = Applier(cluster, "helm-controller")
        namespaces = cluster.api._objects(cluster.api.resource("", "namespaces"))
        if ("", self.release_namespace) not in namespaces:
            if (self.spec.get("install") or {}).get("createNamespace"):
                await applier.apply(
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": self.release_namespace},
                    }
                )
            else:
                return f'create: failed to create: namespaces "{self.release_namespace}" not found'
        previous = {
            entry["id"]: entry
            for entry in ((self.status.get("inventory") or {}).get("entries") or [])
        }
        entries = []
        for obj in objects:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if applier.namespaced(obj) and not meta.get("namespace"):
                meta["namespace"] = self.release_namespace
            meta.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "Helm"
            meta.setdefault("annotations", {}).update(
                {
                    "meta.helm.sh/release-name": self.release,
                    "meta.helm.sh/release-namespace": self.release_namespace,
                }
            )
            code, body = await applier.apply(obj)
            if code >= 400:
                return f"failed to create resource: {body.get('message', '')}"
            entries.append({"id": inventory_id(obj), "v": obj["apiVersion"].rpartition("/")[2]})
        for gone in set(previous) - {e["id"] for e in entries}:
            await _delete_entry(applier, previous[gone])
        self.status["inventory"] = {"entries": sorted(entries, key=lambda e: e["id"])}
        await self._store_release(cluster, chart, version, merged)
        return None

    async def _store_release(
        self, cluster: Cluster, chart: Chart, version: int, values: Obj
    ) -> None:
        release = {
            "name": self.release,
            "namespace": self.release_namespace,
            "version": version,
            "chart": {"metadata": {"name": chart.name, "version": chart.version}},
            "config": values,
        }
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"sh.helm.release.v1.{self.release}.v{version}",
                "namespace": self.storage_namespace,
                "labels": {
                    "name": self.release,
                    "owner": "helm",
                    "status": "deployed",
                    "version": str(version),
                },
            },
            "type": "helm.sh/release.v1",
            "data": {
                "release": base64.b64encode(
                    base64.b64encode(gzip.compress(json.dumps(release).encode()))
                ).decode()
            },
        }
        await Applier(cluster, "helm-controller").apply(secret)

    def _history(self, chart: Chart, version: int, digest: str, state: str, action: str) -> None:
        stamp = now_text()
        history = [
            dict(entry)
            for entry in self.status.get("history") or []
            if entry.get("version") != version
        ]
        if state == "deployed":
            for entry in history:
                if entry.get("status") == "deployed":
                    entry["status"] = "superseded"
        current = {
            "name": self.release,
            "namespace": self.release_namespace,
            "version": version,
            "status": state,
            "chartName": chart.name,
            "chartVersion": chart.version,
            "appVersion": chart.app_version,
            "configDigest": digest,
            "digest": "sha256:" + _sha256([self.release, version, digest, chart.digest]),
            "firstDeployed": (history[-1]["firstDeployed"] if history else stamp),
            "lastDeployed": stamp,
            "action": action,
        }
        self.status["history"] = [current, *history][: int(self.spec.get("maxHistory") or 5)]
        self.status["lastReleaseRevision"] = version

    def _waited(self, chart: Chart, revision: str, done: Obj, cluster: Cluster) -> Obj | None:
        """Helm's wait: every workload it installed ready, within the timeout."""
        verb, action = (
            ("install", "Install") if done["action"] == "install" else ("upgrade", "Upgrade")
        )
        if done.get("waited"):
            return None if is_ready(self.obj) else self._succeeded(chart, done, verb, action)
        applier = Applier(cluster, "helm-controller")
        pending = []
        if not (self.spec.get(done["action"]) or {}).get("disableWait"):
            for entry in (self.status.get("inventory") or {}).get("entries") or []:
                obj = _entry_object(applier, entry)
                if obj is None:
                    continue
                current, why = workload_current(obj)
                if not current:
                    pending.append(f"{fmt_object(obj)} status: 'InProgress': {why}")
        if pending:
            if self.owner.flux.loop.time() >= done["deadline"]:
                done["failed"] = True
                message = (
                    f"Helm {verb} failed for release {self.release_namespace}/{self.release} with chart "
                    f"{chart.name}@{chart.version}: resource not ready, name: {pending[0]}: context deadline exceeded"
                )
                reason = f"{action}Failed"
                self.status["failures"] = self.status.get("failures", 0) + 1
                self._history(chart, done["version"], done["digest"], "failed", done["action"])
                return self._finish(
                    [("Ready", "False", reason, message), ("Released", "False", reason, message)]
                )
            timeout = go_duration(done["timeout"])
            return self._finish(
                [
                    (
                        "Ready",
                        "Unknown",
                        "Progressing",
                        "Fresh install in progress" if verb == "install" else "Upgrade in progress",
                    ),
                    (
                        "Reconciling",
                        "True",
                        "Progressing",
                        f"Running '{verb}' action with timeout of {timeout}",
                    ),
                ]
            )
        done["waited"] = True
        return self._succeeded(chart, done, verb, action)

    def _succeeded(self, chart: Chart, done: Obj, verb: str, action: str) -> Obj:
        self._history(chart, done["version"], done["digest"], "deployed", done["action"])
        message = (
            f"Helm {verb} succeeded for release {self.release_namespace}/{self.release}.v{done['version']} "
            f"with chart {chart.name}@{chart.version}"
        )
        reason = f"{action}Succeeded"
        self.status.pop("installFailures" if verb == "install" else "upgradeFailures", None)
        self.status["failures"] = 0
        return self._finish(
            [("Ready", "True", reason, message), ("Released", "True", reason, message)]
        )

    async def uninstall(self) -> None:
        """What `helm uninstall` removes: the chart's objects and the release's Secrets."""
        cluster = self.owner.target(self.namespace, self.spec.get("kubeConfig"), "helm-controller")
        if isinstance(cluster, str):
            return
        applier = Applier(cluster, "helm-controller")
        for entry in reversed((self.status.get("inventory") or {}).get("entries") or []):
            await _delete_entry(applier, entry)
        secrets = cluster.api._objects(cluster.api.resource("", "secrets"))
        for (ns, name), secret in list(secrets.items()):
            if (
                ns == self.storage_namespace
                and (secret.get("metadata", {}).get("labels") or {}).get("name") == self.release
                and name.startswith("sh.helm.release.v1.")
            ):
                await applier.delete("v1", "Secret", ns, name)
        template = ((self.spec.get("chart") or {}).get("spec")) or {}
        source_ns = (template.get("sourceRef") or {}).get("namespace") or self.namespace
        local = Applier(
            Cluster(self.owner.api, UserInfo.service_account(NAMESPACE, "helm-controller")),
            "helm-controller",
        )
        await local.delete(f"{SOURCE_GROUP}/v1", "HelmChart", source_ns, self._chart_name())


def release_name(name: str, target_namespace: str | None) -> str:
    """GetReleaseName: `[targetNamespace-]name`, shortened past 53 characters."""
    full = f"{target_namespace}-{name}" if target_namespace else name
    if len(full) > 53:
        return f"{full[:40]}-{hashlib.sha256(full.encode()).hexdigest()[:12]}"
    return full


def _parse_entry(entry: Obj) -> tuple[str, str, str, str]:
    namespace, rest = entry["id"].split("_", 1)
    name_group, kind = rest.rsplit("_", 1)
    name, group = name_group.rsplit("_", 1)
    return namespace, name.replace("__", ":"), group, kind


def _entry_object(applier: Applier, entry: Obj) -> Obj | None:
    namespace, name, group, kind = _parse_entry(entry)
    api_version = f"{group}/{entry['v']}" if group else entry["v"]
    return applier.find(
        {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
        }
    )


async def _delete_entry(applier: Applier, entry: Obj) -> None:
    namespace, name, group, kind = _parse_entry(entry)
    api_version = f"{group}/{entry['v']}" if group else entry["v"]
    if (
        applier.find(
            {
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {"name": name, "namespace": namespace},
            }
        )
        is not None
    ):
        await applier.delete(api_version, kind, namespace, name)


# -- Kustomization -------------------------------------------------------------
class BuildError(Exception):
    pass


def build(files: dict[str, str], path: str) -> list[Obj]:
    """What kustomize-controller builds from an artifact's files at `path`."""
    root = path.strip().removeprefix("./").strip("/")
    if root in (".", ""):
        root = ""
    prefix = f"{root}/" if root else ""
    if root and not any(name.startswith(prefix) for name in files):
        raise FileNotFoundError(
            f"kustomization path not found: stat {path}: no such file or directory"
        )
    return _build_dir(files, root)


def _build_dir(files: dict[str, str], root: str) -> list[Obj]:
    prefix = f"{root}/" if root else ""
    kustomization = next(
        (
            f"{prefix}{n}"
            for n in ("kustomization.yaml", "kustomization.yml", "Kustomization")
            if f"{prefix}{n}" in files
        ),
        None,
    )
    if kustomization is None:
        names = sorted(
            n for n in files if n.startswith(prefix) and n.endswith((".yaml", ".yml", ".json"))
        )
        return [obj for name in names for obj in _documents(files[name], name)]
    config = yaml.safe_load(files[kustomization]) or {}
    unsupported = sorted(set(config) - {"apiVersion", "kind", "resources", "namespace"})
    if unsupported:
        raise BuildError(
            f"kustomize build failed: the stand-in's kustomize supports resources and namespace only, not {', '.join(unsupported)}"
        )
    objects: list[Obj] = []
    for entry in config.get("resources") or []:
        target = f"{prefix}{entry}".replace("/./", "/").removeprefix("./").rstrip("/")
        if target in files:
            objects += _documents(files[target], target)
        elif any(n.startswith(f"{target}/") for n in files):
            objects += _build_dir(files, target)
        else:
            raise BuildError(
                f"kustomize build failed: accumulating resources: '{entry}' does not exist"
            )
    if config.get("namespace"):
        for obj in objects:
            obj.setdefault("metadata", {})["namespace"] = config["namespace"]
    return objects


@functools.lru_cache(maxsize=64)
def _kubeconfig(text: str) -> Any:
    """A kubeconfig read once per text: each pass reads every remote object's anew."""
    return yaml.safe_load(text)


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> tuple[Any, ...]:
    """A file's YAML documents, parsed once per text (Flux's manifests are large and every
    vCluster's Kustomization builds them)."""
    return tuple(d for d in yaml.safe_load_all(text) if d)


def _documents(text: str, name: str) -> list[Obj]:
    try:
        documents = copy.deepcopy(list(_parsed(text)))
    except yaml.YAMLError as error:
        raise BuildError(f"kustomize build failed: {name}: {error}") from None
    found: list[Obj] = []
    for document in documents:
        if not isinstance(document, dict) or not document.get("kind"):
            raise BuildError(f"kustomize build failed: {name}: missing Resource metadata")
        if document["kind"].endswith("List") and isinstance(document.get("items"), list):
            found += [item for item in document["items"] if isinstance(item, dict)]
        else:
            found.append(document)
    return found


def _set_images(obj: Obj, images: list[Obj]) -> None:
    spec = obj.get("spec") or {}
    pod = (
        ((spec.get("template") or {}).get("spec"))
        or spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
        or {}
    )
    for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        image = str(container.get("image", ""))
        base, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
        for rule in images:
            if rule.get("name") != base:
                continue
            base = rule.get("newName") or base
            tag = rule.get("newTag") or tag
            container["image"] = (
                f"{base}@{rule['digest']}"
                if rule.get("digest")
                else (f"{base}:{tag}" if tag else base)
            )


class KustomizationReconcile(Reconcile):
    """One pass of kustomize-controller over one Kustomization."""

    kind = "Kustomization"

    async def run(self) -> Obj | None:
        for dependency in self.spec.get("dependsOn") or []:
            ns = dependency.get("namespace") or self.namespace
            resource = self.owner._resource("Kustomization")
            found = self.owner.api._find(resource, ns, dependency["name"]) if resource else None
            if not is_ready(found):
                return self._failed(
                    "DependencyNotReady", f"dependency '{ns}/{dependency['name']}' is not ready"
                )
        source = self._source()
        if isinstance(source, dict):
            return source
        revision, files = source
        self.status["lastAttemptedRevision"] = revision
        cluster = self.owner.target(
            self.namespace, self.spec.get("kubeConfig"), "kustomize-controller"
        )
        if isinstance(cluster, str):
            return self._failed("ReconciliationFailed", cluster)
        annotations = self.meta.get("annotations") or {}
        wanted = (self.generation, revision, annotations.get(REQUESTED_AT), self.meta["uid"])
        done = self.owner._done.get(self.key)
        applier = Applier(cluster, "kustomize-controller")
        drifted = done is not None and any(
            _entry_object(applier, e) is None
            for e in (self.status.get("inventory") or {}).get("entries") or []
        )
        fresh = done is None or done["wanted"] != wanted or done["cluster"] is not cluster.api
        if not fresh and done is not None and done.get("error"):
            return None  # failed for this revision: tried again when something changes
        if fresh or drifted:
            error = await self._apply(files, applier)
            timeout = seconds_of(self.spec.get("timeout") or self.spec.get("interval"), 300)
            self.owner._done[self.key] = {
                "wanted": wanted,
                "cluster": cluster.api,
                "error": error,
                "deadline": self.owner.flux.loop.time() + timeout,
                "timeout": timeout,
            }
            if error is not None:
                return self._failed(*error)
            self.owner.flux.loop.call_later(timeout, self.owner.wake, self.key)
        return self._health(revision, applier, self.owner._done[self.key])

    def _source(self) -> tuple[str, dict[str, str]] | Obj:
        ref = self.spec.get("sourceRef") or {}
        kind, name = ref.get("kind", ""), ref.get("name", "")
        ns = ref.get("namespace") or self.namespace
        if kind not in ("GitRepository", "OCIRepository"):
            return self._failed(
                "ArtifactFailed",
                f"unable to get source '{kind}/{ns}/{name}': the stand-in serves GitRepository and OCIRepository sources",
            )
        resource = self.owner._resource(kind)
        source = self.owner.api._find(resource, ns, name) if resource else None
        if source is None:
            plural = PLURALS[kind][1]
            return self._failed(
                "ArtifactFailed",
                f"unable to get source '{ns}/{name}': {plural}.source.toolkit.fluxcd.io \"{name}\" not found",
            )
        artifact = (source.get("status") or {}).get("artifact")
        if artifact is None:
            return self._failed("ArtifactFailed", "Source artifact not found, retrying in 30s")
        if not is_ready(source):
            return self._failed(
                "ArtifactFailed", "Source is not ready, artifact not found, retrying in 30s"
            )
        revision = artifact["revision"]
        files = self.owner.flux.artifact_files(kind, source)
        if files is None:
            return self._failed("ArtifactFailed", "Source artifact not found, retrying in 30s")
        return revision, files

    async def _apply(self, files: dict[str, str], applier: Applier) -> tuple[str, str] | None:
        for unsupported in (
            "patches",
            "components",
            "postBuild",
            "namePrefix",
            "nameSuffix",
            "commonMetadata",
            "decryption",
        ):
            if self.spec.get(unsupported):
                return (
                    "BuildFailed",
                    f"the stand-in's kustomize-controller does not apply spec.{unsupported}",
                )
        try:
            objects = build(files, self.spec.get("path") or "./")
        except FileNotFoundError as error:
            return "ArtifactFailed", str(error)
        except BuildError as error:
            return "BuildFailed", str(error)
        target = self.spec.get("targetNamespace")
        for obj in objects:
            if target and applier.namespaced(obj) is not False:
                obj.setdefault("metadata", {})["namespace"] = target
            if self.spec.get("images"):
                _set_images(obj, self.spec["images"])
        stages = [
            [o for o in objects if o.get("kind") in FIRST_STAGE],
            [o for o in objects if o.get("kind") not in FIRST_STAGE],
        ]
        entries = []
        for stage in stages:
            problems = []
            for obj in stage:
                if applier.namespaced(obj) and not (obj.get("metadata") or {}).get("namespace"):
                    problems.append(
                        f"{fmt_object(obj)} namespace not specified: the server could not find the requested resource"
                    )
                    continue
                code, body = await applier.apply(obj, dry_run=True)
                if code >= 400:
                    problems.append(_failure(obj, code, body, dry_run=True))
            if problems:
                return "ReconciliationFailed", "\n".join(problems)
            for obj in stage:
                code, body = await applier.apply(obj)
                if code >= 400:
                    return "ReconciliationFailed", _failure(obj, code, body, dry_run=False)
                entries.append({"id": inventory_id(obj), "v": obj["apiVersion"].rpartition("/")[2]})
        previous = {e["id"]: e for e in (self.status.get("inventory") or {}).get("entries") or []}
        if self.spec.get("prune"):
            for gone in sorted(set(previous) - {e["id"] for e in entries}, reverse=True):
                await _delete_entry(applier, previous[gone])
        self.status["inventory"] = {"entries": sorted(entries, key=lambda e: e["id"])}
        return None

    def _health(self, revision: str, applier: Applier, done: Obj) -> Obj:
        entries = (self.status.get("inventory") or {}).get("entries") or []
        if self.spec.get("wait"):
            watched = [_entry_object(applier, e) for e in entries]
        else:
            watched = [
                applier.find(
                    {
                        "apiVersion": c.get("apiVersion", "v1"),
                        "kind": c["kind"],
                        "metadata": {"name": c["name"], "namespace": c.get("namespace", "")},
                    }
                )
                for c in self.spec.get("healthChecks") or []
            ]
        pending = []
        for obj in watched:
            if obj is None:
                continue
            current, _why = workload_current(obj)
            if not current:
                pending.append(f"{fmt_object(obj)} status: 'InProgress'")
        timeout = go_duration(done["timeout"])
        if pending:
            if self.owner.flux.loop.time() >= done["deadline"]:
                return self._finish(
                    [
                        (
                            "Ready",
                            "False",
                            "HealthCheckFailed",
                            f"health check failed after {timeout}: timeout waiting for: [{', '.join(pending)}]",
                        ),
                        (
                            "Healthy",
                            "False",
                            "HealthCheckFailed",
                            f"timeout waiting for: [{', '.join(pending)}]",
                        ),
                    ]
                )
            message = f"Running health checks for revision {revision} with a timeout of {timeout}"
            return self._finish(
                [
                    ("Ready", "Unknown", "Progressing", "Reconciliation in progress"),
                    ("Reconciling", "True", "Progressing", message),
                ]
            )
        self.status["lastAppliedRevision"] = revision
        wanted: list[Condition] = [
            ("Ready", "True", "ReconciliationSucceeded", f"Applied revision: {revision}")
        ]
        if self.spec.get("wait") or self.spec.get("healthChecks"):
            wanted.append(("Healthy", "True", "Succeeded", "Health check passed"))
        return self._finish(wanted)

    async def prune_all(self) -> None:
        cluster = self.owner.target(
            self.namespace, self.spec.get("kubeConfig"), "kustomize-controller"
        )
        if isinstance(cluster, str):
            return
        applier = Applier(cluster, "kustomize-controller")
        for entry in sorted(
            (self.status.get("inventory") or {}).get("entries") or [],
            key=lambda e: e["id"],
            reverse=True,
        ):
            await _delete_entry(applier, entry)


# -- the world -----------------------------------------------------------------
@dataclass
class _Switch:
    mode: str  # stall | fail
    message: str = ""
    reason: str | None = None


class Flux:
    """Every remote Flux can fetch, every cluster it runs in, and its switches."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resolver: Resolver) -> None:
        self.loop = loop
        self.resolver = resolver
        self.clusters: list[ClusterFlux] = []
        self.gits: dict[str, GitRemote] = {}
        self.helms: dict[str, HelmRemote] = {}
        self.ocis: dict[str, OciRemote] = {}
        self.down: set[str] = set()
        self.errors: list[str] = []
        self._switches: dict[tuple[str, str, str], _Switch] = {}
        self._digests: dict[tuple[str, object], tuple[str, int, Any]] = {}
        self.schedule = Schedule()
        self._scheduled = self._running = False
        self._version = 0
        self.reconciled = 0  # Flux objects reconciled (bench/host_standin.py reads it)
        self._condition = threading.Condition()

    # -- clusters ------------------------------------------------------------
    def attach(self, api: KubeApi, *, installed: bool) -> ClusterFlux:
        found = ClusterFlux(self, api, installed=installed)
        self.clusters.append(found)
        self._on_loop(lambda: self.schedule.wake_cluster(found))
        self.resolution_changed()
        return found

    def detach(self, api: KubeApi) -> None:
        gone = [c for c in self.clusters if c.api is api]
        self.clusters = [c for c in self.clusters if c.api is not api]
        for cluster in gone:
            self._on_loop(functools.partial(self.schedule.forget, cluster))
        self.resolution_changed()

    def resolve(self, kubeconfig: Obj) -> Cluster | str:
        reads = READS.get()
        if reads is not None:
            reads.add(RESOLVED)
        return self.resolver(kubeconfig)

    def resolution_changed(self) -> None:
        """What a kubeconfig reaches changed (a vCluster started or stopped, a listener
        closed or opened): whatever resolved one is reconciled again."""
        self._on_loop(lambda: self.schedule.wake_readers(RESOLVED))

    @property
    def full_passes(self) -> bool:
        """Every object after every change, as the stand-in once did (a bench's baseline)."""
        return self.schedule.full

    @full_passes.setter
    def full_passes(self, full: bool) -> None:
        self.schedule.full = full

    # -- remotes (from any thread) ----------------------------------------------
    def git(self, url: str) -> GitRemote:
        return self.gits.setdefault(url.rstrip("/"), GitRemote(url.rstrip("/"), self))

    def helm(self, url: str) -> HelmRemote:
        return self.helms.setdefault(url.rstrip("/"), HelmRemote(url.rstrip("/"), self))

    def oci(self, url: str) -> OciRemote:
        return self.ocis.setdefault(url.rstrip("/"), OciRemote(url.rstrip("/"), self))

    def serve_vcluster_chart(self, url: str = "https://charts.loft.sh") -> HelmRemote:
        """The vCluster chart 0.36.1 at this repository URL (the loft one or a mirror)."""
        remote = self.helm(url)
        remote.charts.setdefault(vcluster_chart.CHART_NAME, {})[vcluster_chart.CHART_VERSION] = (
            vcluster_chart_release()
        )
        self.changed()
        return remote

    def serve_flux_manifests(
        self,
        url: str = "oci://ghcr.io/fluxcd/flux-manifests",
        tag: str = "v2.9.4",
        registry: str = "ghcr.io/fluxcd",
    ) -> str:
        """Flux's install manifests as the OCI artifact the release publishes; its digest."""
        text = yaml.safe_dump_all(flux_install(registry), sort_keys=False)
        return self.oci(url).push(tag, {"gotk-components.yaml": text})

    def unreachable(self, url: str) -> None:
        self.down.add(url.rstrip("/"))
        self.changed()

    def reachable(self, url: str) -> None:
        self.down.discard(url.rstrip("/"))
        self.changed()

    # -- lookups the controllers make ------------------------------------------------
    def _unreachable_error(self, url: str) -> str | None:
        parts = urlsplit(url)
        host = parts.hostname or url
        key = url.rstrip("/")
        if key in self.down:
            port = parts.port or {"https": 443, "http": 80, "ssh": 22}.get(parts.scheme, 443)
            return f"dial tcp {host}:{port}: connect: connection refused"
        return None

    def git_remote(self, url: str, prefix: str) -> GitRemote:
        key = url.rstrip("/")
        down = self._unreachable_error(url)
        if down:
            raise FluxError("GitOperationFailed", f"{prefix} '{url}': {down}")
        remote = self.gits.get(key) or self.gits.get(key.removesuffix(".git"))
        if remote is None:
            host = urlsplit(url).hostname or url
            raise FluxError(
                "GitOperationFailed", f"{prefix} '{url}': dial tcp: lookup {host}: no such host"
            )
        return remote

    def helm_remote(self, url: str) -> HelmRemote:
        key = url.rstrip("/")
        down = self._unreachable_error(url)
        index = f"{key}/index.yaml"
        if down:
            raise FluxError(
                "Failed",
                f'failed to fetch Helm repository index: failed to cache index to temporary file: Get "{index}": {down}',
            )
        remote = self.helms.get(key)
        if remote is None:
            host = urlsplit(url).hostname or url
            raise FluxError(
                "Failed",
                f'failed to fetch Helm repository index: failed to cache index to temporary file: Get "{index}": dial tcp: lookup {host}: no such host',
            )
        return remote

    def oci_artifact(self, url: str, ref: Obj) -> tuple[str, Any]:
        """An OCIRepository's (revision, content): files, or a chart's name and version."""
        key = url.rstrip("/")
        host = urlsplit(url).hostname or url
        down = self._unreachable_error(url)
        if down:
            raise FluxError(
                "OCIArtifactPullFailed",
                f'failed to determine artifact digest: Get "https://{host}/v2/": {down}',
            )
        files = self.ocis.get(key)
        parent, _, chart_name = key.rpartition("/")
        charts = self.helms.get(parent)
        if files is None and (charts is None or chart_name not in charts.charts):
            raise FluxError(
                "OCIArtifactPullFailed",
                f'failed to determine artifact digest: Get "https://{host}/v2/": dial tcp: lookup {host}: no such host',
            )
        tags = (
            list(files.tags)
            if files is not None
            else list(charts.charts[chart_name])
            if charts
            else []
        )
        tag = ref.get("tag") or "latest"
        if ref.get("semver"):
            best = semver_best(ref["semver"], tags)
            if best is None:
                raise FluxError(
                    "OCIArtifactPullFailed",
                    f"failed to determine artifact tag: no match found for semver: {ref['semver']}",
                )
            tag = best
        repository = key.removeprefix("oci://")
        if tag not in tags:
            raise FluxError(
                "OCIArtifactPullFailed",
                f"failed to determine artifact digest: GET https://{repository.split('/', 1)[0]}/v2/{repository.split('/', 1)[-1]}/manifests/{tag}: MANIFEST_UNKNOWN: manifest unknown; unknown tag={tag}",
            )
        if files is not None:
            artifact = files.tags[tag]
            return f"{tag}@{artifact.digest}", artifact.files
        assert charts is not None
        chart = charts.charts[chart_name][tag]
        return f"{tag}@{chart.digest}", [chart.name, chart.version]

    def oci_chart(self, url: str, ref: Obj) -> Chart | None:
        key = url.rstrip("/")
        parent, _, name = key.rpartition("/")
        charts = self.helms.get(parent)
        if charts is None or name not in charts.charts:
            return None
        versions = charts.charts[name]
        tag = ref.get("tag") or (
            semver_best(ref["semver"], versions) if ref.get("semver") else "latest"
        )
        return versions.get(tag or "")

    def digest_of(self, revision: str, content: Any) -> tuple[str, int]:
        """An artifact's sha256 and size, computed once per content (a remote's stored files
        are one object per tag or commit): every pass of every source asks again."""
        key = (revision, content if isinstance(content, str) else id(content))
        found = self._digests.get(key)
        if found is None:
            if len(self._digests) > 4096:  # an OCI chart's content is a new list each time
                self._digests.clear()
            # The content is kept with its figures, so its id is never reused meanwhile.
            found = self._digests[key] = (_sha256(content), len(json.dumps(content)), content)
        return found[0], found[1]

    def artifact_files(self, kind: str, source: Obj) -> dict[str, str] | None:
        spec, artifact = source["spec"], source["status"]["artifact"]
        revision = artifact["revision"]
        if kind == "GitRepository":
            remote = self.gits.get(spec["url"].rstrip("/")) or self.gits.get(
                spec["url"].rstrip("/").removesuffix(".git")
            )
            sha = revision.rpartition("sha1:")[2]
            return dict(remote.commits[sha]) if remote and sha in remote.commits else None
        remote_oci = self.ocis.get(spec["url"].rstrip("/"))
        tag = revision.split("@", 1)[0]
        if remote_oci is None or tag not in remote_oci.tags:
            return None
        return dict(remote_oci.tags[tag].files)

    # -- switches ------------------------------------------------------------------
    def stall(self, kind: str, namespace: str, name: str) -> None:
        self._switches[(kind, namespace, name)] = _Switch("stall")
        self.changed()

    def fail(
        self, kind: str, namespace: str, name: str, message: str, reason: str | None = None
    ) -> None:
        self._switches[(kind, namespace, name)] = _Switch("fail", message, reason)
        self.changed()

    def heal(self) -> None:
        self._switches.clear()
        self.down.clear()
        for cluster in self.clusters:
            cluster._done.clear()
        self.changed()

    def switch(self, kind: str, namespace: str, name: str) -> tuple[str, str, str | None] | None:
        found = self._switches.get((kind, namespace, name))
        return None if found is None else (found.mode, found.message, found.reason)

    # -- reconciling ------------------------------------------------------------------
    def changed(self) -> None:
        """Something a test registers or switches changed (a remote, a switch): reconcile
        everything soon."""
        self._on_loop(self.schedule.wake_all)

    def touched(
        self, cluster: ClusterFlux, resource: Resource | None, namespace: str, name: str
    ) -> None:
        """An object of `cluster` was written or deleted (None: its tokens expired):
        reconcile it if it is Flux's, and whatever read it (flux_schedule.py)."""

        def due() -> None:
            if self.schedule.full:
                self.schedule.wake_all()
            elif resource is None:
                self.schedule.wake_readers(RESOLVED)
            else:
                api = cluster.api
                self.schedule.wake_readers((api, resource.group, resource.plural, namespace, name))
                if resource.kind == "CustomResourceDefinition":
                    self.schedule.wake_api_readers(api)
                kind = KIND_OF.get((resource.group, resource.plural))
                if kind is not None:
                    self.schedule.wake(cluster, kind, namespace, name)

        self._on_loop(due)

    def _on_loop(self, note: Callable[[], None]) -> None:
        """Note what is due on the stand-in's loop (now, if called there) and run soon."""
        if self.loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._noted(note)
        else:
            self.loop.call_soon_threadsafe(self._noted, note)

    def _noted(self, note: Callable[[], None]) -> None:
        note()
        self._schedule()

    def _schedule(self) -> None:
        """A run soon, unless one runs: its passes go on while anything is due, so a
        burst of writes is one pass."""
        if not self._running and not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(lambda: self.loop.create_task(self._run()))

    async def _run(self) -> None:
        """Passes until nothing is due. A run never yields to the loop between objects,
        so what a test reads between runs is settled, never a pass half done."""
        self._scheduled = False
        if self._running:
            return
        READS.set(None)  # this task's context may be a copy of a recording one
        self._running = True
        try:
            passes = 0
            while self.schedule.pending():
                everything = self.schedule.begin()
                for cluster in list(self.clusters):
                    await cluster.reconcile(everything)
                passes += 1
                if passes > 200 and self.schedule.pending():
                    self.errors.append(
                        "the Flux stand-in never settled: 200 passes in a row changed something"
                    )
                    break
        finally:
            self._running = False
            with self._condition:
                self._version += 1
                self._condition.notify_all()

    def busy(self) -> bool:
        """Whether a run is due or running (bench/host_standin.py waits for quiet)."""
        return self._scheduled or self._running or self.schedule.pending()

    # -- waiting (from a test's thread) ---------------------------------------------------
    def wait_for(self, check: Callable[[], T | None], timeout_s: float = 10.0) -> T:
        """`check()` once it gives something truthy, re-read after every reconcile pass."""
        deadline = self.loop.time() + timeout_s
        while True:
            with self._condition:
                seen = self._version
            found = check()
            if self.errors:
                raise AssertionError("the Flux stand-in failed:\n" + "\n".join(self.errors))
            if found:
                return found
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                raise AssertionError("the condition never held")
            with self._condition:
                self._condition.wait_for(self._moved_on(seen), min(remaining, 0.5))

    def _moved_on(self, seen: int) -> Callable[[], bool]:
        return lambda: self._version != seen

    def wait_ready(
        self,
        kind: str,
        namespace: str,
        name: str,
        api: KubeApi | None = None,
        timeout_s: float = 10.0,
    ) -> Obj:
        """The Flux object once Ready=True at its generation (AssertionError with its
        conditions when that never happens)."""
        group, plural = PLURALS[kind]
        cluster = api or self.clusters[0].api

        def ready() -> Obj | None:
            found = cluster.find(plural, name, namespace, group=group)
            return found if is_ready(found) else None

        try:
            return self.wait_for(ready, timeout_s)
        except AssertionError as error:
            last = cluster.find(plural, name, namespace, group=group)
            said = json.dumps((last or {}).get("status", {}).get("conditions"), indent=1)
            raise AssertionError(
                f"{kind} {namespace}/{name} never became ready ({error}); conditions: {said}"
            ) from None

    async def until(self, check: Callable[[], T | None], timeout_s: float = 10.0) -> T:
        return await asyncio.to_thread(self.wait_for, check, timeout_s)

    async def until_ready(
        self,
        kind: str,
        namespace: str,
        name: str,
        api: KubeApi | None = None,
        timeout_s: float = 10.0,
    ) -> Obj:
        return await asyncio.to_thread(self.wait_ready, kind, namespace, name, api, timeout_s)
