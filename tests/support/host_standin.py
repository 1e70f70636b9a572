"""A host cluster for CloudSpaces and the vClusters that appear on it, for tests
and benches that drive spacedock's reconciler through kubernetes-asyncio.

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

Both speak the generic API of kube_api.py: any kind stored under its API path
(core and `/apis/{group}/{version}`, namespaced and cluster-scoped, CRD kinds
too), discovery (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{g}/{v}`)
enough for the typed and dynamic clients, GET/list (labelSelector,
fieldSelector), POST (409 AlreadyExists), PUT, PATCH (merge, strategic merge
treated as merge, JSON patch) and server-side apply (`application/apply-patch
+yaml` or `+json`, `?fieldManager=spacedock&force=true`: creates or merges,
drops fields the manager stopped applying, 409 on conflicts without force,
resourceVersion bumped only when something changed, `managedFields` names the
manager), DELETE (404 NotFound), `Status` bodies for every error.

What the host does by itself:

* StatefulSets and Deployments report `readyReplicas`/`availableReplicas`
  = `spec.replicas` (default 1) `ready_delay_s` after they are created or
  their spec changes (`api.stall(name)` holds them; `api.unstall(name)`).
* A StatefulSet `<name>` in a namespace `cs-<key>` is a vCluster: once it is
  ready, the vCluster API starts and Secret `vc-<name>` appears beside it with
  `config` (admin kubeconfig, server `https://localhost:8443`),
  `certificate-authority`, `client-certificate`, `client-key` (base64 `data`,
  as vCluster writes it). Deleting the StatefulSet (or its namespace) ends
  that vCluster and everything stored in it.
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
* Deployments (Flux in `flux-system`) get ready after the delay, CRDs are
  Established at once and their kinds served;
* pods are admitted as the API server does: LimitRange defaults, then every
  ResourceQuota of the namespace (`requests.cpu`/`cpu`, `requests.memory`/
  `memory`, `limits.*`): over `hard` is 403 Forbidden `pods "x" is forbidden:
  exceeded quota: spacedock-quota, requested: requests.cpu=2, used:
  requests.cpu=500m, limited: requests.cpu=1` (only the exceeded keys named;
  a constrained key the pod states nothing for is `failed quota: …: must
  specify requests.cpu`); an admitted pod counts in the quota's `status.used`
  (and stops counting when deleted). Workloads start no pods: only pods
  created through the API count. The rules live in kube_quota.py.

Switches and counters, on `host.api` and on each vCluster alike (callable from
any thread; `host.heal()` heals all):

* `fail_apply(kind=, name=, times=1, code=500)`: the next `times` matching
  server-side applies answer `code` (`times=None`: until healed);
* `stall(name)` / `unstall(name)`, `linger_namespaces()` /
  `release_namespaces()`, `expire_tokens()`, `heal()`;
* on the host only: `host.refuse(host=True, vclusters=True)` stops listening
  (connection refused) until `host.listen()`; `host.set_nodes(...)`;
* `count(verb=, resource=, namespace=, name=)` counts calls (`verb` one of
  get, list, create, update, patch, apply, delete, deletecollection,
  discovery; `resource` as kubectl names it: `statefulsets.apps`,
  `serviceaccounts/token`); `calls()` is every `Call` counted;
  `creations()` counts how often each object came into existence
  (`statefulsets.apps/cs-x/demo`), `created_twice()` lists any made more than
  once; `reset_counts()`;
* `find(plural, name, namespace, group)` / `find_all(plural, namespace, group)`
  return copies of stored objects; `put(obj)` stores one as a controller
  would (not counted).

Use it as a module fixture, pointing the spacedock server at it:

    @pytest.fixture(scope="module")
    def host() -> Iterator[HostStandIn]:
        with HostStandIn() as standin:
            yield standin

    @pytest.fixture(scope="module")
    def server_env(host: HostStandIn) -> dict[str, str]:
        return {"SPACEDOCK_VCLUSTER_URL_TEMPLATE": host.vcluster_url_template}

and register the host as a GENERIC space with `server=host.url`,
`ca=host.ca_pem`, `token=host.token`. Delays are attributes read when a
workload is written (`host.api.ready_delay_s`, and each vCluster's), so a bench
can subtract them. To stop a reconciler mid-PROVISIONING deterministically,
`host.api.stall(name)` its StatefulSet, wait until `host.api.find(
"statefulsets", name, namespace, group="apps")` exists, kill it, restart,
`host.api.unstall(name)`, then assert `host.api.created_twice() == []`.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from tests.support.kube_api import KubeApi, Obj, Resource, secret_data
from tests.support.kube_standin import _ssl_context, status
from tests.support.pki import CertificateAuthority, KeyPair
from tests.support.ports import HeldPort

VCLUSTER_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_NODES = (("8", "32Gi"), ("8", "32Gi"))


def vcluster_kubeconfig(ca_pem: str, admin: KeyPair) -> str:
    """The admin kubeconfig a vCluster writes into its Secret."""
    encoded = secret_data({"ca": ca_pem, "cert": admin.certificate_pem, "key": admin.key_pem})
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "my-vcluster",
                    "cluster": {
                        "server": "https://localhost:8443",
                        "certificate-authority-data": encoded["ca"],
                    },
                }
            ],
            "contexts": [
                {
                    "name": "my-vcluster",
                    "context": {"cluster": "my-vcluster", "user": "my-vcluster"},
                }
            ],
            "current-context": "my-vcluster",
            "users": [
                {
                    "name": "my-vcluster",
                    "user": {
                        "client-certificate-data": encoded["cert"],
                        "client-key-data": encoded["key"],
                    },
                }
            ],
        },
        sort_keys=False,
    )


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
    ) -> None:
        super().__init__(loop=loop, ready_delay_s=ready_delay_s, namespaces=VCLUSTER_NAMESPACES)
        self.namespace, self.name, self.url = namespace, name, url
        self.ca_pem = ca.pem
        self.admin = ca.issue("admin", server=False, groups=("system:masters",))
        self._admin_der = ssl.PEM_cert_to_DER_cert(self.admin.certificate_pem)

    def authenticated(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            return self.token_valid(header[7:])
        transport = request.transport
        tls = transport.get_extra_info("ssl_object") if transport is not None else None
        return tls is not None and tls.getpeercert(binary_form=True) == self._admin_der


class HostApi(KubeApi):
    """The host's API server: starts a vCluster when its StatefulSet is ready."""

    def __init__(self, standin: HostStandIn, **options: Any) -> None:
        super().__init__(**options)
        self.standin = standin

    def _became_ready(self, resource: Resource, obj: Obj) -> None:
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if resource.kind == "StatefulSet" and namespace.startswith("cs-"):
            vcluster = self.standin._start_vcluster(namespace, name)
            secret = f"vc-{name}"
            if self._find(self.resource("", "secrets"), namespace, secret) is None:
                self._put(
                    self.resource("", "secrets"),
                    {
                        "metadata": {"name": secret, "namespace": namespace},
                        "type": "Opaque",
                        "data": secret_data(
                            {
                                "config": vcluster_kubeconfig(vcluster.ca_pem, vcluster.admin),
                                "certificate-authority": vcluster.ca_pem,
                                "client-certificate": vcluster.admin.certificate_pem,
                                "client-key": vcluster.admin.key_pem,
                            }
                        ),
                    },
                )

    def _after_delete(self, resource: Resource, obj: Obj) -> None:
        super()._after_delete(resource, obj)
        if resource.kind == "StatefulSet":
            self.standin.vclusters.pop(
                (obj["metadata"]["namespace"], obj["metadata"]["name"]), None
            )


class HostStandIn:
    def __init__(
        self,
        *,
        token: str = "host-token",
        ready_delay_s: float = 0.05,
        nodes: Iterable[tuple[str, str]] = DEFAULT_NODES,
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

    def listen(self) -> None:
        for server in self._servers.values():
            self._call(server.open())

    def heal(self) -> None:
        """Every switch off, on the host and in every vCluster."""
        self.listen()
        self.api.heal()
        for vcluster in list(self.vclusters.values()):
            vcluster.heal()

    # -- internals -------------------------------------------------------
    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _serve(
        self, name: str, handler: Any, port: HeldPort, ca: CertificateAuthority
    ) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        context = _ssl_context(ca.issue("kube-apiserver"), ca.pem)
        self._servers[name] = _Server(runner, port, context)
        await self._servers[name].open()

    def _start_vcluster(self, namespace: str, name: str) -> VClusterApi:
        key = (namespace, name)
        if key not in self.vclusters:
            self.vclusters[key] = VClusterApi(
                loop=self._loop,
                ready_delay_s=self.ready_delay_s,
                namespace=namespace,
                name=name,
                url=self.vcluster_url(namespace, name),
                ca=self.vcluster_ca,
            )
        return self.vclusters[key]

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
