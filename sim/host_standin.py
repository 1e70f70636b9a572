"""A host cluster for CloudSpaces and the vClusters that appear on it, for tests
and benches that drive spacedock's reconciler through kubernetes-asyncio.

What it behaves like: a Kubernetes API server (v1.31) that runs Flux v2.9.4's
source-, helm- and kustomize-controller (flux_standin.py), installs the vCluster chart
0.36.1 for a HelmRelease of it (vcluster_chart.py), and runs each vCluster so made as
its own API server (v1.36, the chart's distro) with Flux inside once Flux's manifests
are applied there. What every API server here checks, with the real server's words
(kube_validation.py, kube_admission.py, kube_quota.py): names by kind (Services
DNS-1035, Namespaces and StatefulSets DNS-1123 labels), labels, built-in kinds against
kubernetes-validate's schemas of its minor version, custom resources against their
CRD's schema (Flux's own from sim/upstream/), unknown fields (server-side
apply fails, `fieldValidation=Strict` refuses, else dropped), ValidatingWebhook-
Configurations (called as the API server calls them), LimitRange defaults and
ResourceQuota admission for pods. What none of it does: run pods or containers,
schedule, watch, RBAC (every authenticated caller may do anything), finalizers
(deletion is immediate, a lingering namespace aside), mutating webhooks.

Two HTTPS servers on 127.0.0.1, on one event loop in a background thread:

* the **host API** (`host.url`, CA `host.ca_pem`): bearer token `host.token`
  (or `host.tokens`, or a TokenRequest token it issued) or a client
  certificate from `host.client_certificate()`;
* the **vCluster gateway** (`host.vcluster_port`): each running vCluster is
  its own API under the path prefix `/{namespace}/{name}`, so
  `SPACEDOCK_VCLUSTER_URL_TEMPLATE=host.vcluster_url_template`
  (`https://127.0.0.1:<port>/{namespace}/{name}`) reaches any of them, and
  `host.vcluster_url(namespace, name)` gives one. One port and one server
  certificate serve them all (an IP address carries no SNI to route on), so
  every vCluster's `certificate-authority` is `host.vcluster_ca_pem`; each
  vCluster accepts only its own admin certificate and its own tokens.

Both speak the generic API of kube_api.py: any kind a built-in or a CRD declares
(a path no CRD declares is 404, as on a real server), discovery (`/version`, `/api`,
`/api/v1`, `/apis`, `/apis/{g}/{v}`, and `/openapi/v3` as far as kubectl reads it),
GET/list (labelSelector, fieldSelector), POST (409 AlreadyExists; `generateName`),
PUT, PATCH (merge, strategic merge treated as merge, JSON patch) and server-side apply
(`?fieldManager=spacedock&force=true`: creates or merges, drops fields the manager
stopped applying, 409 on conflicts without force, resourceVersion bumped only when
something changed, `managedFields` names the manager), `?dryRun=All`, the `status`
and `scale` subresources, DELETE, and `Status` bodies for every error.

**Flux on the host** (`HostStandIn(flux=True)`, the default): the Flux CRDs are served
and Flux's controllers' Deployments run in `flux-system`; `HostStandIn(flux=False)`
is a host without Flux (no CRDs: a HelmRelease is 404). `host.flux` (a `Flux`) is how a
test registers what Flux can fetch and flips its switches:

    host.flux.serve_vcluster_chart("https://charts.loft.sh")   # or a mirror, http(s)/oci
    host.flux.serve_flux_manifests("oci://ghcr.io/fluxcd/flux-manifests", tag="v2.9.4")
    repo = host.flux.git("https://git.example/app.git"); repo.commit({"a.yaml": ...})
    host.flux.helm("https://charts.example").add_chart("web", "1.0.0", render=...)
    host.flux.unreachable(url); host.flux.stall(kind, ns, name); host.flux.fail(...)
    await host.flux.until_ready("HelmRelease", ns, name)       # or wait_ready, until

A HelmRelease of the vCluster chart whose values pass the chart's schema installs the
chart's objects into its namespace; once its control plane (StatefulSet `<release>`)
is ready, a vCluster `<release>` starts and its syncer writes the kubeconfig Secrets
`exportKubeConfig` asks for (`vc-<release>`, key `config`, server
`exportKubeConfig.server`: set it to `host.vcluster_url(ns, release)` for a kubeconfig
that works from tests and from the host's Flux). Deleting the release (or the control
plane) ends the vCluster and those Secrets. A remote Kustomization of Flux's manifests
(`kubeConfig.secretRef {name: vc-<release>, key: config}`) installs Flux inside; the
vCluster then runs Flux's controllers for its own Flux objects.

Nothing else makes a vCluster: a StatefulSet no Helm release of the chart made is an
ordinary StatefulSet, so a reconciler cannot fake one with its own templates.

What the host does by itself:

* StatefulSets and Deployments report `readyReplicas`/`availableReplicas`
  = `spec.replicas` (default 1) and `observedGeneration` `ready_delay_s` after they
  are created or their spec changes (`api.stall(name)` holds them;
  `api.unstall(name)`). A StatefulSet whose name leaves no room for its pods'
  `controller-revision-hash` label (over 52 characters) never gets ready: a
  `FailedCreate` Event says why, as the StatefulSet controller's does.
* Services of type LoadBalancer get `status.loadBalancer.ingress[0].ip =
  127.0.0.1`; that address has no port for the stand-in to listen on, so
  tests reach vClusters through the URL template.
* `GET /api/v1/nodes` lists the nodes given to `HostStandIn(nodes=...)` or
  `set_nodes(...)`, each with that allocatable cpu and memory.
* Deleting a namespace deletes its content and the namespace at once, unless
  `api.linger_namespaces()` holds it: then it stays with `status.phase:
  Terminating` and conditions `NamespaceContentRemaining` /
  `NamespaceFinalizersRemaining` (messages naming a PersistentVolumeClaim)
  until `api.release_namespaces()`; a second DELETE meanwhile is 409.

What every vCluster does (`host.vcluster(namespace, name)`, a `VClusterApi`):

* accepts its admin client certificate (`.admin`) and the tokens it issued
  through TokenRequest (`POST /api/v1/namespaces/{ns}/serviceaccounts/{sa}/
  token`, `expirationSeconds` >= 600 else 422; JWT-shaped, `sub`
  `system:serviceaccount:{ns}:{sa}`) until they expire or their
  ServiceAccount goes; `.expire_tokens()` ends them all; else 401;
* calls the ValidatingWebhookConfigurations registered in it for matching writes
  (kube_admission.py: AdmissionReview v1, caBundle, timeoutSeconds, failurePolicy;
  loopback URLs only); `webhook_calls` lists each call and its outcome;
* Deployments (Flux in `flux-system`) get ready after the delay, CRDs are
  Established at once and their kinds served;
* pods are admitted as the API server does: LimitRange defaults, then the webhooks,
  then every ResourceQuota of the namespace (`requests.cpu`/`cpu`, `requests.memory`/
  `memory`, `limits.*`): over `hard` is 403 Forbidden `pods "x" is forbidden:
  exceeded quota: spacedock-quota, requested: requests.cpu=2, used:
  requests.cpu=500m, limited: requests.cpu=1` (only the exceeded keys named;
  a constrained key the pod states nothing for is `failed quota: …: must
  specify requests.cpu`); an admitted pod counts in the quota's `status.used`
  (and stops counting when deleted). Workloads start no pods: only pods
  created through the API count. The rules live in kube_quota.py.

Switches and counters, on `host.api` and on each vCluster alike (callable from
any thread; `host.heal()` heals all, Flux's switches included):

* `fail_apply(kind=, name=, times=1, code=500)`: the next `times` matching
  server-side applies answer `code` (`times=None`: until healed);
* `hold_applies(kind=, name=)`: matching server-side applies wait unanswered (a slow
  API server) until `release_applies()` or `heal()`, then are done as usual even if
  their client is gone; `applies_held()` counts those waiting;
* `stall(name)` / `unstall(name)`, `linger_namespaces()` /
  `release_namespaces()`, `expire_tokens()`, `heal()`;
* on the host only: `host.refuse(host=True, vclusters=True)` stops listening
  (connection refused) until `host.listen()`; `host.set_nodes(...)`;
* `count(verb=, resource=, namespace=, name=)` counts calls (`verb` one of
  get, list, create, update, patch, apply, delete, deletecollection,
  discovery; `resource` as kubectl names it: `statefulsets.apps`,
  `serviceaccounts/token`); `calls()` is every `Call` counted (Flux's own calls
  included); `creations()` counts how often each object came into existence
  (`statefulsets.apps/cs-x/demo`), `created_twice()` lists any made more than
  once; `reset_counts()`;
* `find(plural, name, namespace, group)` / `find_all(plural, namespace, group)`
  return copies of stored objects; `put(obj)` stores one and `remove(...)` deletes
  one as a controller would (not counted, no admission).

Use it as a module fixture, pointing the spacedock server at it:

    @pytest.fixture(scope="module")
    def host() -> Iterator[HostStandIn]:
        with HostStandIn() as standin:
            standin.flux.serve_vcluster_chart("https://charts.loft.sh")
            yield standin

    @pytest.fixture(scope="module")
    def server_env(host: HostStandIn) -> dict[str, str]:
        return {"SPACEDOCK_VCLUSTER_URL_TEMPLATE": host.vcluster_url_template}

and register the host as a GENERIC space with `server=host.url`,
`ca=host.ca_pem`, `token=host.token`. Delays are attributes read when a
workload is written (`host.api.ready_delay_s`, and each vCluster's), so a bench
can subtract them. To stop a reconciler mid-PROVISIONING deterministically,
`host.api.stall(name)` its StatefulSet (or `host.flux.stall("HelmRelease", ns,
name)`), wait until it exists, kill it, restart, unstall, then assert
`host.api.created_twice() == []`.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import ssl
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml
from aiohttp import web

from sim import server_name, vcluster_chart
from sim.flux_manifests import NAMESPACE as FLUX_NAMESPACE
from sim.flux_manifests import controller_deployments, flux_crds
from sim.flux_standin import Cluster, Flux
from sim.kube_admission import UserInfo
from sim.kube_api import KubeApi, Obj, Resource, Target, now_text, secret_data
from sim.kube_standin import _ssl_context, status
from sim.kube_validation import statefulset_pod_refusal
from sim.loop_calls import call_on
from sim.pki import CertificateAuthority, KeyPair
from sim.ports import HeldPort

VCLUSTER_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_NODES = (("8", "32Gi"), ("8", "32Gi"))


@dataclass
class _Server:
    """One listening HTTPS server, which a switch can close and open again."""

    runner: web.AppRunner
    port: HeldPort
    context: ssl.SSLContext
    site: web.BaseSite | None = None

    async def open(self) -> None:
        if self.site is None:
            self.site = self.port.site(self.runner, self.context)
            await self.site.start()

    async def close(self) -> None:
        if self.site is not None:
            await self.site.stop()
            self.site = None


class VClusterApi(KubeApi):
    """One vCluster's API server: its own objects, admin certificate and tokens."""

    def __init__(
        self,
        *,
        loop: asyncio.AbstractEventLoop,
        ready_delay_s: float,
        namespace: str,
        name: str,
        url: str,
        ca: CertificateAuthority,
        git_version: str = "v1.31.2",
    ) -> None:
        super().__init__(
            loop=loop,
            ready_delay_s=ready_delay_s,
            namespaces=VCLUSTER_NAMESPACES,
            git_version=git_version,
        )
        self.namespace, self.name, self.url = namespace, name, url
        self.ca_pem = ca.pem
        self.admin = ca.issue("admin", server=False, groups=("system:masters",))
        self._admin_der = ssl.PEM_cert_to_DER_cert(self.admin.certificate_pem)
        self.exported: list[tuple[str, str]] = []  # the kubeconfig Secrets its syncer wrote

    def admin_certificate(self, pem: str) -> bool:
        try:
            return ssl.PEM_cert_to_DER_cert(pem) == self._admin_der
        except ValueError:
            return False

    def issue_token(self, namespace: str, account: str, seconds: int) -> str:
        """A TokenRequest token of a ServiceAccount, as the syncer asks for one."""
        target = Target(self.resource("", "serviceaccounts"), namespace, account, "token")
        issued = self._token_request(target, {"spec": {"expirationSeconds": seconds}})
        token: str = issued["status"]["token"]
        return token

    def authenticated(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            return self.token_valid(header[7:])
        transport = request.transport
        tls = transport.get_extra_info("ssl_object") if transport is not None else None
        return tls is not None and tls.getpeercert(binary_form=True) == self._admin_der


class HostApi(KubeApi):
    """The host's API server: starts a vCluster when its control plane is ready."""

    def __init__(self, standin: HostStandIn, **options: Any) -> None:
        super().__init__(**options)
        self.standin = standin

    def _became_ready(self, resource: Resource, obj: Obj) -> None:
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if chart_release(obj) == name:
            self.standin._start_chart_vcluster(namespace, name)

    def _after_write(self, resource: Resource, obj: Obj, existing: Obj | None) -> None:
        super()._after_write(resource, obj, existing)
        if resource.kind == "StatefulSet" and existing is None:
            refusal = statefulset_pod_refusal(obj)
            if refusal is not None:
                self._record_failed_create(obj, refusal)

    def _record_failed_create(self, statefulset: Obj, refusal: str) -> None:
        """The StatefulSet controller cannot make pod 0: an Event says why, and the
        StatefulSet never gets ready."""
        meta = statefulset["metadata"]
        self.stall(f"{meta['namespace']}/{meta['name']}")
        event_name = f"{meta['name']}.{secrets.token_hex(8)}"
        self._put(
            self.resource("", "events"),
            {
                "metadata": {"name": event_name, "namespace": meta["namespace"]},
                "involvedObject": {
                    "kind": "StatefulSet",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "apiVersion": "apps/v1",
                },
                "reason": "FailedCreate",
                "message": f"create Pod {meta['name']}-0 in StatefulSet {meta['name']} failed "
                f"error: {refusal}",
                "type": "Warning",
                "source": {"component": "statefulset-controller"},
                "count": 1,
                "firstTimestamp": now_text(),
                "lastTimestamp": now_text(),
            },
        )

    def _after_delete(self, resource: Resource, obj: Obj) -> None:
        super()._after_delete(resource, obj)
        namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        if resource.kind in ("StatefulSet", "Deployment") and chart_release(obj) == name:
            self.standin._stop_vcluster(namespace, name)


def chart_release(workload: Obj) -> str | None:
    """The release of a vCluster chart's control plane, or None for any other object."""
    meta = workload.get("metadata") or {}
    if not str((meta.get("labels") or {}).get("chart", "")).startswith("vcluster-"):
        return None
    return (meta.get("annotations") or {}).get("meta.helm.sh/release-name")


def install_flux(api: KubeApi, controllers: Iterable[str]) -> None:
    """Flux as installed on a cluster: its CRDs, and its controllers' Deployments in
    flux-system (ready after the usual delay)."""
    crds = api.resource("apiextensions.k8s.io", "customresourcedefinitions")
    for crd in flux_crds():
        api._put(crds, crd)
    api._put(api.resource("", "namespaces"), {"metadata": {"name": FLUX_NAMESPACE}})
    for deployment in controller_deployments(names=tuple(controllers)):
        api._put(api.resource("apps", "deployments"), deployment)


class HostStandIn:
    def __init__(
        self,
        *,
        token: str = "host-token",
        ready_delay_s: float = 0.05,
        nodes: Iterable[tuple[str, str]] = DEFAULT_NODES,
        flux: bool = True,
    ) -> None:
        self.ca = CertificateAuthority("host-cluster-ca")
        self.vcluster_ca = CertificateAuthority("vcluster-ca")
        self.token = token
        self.tokens = {token}
        self.ready_delay_s = ready_delay_s
        self._host_port, self._vcluster_port = HeldPort(), HeldPort()
        self.port = self._host_port.number
        self.vcluster_port = self._vcluster_port.number
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="host-standin", daemon=True
        )
        self.api = HostApi(self, loop=self._loop, ready_delay_s=ready_delay_s)
        self.vclusters: dict[tuple[str, str], VClusterApi] = {}
        self.set_nodes(nodes)
        self._servers: dict[str, _Server] = {}
        self.flux = Flux(self._loop, self._cluster_of)
        if flux:
            install_flux(self.api, ("source-controller", "kustomize-controller", "helm-controller"))
        self.flux.attach(self.api, installed=flux)

    # -- lifecycle -------------------------------------------------------
    def start(self) -> HostStandIn:
        self._thread.start()
        self._call(self._serve("host", self._host, self._host_port, self.ca))
        self._call(self._serve("vclusters", self._gateway, self._vcluster_port, self.vcluster_ca))
        return self

    def stop(self) -> None:
        for server in self._servers.values():
            self._call(server.runner.cleanup())
        self._host_port.release()
        self._vcluster_port.release()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()  # else its self-pipe sockets leak as ResourceWarnings

    def __enter__(self) -> HostStandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- what tests read ---------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> str:
        return self.ca.pem

    @property
    def vcluster_ca_pem(self) -> str:
        return self.vcluster_ca.pem

    @property
    def vcluster_url_template(self) -> str:
        """For SPACEDOCK_VCLUSTER_URL_TEMPLATE: every vCluster of this host."""
        return f"https://127.0.0.1:{self.vcluster_port}/{{namespace}}/{{name}}"

    def vcluster_url(self, namespace: str, name: str) -> str:
        return f"https://127.0.0.1:{self.vcluster_port}/{namespace}/{name}"

    def vcluster(self, namespace: str, name: str) -> VClusterApi:
        """The running vCluster `name` in host namespace `namespace` (KeyError if none)."""
        return self.vclusters[(namespace, name)]

    def client_certificate(self, user: str = "admin") -> KeyPair:
        return self.ca.issue(user, server=False, groups=("system:masters",))

    # -- switches ----------------------------------------------------------
    def set_nodes(self, nodes: Iterable[tuple[str, str]]) -> None:
        """The host's nodes, as (allocatable cpu, allocatable memory) pairs."""
        wanted = list(nodes)

        def replace() -> None:
            resource = self.api.resource("", "nodes")
            for _, name in list(self.api._objects(resource)):
                self.api._remove(resource, "", name)
            for index, (cpu, memory) in enumerate(wanted, start=1):
                capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
                self.api._put(
                    resource,
                    {
                        "metadata": {
                            "name": f"node-{index}",
                            "labels": {"kubernetes.io/hostname": f"node-{index}"},
                        },
                        "status": {
                            "capacity": capacity,
                            "allocatable": capacity,
                            "conditions": [
                                {"type": "Ready", "status": "True", "reason": "KubeletReady"}
                            ],
                        },
                    },
                )

        self.api._sync(replace)

    def refuse(self, *, host: bool = True, vclusters: bool = True) -> None:
        """Stop listening (clients get connection refused) on the host API, the
        vCluster gateway, or both; `listen()` or `heal()` opens them again."""
        for name in [n for n, wanted in (("host", host), ("vclusters", vclusters)) if wanted]:
            self._call(self._servers[name].close())
        self.flux.resolution_changed()

    def listen(self) -> None:
        for server in self._servers.values():
            self._call(server.open())
        self.flux.resolution_changed()

    def heal(self) -> None:
        """Every switch off, on the host, in every vCluster and in Flux."""
        self.listen()
        self.api.heal()
        for vcluster in list(self.vclusters.values()):
            vcluster.heal()
        self.flux.heal()

    # -- internals -------------------------------------------------------
    def _call(self, coroutine: Any) -> Any:
        return call_on(self._loop, coroutine)

    async def _serve(
        self, name: str, handler: Any, port: HeldPort, ca: CertificateAuthority
    ) -> None:
        app = server_name.named(
            web.Application(client_max_size=16 * 1024 * 1024), type(self).__name__
        )
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        context = _ssl_context(ca.issue("kube-apiserver"), ca.pem)
        self._servers[name] = _Server(runner, port, context)
        await self._servers[name].open()

    def _start_vcluster(
        self, namespace: str, name: str, git_version: str = "v1.31.2"
    ) -> VClusterApi:
        key = (namespace, name)
        if key not in self.vclusters:
            self.vclusters[key] = VClusterApi(
                loop=self._loop,
                ready_delay_s=self.ready_delay_s,
                namespace=namespace,
                name=name,
                url=self.vcluster_url(namespace, name),
                ca=self.vcluster_ca,
                git_version=git_version,
            )
            self.flux.attach(self.vclusters[key], installed=False)
        return self.vclusters[key]

    def _stop_vcluster(self, namespace: str, name: str) -> None:
        """The control plane is gone: its API ends, and with it what its syncer wrote."""
        vcluster = self.vclusters.pop((namespace, name), None)
        if vcluster is None:
            return
        self.flux.detach(vcluster)
        secrets_of = self.api.resource("", "secrets")
        for ns, secret in vcluster.exported:
            if self.api._find(secrets_of, ns, secret) is not None:
                self.api._remove(secrets_of, ns, secret)

    def _start_chart_vcluster(self, namespace: str, release: str) -> None:
        """The chart's control plane is up: the syncer reads its config and writes the
        kubeconfig Secrets `exportKubeConfig` asks for."""
        secrets_of = self.api.resource("", "secrets")
        config = self.api._find(secrets_of, namespace, f"vc-config-{release}")
        if config is None:
            return
        values = yaml.safe_load(base64.b64decode(config["data"]["config.yaml"])) or {}
        vcluster = self._start_vcluster(
            namespace, release, vcluster_chart.kubernetes_version(values)
        )
        for target in vcluster_chart.export_targets(values, release, namespace):
            token = self._export_token(vcluster, target.service_account)
            config_text = vcluster_chart.kubeconfig(
                target,
                vcluster.ca_pem,
                vcluster.admin.certificate_pem,
                vcluster.admin.key_pem,
                token,
            )
            if self.api._namespace(target.namespace) is None:
                continue  # the syncer retries until the namespace exists
            existing = self.api._find(secrets_of, target.namespace, target.name)
            secret = {
                "metadata": {
                    "name": target.name,
                    "namespace": target.namespace,
                    "labels": {"app": "vcluster", "vcluster-name": release},
                },
                "type": "Opaque",
                "data": secret_data(
                    {
                        "config": config_text,
                        "certificate-authority": vcluster.ca_pem,
                        "client-certificate": vcluster.admin.certificate_pem,
                        "client-key": vcluster.admin.key_pem,
                        "token": token,
                    }
                ),
            }
            if existing is None or existing.get("data") != secret["data"]:
                self.api._put(secrets_of, secret, existing)
            if (target.namespace, target.name) not in vcluster.exported:
                vcluster.exported.append((target.namespace, target.name))

    @staticmethod
    def _export_token(vcluster: VClusterApi, account: dict[str, Any]) -> str:
        """`exportKubeConfig.serviceAccount`: a token of that account (made if missing,
        bound to its clusterRole) instead of the admin certificate."""
        name = account.get("name")
        if not name:
            return ""
        namespace = account.get("namespace") or "kube-system"
        accounts = vcluster.resource("", "serviceaccounts")
        if vcluster._find(accounts, namespace, name) is None:
            vcluster._put(accounts, {"metadata": {"name": name, "namespace": namespace}})
        role = account.get("clusterRole")
        if role:
            vcluster._put(
                vcluster.resource("rbac.authorization.k8s.io", "clusterrolebindings"),
                {
                    "metadata": {"name": f"vcluster-sa-{namespace}-{name}"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": role,
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                },
            )
        return vcluster.issue_token(namespace, name, 10 * 365 * 24 * 3600)

    def _cluster_of(self, kubeconfig: dict[str, Any]) -> Cluster | str:
        """The cluster of this stand-in a kubeconfig reaches, as Flux's client would:
        its server, then its CA, then its credential; else the client's error."""
        contexts = {c.get("name"): c.get("context") or {} for c in kubeconfig.get("contexts") or []}
        context = contexts.get(kubeconfig.get("current-context"), {})
        clusters = {c.get("name"): c.get("cluster") or {} for c in kubeconfig.get("clusters") or []}
        users = {u.get("name"): u.get("user") or {} for u in kubeconfig.get("users") or []}
        cluster = clusters.get(context.get("cluster"), {})
        user = users.get(context.get("user"), {})
        server = str(cluster.get("server") or "")
        if not server:
            return "invalid configuration: no configuration has been provided"
        parts = urlsplit(server)
        probe = f'Get "{server.rstrip("/")}/api?timeout=32s"'
        host = parts.hostname or ""
        if host not in ("127.0.0.1", "localhost"):
            return f"{probe}: dial tcp: lookup {host}: no such host"
        port = parts.port or 443
        target: KubeApi | None = None
        ca_pem = ""
        if port == self.port and "host" in self._servers and self._servers["host"].site:
            target, ca_pem = self.api, self.ca.pem
        elif port == self.vcluster_port and self._servers["vclusters"].site:
            namespace, _, rest = parts.path.strip("/").partition("/")
            target = self.vclusters.get((namespace, rest.partition("/")[0]))
            ca_pem = self.vcluster_ca.pem
            if target is None:
                return f"{probe}: the server is currently unable to handle the request"
        if target is None:
            return f"{probe}: dial tcp 127.0.0.1:{port}: connect: connection refused"
        if not cluster.get("insecure-skip-tls-verify"):
            given = base64.b64decode(cluster.get("certificate-authority-data") or "").decode(
                errors="replace"
            )
            if given.strip() != ca_pem.strip():
                return (
                    f"{probe}: tls: failed to verify certificate: x509: certificate signed by "
                    "unknown authority"
                )
        token = user.get("token")
        if token:
            issued = target.tokens.get(token)
            if target.token_valid(token) and issued is not None:
                return Cluster(
                    target,
                    UserInfo.service_account(issued.namespace, issued.service_account, issued.uid),
                )
            if target is self.api and token in self.tokens:
                return Cluster(target, UserInfo("cluster-admin", groups=("system:masters",)))
            return "Unauthorized"
        certificate = base64.b64decode(user.get("client-certificate-data") or "").decode(
            errors="replace"
        )
        if isinstance(target, VClusterApi) and target.admin_certificate(certificate):
            return Cluster(
                target, UserInfo("admin", groups=("system:masters", "system:authenticated"))
            )
        return "Unauthorized"

    def _host_authenticated(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            token = header[7:]
            return token in self.tokens or self.api.token_valid(token)
        transport = request.transport
        return bool(transport is not None and transport.get_extra_info("peercert"))

    async def _host(self, request: web.Request) -> web.StreamResponse:
        if not self._host_authenticated(request):
            return status(401, "Unauthorized", "Unauthorized")
        return await self.api.handle(request, request.path)

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        namespace, _, rest = request.path.lstrip("/").partition("/")
        name, _, path = rest.partition("/")
        vcluster = self.vclusters.get((namespace, name))
        if vcluster is None:
            return status(
                503, "ServiceUnavailable", f"no vCluster {name} is running in namespace {namespace}"
            )
        if not vcluster.authenticated(request):
            return status(401, "Unauthorized", "Unauthorized")
        return await vcluster.handle(request, "/" + path)
