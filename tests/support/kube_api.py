"""A generic Kubernetes API as the host and vCluster stand-ins serve it.

Any object kind is stored under its API path (core `/api/v1/...` and
`/apis/{group}/{version}/...`, namespaced and cluster-scoped, CRD-defined kinds
and kinds it has never heard of alike), with discovery, label and field
selectors, server-side apply, `Status` error bodies, and the server-side
behaviour the CloudSpace reconciler relies on: StatefulSets and Deployments
that become ready after a delay, CRDs that become Established, LimitRange
defaults and ResourceQuota admission for pods, TokenRequest, namespaces that
delete their content and may linger in Terminating. Every call is counted per
verb and object, every object creation per object.

It knows nothing of sockets or threads: host_standin.py serves one `KubeApi`
for the host and one per vCluster, all on one event loop in a background
thread. The public methods below are safe to call from any thread.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import json
import re
import secrets
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from aiohttp import web

from tests.support.kube_quota import apply_limit_range_defaults, quota_refusal, quota_status
from tests.support.kube_standin import DNS_LABEL, _matches, status

Obj = dict[str, Any]
T = TypeVar("T")

APPLY_TYPES = ("application/apply-patch+yaml", "application/apply-patch+json")
MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
JSON_PATCH = "application/json-patch+json"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
ISSUER = "https://kubernetes.default.svc.cluster.local"
MIN_TOKEN_SECONDS = 600  # the API server refuses shorter TokenRequests
TERMINATING_CONFLICT = (
    "The system is ensuring all content is removed from this namespace.  "
    "Upon completion, this namespace will automatically be purged by the system."
)
LINGER_CONTENT = "Some resources are remaining: persistentvolumeclaims. has 1 resource instances"
LINGER_FINALIZERS = (
    "Some content in the namespace has finalizers remaining: "
    "kubernetes.io/pvc-protection in 1 resource instances"
)


def now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- resources --------------------------------------------------------------
@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ("status",)
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How kubectl names it: `statefulsets.apps`, `secrets`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def discovery(self) -> list[Obj]:
        verbs = [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
        entries: list[Obj] = [
            {
                "name": self.plural,
                "singularName": self.kind.lower(),
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": verbs,
                **({"shortNames": list(self.short_names)} if self.short_names else {}),
            }
        ]
        for sub in self.subresources:
            if sub == "token":
                entries.append(
                    {
                        "name": f"{self.plural}/token",
                        "singularName": "",
                        "namespaced": True,
                        "group": "authentication.k8s.io",
                        "version": "v1",
                        "kind": "TokenRequest",
                        "verbs": ["create"],
                    }
                )
            else:
                entries.append(
                    {
                        "name": f"{self.plural}/{sub}",
                        "singularName": "",
                        "namespaced": self.namespaced,
                        "kind": self.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        return entries


def _builtin() -> list[Resource]:
    r = Resource
    return [
        r("", "v1", "namespaces", "Namespace", False, ("status", "finalize"), ("ns",)),
        r("", "v1", "nodes", "Node", False, ("status",), ("no",)),
        r("", "v1", "pods", "Pod", True, ("status",), ("po",)),
        r("", "v1", "services", "Service", True, ("status",), ("svc",)),
        r("", "v1", "endpoints", "Endpoints", True, (), ("ep",)),
        r("", "v1", "secrets", "Secret", True, ()),
        r("", "v1", "configmaps", "ConfigMap", True, (), ("cm",)),
        r("", "v1", "serviceaccounts", "ServiceAccount", True, ("token",), ("sa",)),
        r("", "v1", "resourcequotas", "ResourceQuota", True, ("status",), ("quota",)),
        r("", "v1", "limitranges", "LimitRange", True, (), ("limits",)),
        r("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("status",), ("pvc",)),
        r("", "v1", "persistentvolumes", "PersistentVolume", False, ("status",), ("pv",)),
        r("", "v1", "events", "Event", True, (), ("ev",)),
        r("apps", "v1", "statefulsets", "StatefulSet", True, ("status", "scale"), ("sts",)),
        r("apps", "v1", "deployments", "Deployment", True, ("status", "scale"), ("deploy",)),
        r("apps", "v1", "daemonsets", "DaemonSet", True, ("status",), ("ds",)),
        r("apps", "v1", "replicasets", "ReplicaSet", True, ("status", "scale"), ("rs",)),
        r("rbac.authorization.k8s.io", "v1", "roles", "Role", True, ()),
        r("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, ()),
        r("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, ()),
        r(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            False,
            (),
        ),
        r("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, (), ("netpol",)),
        r("networking.k8s.io", "v1", "ingresses", "Ingress", True, ("status",), ("ing",)),
        r(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            ("status",),
            ("crd", "crds"),
        ),
        r("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("status",)),
        r("coordination.k8s.io", "v1", "leases", "Lease", True, ()),
        r("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, (), ("pc",)),
        r("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, (), ("sc",)),
        r(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            False,
            (),
        ),
        r(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            False,
            (),
        ),
    ]


@dataclass(frozen=True)
class Call:
    """One API call: `verb` is get, list, create, update, patch, apply, delete,
    deletecollection or discovery; `resource` is kubectl's qualified name
    (`statefulsets.apps`, `serviceaccounts/token`) or the discovery path."""

    verb: str
    resource: str
    namespace: str = ""
    name: str = ""


@dataclass
class ApplyFault:
    code: int
    kind: str | None
    name: str | None
    times: int | None  # None: until healed

    def matches(self, kind: str, name: str) -> bool:
        return (self.kind is None or self.kind == kind) and (self.name is None or self.name == name)


@dataclass
class IssuedToken:
    namespace: str
    service_account: str
    uid: str
    expires: dt.datetime


@dataclass
class Target:
    resource: Resource
    namespace: str
    name: str
    subresource: str


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def response(self) -> web.Response:
        return status(self.code, self.reason, self.message)


def _jwt(claims: Obj) -> str:
    """A token shaped like the API server's (a JWT); only this server's own record
    of it makes it valid, so the signature is random bytes."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    header = json.dumps({"alg": "RS256", "kid": "standin"}).encode()
    return ".".join(
        [part(header), part(json.dumps(claims).encode()), part(secrets.token_bytes(64))]
    )


def not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource.qualified} "{name}" not found')


def _get_path(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _leaf_paths(value: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The fields an applied configuration sets; lists count as one field."""
    if isinstance(value, dict) and value:
        found: set[tuple[str, ...]] = set()
        for key, inner in value.items():
            found |= _leaf_paths(inner, (*prefix, key))
        return found
    return {prefix}


def _merge(base: Obj, patch: Obj, *, drop_nulls: bool) -> Obj:
    for key, value in patch.items():
        if value is None and drop_nulls:
            base.pop(key, None)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, drop_nulls=drop_nulls)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _json_patch(obj: Obj, operations: list[Obj]) -> Obj:
    for op in operations:
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        parent: Any = obj
        for key in keys[:-1]:
            parent = parent[int(key)] if isinstance(parent, list) else parent[key]
        last = keys[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if op["op"] == "add":
                    parent.insert(index, op["value"])
                else:
                    parent[index] = op["value"]
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif (
            op["op"] == "test"
            and (parent[int(last)] if isinstance(parent, list) else parent.get(last)) != op["value"]
        ):
            raise ApiError(422, "Invalid", f"the test operation failed at {op['path']}")
    return obj


def _field_matches(obj: Obj, selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        negate = "!=" in term
        key, value = re.split(r"!=|==|=", term, maxsplit=1)
        actual = _get_path(obj, tuple(key.strip().split(".")))
        if (str(actual) == value.strip()) == negate:
            return False
    return True


class KubeApi:
    """One API server's objects and rules; `handle` answers one HTTP request."""

    def __init__(
        self,
        *,
        loop: asyncio.AbstractEventLoop,
        ready_delay_s: float = 0.05,
        namespaces: Iterable[str] = ("default", "kube-system", "kube-public"),
        git_version: str = "v1.31.2",
    ) -> None:
        self.loop = loop
        self.ready_delay_s = ready_delay_s
        self.git_version = git_version
        self.resources: dict[tuple[str, str, str], Resource] = {}
        for resource in _builtin():
            self._register(resource)
        self._store: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        self._owned: dict[tuple[str, str, str, str, str], set[tuple[str, ...]]] = {}
        self._revision = 0
        self._calls: Counter[Call] = Counter()
        self._creations: Counter[str] = Counter()
        self._apply_faults: list[ApplyFault] = []
        self._stalled: set[str] = set()
        self._linger: tuple[str, str] | None = None
        self.tokens: dict[str, IssuedToken] = {}
        for name in namespaces:
            self._put(self.resource("", "namespaces"), {"metadata": {"name": name}})

    # -- public, callable from any thread ----------------------------------
    def calls(self) -> Counter[Call]:
        """A snapshot of every call so far, counted."""
        return self._sync(lambda: Counter(self._calls))

    def count(
        self,
        verb: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> int:
        """How many calls matched every given part (`resource` as kubectl names it)."""

        def counted() -> int:
            return sum(
                n
                for call, n in self._calls.items()
                if (verb is None or call.verb == verb)
                and (resource is None or call.resource == resource)
                and (namespace is None or call.namespace == namespace)
                and (name is None or call.name == name)
            )

        return self._sync(counted)

    def creations(self) -> Counter[str]:
        """How often each object came into existence (`statefulsets.apps/ns/name`)."""
        return self._sync(lambda: Counter(self._creations))

    def created_twice(self) -> list[str]:
        """Objects that came into existence more than once: a reconciler that
        lost track of what it made, or deleted and remade it."""
        return sorted(ref for ref, n in self.creations().items() if n > 1)

    def reset_counts(self) -> None:
        def cleared() -> None:
            self._calls.clear()
            self._creations.clear()

        self._sync(cleared)

    def find(self, plural: str, name: str, namespace: str = "", group: str = "") -> Obj | None:
        """A copy of the stored object, or None."""
        return self._sync(
            lambda: copy.deepcopy(self._store.get((group, plural), {}).get((namespace, name)))
        )

    def find_all(self, plural: str, namespace: str | None = None, group: str = "") -> list[Obj]:
        """Copies of the stored objects of one kind (in one namespace if given)."""
        return self._sync(
            lambda: [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(self._store.get((group, plural), {}).items())
                if namespace is None or ns == namespace
            ]
        )

    def put(self, obj: Obj) -> Obj:
        """Store an object as a controller would (not counted as a call)."""

        def stored() -> Obj:
            group, _, version = obj["apiVersion"].rpartition("/")
            kinds = {(r.group, r.version, r.kind): r for r in self.resources.values()}
            resource = kinds.get((group, version, obj["kind"]))
            if resource is None:
                raise KeyError(f"no kind {obj['kind']} in {obj['apiVersion']} is served")
            return copy.deepcopy(self._put(resource, copy.deepcopy(obj)))

        return self._sync(stored)

    def fail_apply(
        self,
        *,
        kind: str | None = None,
        name: str | None = None,
        times: int | None = 1,
        code: int = 500,
    ) -> None:
        """The next `times` server-side applies (of that kind and/or name, if
        given; every one until `heal()` if times is None) answer `code`."""
        self._sync(lambda: self._apply_faults.append(ApplyFault(code, kind, name, times)))

    def stall(self, name: str) -> None:
        """StatefulSets and Deployments called `name` (or `namespace/name`) never get ready."""
        self._sync(lambda: self._stalled.add(name))

    def unstall(self, name: str) -> None:
        """Let stalled workloads of that name get ready (after the usual delay)."""

        def released() -> None:
            self._stalled.discard(name)
            self._schedule_all_workloads()

        self._sync(released)

    def linger_namespaces(
        self, content: str = LINGER_CONTENT, finalizers: str = LINGER_FINALIZERS
    ) -> None:
        """Namespaces deleted from now on stay Terminating, their conditions
        `NamespaceContentRemaining` / `NamespaceFinalizersRemaining` carrying
        these messages, until `release_namespaces()`."""
        self._sync(lambda: setattr(self, "_linger", (content, finalizers)))

    def release_namespaces(self) -> None:
        """Stop lingering: Terminating namespaces go away now."""

        def released() -> None:
            self._linger = None
            namespaces = self.resource("", "namespaces")
            for (_, name), ns in list(self._store.get(("", "namespaces"), {}).items()):
                if ns["status"].get("phase") == "Terminating":
                    self._remove(namespaces, "", name)

        self._sync(released)

    def expire_tokens(self) -> None:
        """Every token issued so far is expired from now on."""

        def expired() -> None:
            for token in self.tokens.values():
                token.expires = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)

        self._sync(expired)

    def heal(self) -> None:
        """Drop every fault switch; stalled workloads get ready, lingering namespaces go."""

        def healed() -> None:
            self._apply_faults.clear()
            self._stalled.clear()
            self._schedule_all_workloads()

        self._sync(healed)
        self.release_namespaces()

    # -- plumbing ----------------------------------------------------------
    def _sync(self, function: Callable[[], T]) -> T:
        """Run `function` on the server's loop (the store is only touched there)."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop or not self.loop.is_running():
            return function()

        async def run() -> T:
            return function()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=10)

    def _register(self, resource: Resource) -> None:
        self.resources[(resource.group, resource.version, resource.plural)] = resource

    def resource(self, group: str, plural: str) -> Resource:
        return next(r for r in self.resources.values() if r.group == group and r.plural == plural)

    def _next_revision(self) -> str:
        self._revision += 1
        return str(self._revision)

    @staticmethod
    def ref(resource: Resource, namespace: str, name: str) -> str:
        return "/".join(filter(None, [resource.qualified, namespace, name]))

    def _objects(self, resource: Resource) -> dict[tuple[str, str], Obj]:
        return self._store.setdefault((resource.group, resource.plural), {})

    def _find(self, resource: Resource, namespace: str, name: str) -> Obj | None:
        return self._store.get((resource.group, resource.plural), {}).get((namespace, name))

    def _namespace(self, name: str) -> Obj | None:
        return self._store.get(("", "namespaces"), {}).get(("", name))

    # -- HTTP --------------------------------------------------------------
    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        """Answer one request whose API path (after any routing prefix) is `path`."""
        try:
            return await self._handle(request, path)
        except ApiError as error:
            return error.response()

    async def _handle(self, request: web.Request, path: str) -> web.StreamResponse:
        path = "/" + path.strip("/")
        discovered = self._discovery(path)
        if discovered is not None:
            self._calls[Call("discovery", path)] += 1
            return web.json_response(discovered)
        body = await request.read()
        target = self._target(path, request.method, body)
        if request.query.get("watch") in ("true", "1"):
            raise ApiError(405, "MethodNotAllowed", "the stand-in does not serve watches")
        method = request.method
        if target.subresource == "token" and target.resource.plural == "serviceaccounts":
            self._calls[Call("create", "serviceaccounts/token", target.namespace, target.name)] += 1
            return web.json_response(self._token_request(target, self._decode(body)), status=201)
        if target.subresource:
            return await self._subresource(request, target, body)
        if not target.name:
            if method == "GET":
                self._calls[Call("list", target.resource.qualified, target.namespace)] += 1
                return web.json_response(self._list(target, request.query))
            if method == "POST":
                obj = self._decode(body)
                name = obj.get("metadata", {}).get("name") or (
                    obj.get("metadata", {}).get("generateName", "") + secrets.token_hex(3)
                    if obj.get("metadata", {}).get("generateName")
                    else ""
                )
                self._calls[Call("create", target.resource.qualified, target.namespace, name)] += 1
                obj.setdefault("metadata", {})["name"] = name
                return web.json_response(
                    self._create(target.resource, target.namespace, obj), status=201
                )
            if method == "DELETE":
                self._calls[
                    Call("deletecollection", target.resource.qualified, target.namespace)
                ] += 1
                for obj in self._list(target, request.query)["items"]:
                    self._delete(target.resource, target.namespace, obj["metadata"]["name"])
                return web.json_response(
                    {"kind": "Status", "apiVersion": "v1", "status": "Success"}
                )
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        qualified, ns, name = target.resource.qualified, target.namespace, target.name
        if method == "GET":
            self._calls[Call("get", qualified, ns, name)] += 1
            found = self._find(target.resource, ns, name)
            if found is None:
                raise not_found(target.resource, name)
            return web.json_response(found)
        if method == "PUT":
            self._calls[Call("update", qualified, ns, name)] += 1
            return web.json_response(self._replace(target, self._decode(body)))
        if method == "PATCH":
            content_type = request.content_type
            if content_type in APPLY_TYPES:
                self._calls[Call("apply", qualified, ns, name)] += 1
                manager = request.query.get("fieldManager", "")
                force = request.query.get("force") in ("true", "1")
                obj, created = self._apply(target, self._decode(body), manager, force)
                return web.json_response(obj, status=201 if created else 200)
            self._calls[Call("patch", qualified, ns, name)] += 1
            return web.json_response(self._patch(target, content_type, body))
        if method == "DELETE":
            self._calls[Call("delete", qualified, ns, name)] += 1
            return web.json_response(self._delete(target.resource, ns, name))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed")

    @staticmethod
    def _decode(body: bytes) -> Any:
        try:
            decoded = yaml.load(body or b"{}", Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as error:
            raise ApiError(
                400, "BadRequest", f"the body is neither JSON nor YAML: {error}"
            ) from None
        if not isinstance(decoded, dict | list):
            raise ApiError(400, "BadRequest", "the body is not an object")
        return decoded

    # -- discovery ---------------------------------------------------------
    def _discovery(self, path: str) -> Obj | None:
        parts = path.strip("/").split("/")
        if path in ("/version", "/version/"):
            return {
                "major": "1",
                "minor": self.git_version.split(".")[1],
                "gitVersion": self.git_version,
                "gitCommit": "0" * 40,
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.23.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:443"}
                ],
            }
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [self._group(g) for g in self._groups()],
            }
        if parts[0] == "apis" and len(parts) == 2 and parts[1] in self._groups():
            return {"kind": "APIGroup", "apiVersion": "v1", **self._group(parts[1])}
        if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            served = [
                r for r in self.resources.values() if (r.group, r.version) == (group, version)
            ]
            if not served:
                return None
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [entry for r in served for entry in r.discovery()],
            }
        return None

    def _groups(self) -> list[str]:
        return sorted({r.group for r in self.resources.values() if r.group})

    def _group(self, group: str) -> Obj:
        versions = sorted({r.version for r in self.resources.values() if r.group == group})
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": dict(entries[-1])}

    # -- paths -------------------------------------------------------------
    def _target(self, path: str, method: str, body: bytes) -> Target:
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = ""
        namespace_subresource = group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")
        if len(rest) >= 3 and rest[0] == "namespaces" and not namespace_subresource:
            namespace, rest = rest[1], rest[2:]
        plural, name, sub = rest[0], rest[1] if len(rest) > 1 else "", "/".join(rest[2:])
        resource = self.resources.get((group, version, plural))
        if resource is None and method in ("POST", "PUT", "PATCH") and body:
            # A kind never heard of: learn it from the object, as a CRD would declare it.
            decoded = self._decode(body)
            kind = decoded.get("kind") if isinstance(decoded, dict) else None
            if isinstance(kind, str) and kind:
                resource = Resource(group, version, plural, kind, bool(namespace), ())
                self._register(resource)
        if resource is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespace and not resource.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub and sub not in resource.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return Target(resource, namespace, name, sub)

    # -- verbs -------------------------------------------------------------
    def _list(self, target: Target, query: Any) -> Obj:
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        items = [
            obj
            for (ns, _), obj in sorted(self._objects(target.resource).items())
            if (not target.namespace or ns == target.namespace)
            and _matches(obj["metadata"].get("labels") or {}, labels)
            and _field_matches(obj, fields)
        ]
        return {
            "kind": f"{target.resource.kind}List",
            "apiVersion": target.resource.api_version,
            "metadata": {"resourceVersion": str(self._revision)},
            "items": items,
        }

    def _check_name(self, resource: Resource, name: Any) -> None:
        rule = DNS_LABEL if resource.plural in ("namespaces", "services") else DNS_SUBDOMAIN
        if not isinstance(name, str) or not name or len(name) > 253 or not rule.match(name):
            raise ApiError(
                422,
                "Invalid",
                f'{resource.kind} "{name}" is invalid: metadata.name: Invalid value: "{name}"',
            )

    def _check_namespace(self, resource: Resource, namespace: str, name: str) -> None:
        if not resource.namespaced:
            return
        found = self._namespace(namespace)
        if found is None:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        if found["status"].get("phase") == "Terminating":
            raise ApiError(
                403,
                "Forbidden",
                f'{resource.qualified} "{name}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated",
            )

    @staticmethod
    def _check_same_namespace(resource: Resource, namespace: str, obj: Obj) -> None:
        given = (obj.get("metadata") or {}).get("namespace")
        if resource.namespaced and given and given != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )

    def _create(self, resource: Resource, namespace: str, obj: Obj) -> Obj:
        name = obj.get("metadata", {}).get("name")
        self._check_name(resource, name)
        self._check_same_namespace(resource, namespace, obj)
        if self._find(resource, namespace, name) is not None:
            raise ApiError(409, "AlreadyExists", f'{resource.qualified} "{name}" already exists')
        self._check_namespace(resource, namespace, name)
        if "status" in resource.subresources:
            obj.pop("status", None)
        obj.setdefault("metadata", {})["namespace"] = namespace
        self._admit(resource, namespace, obj)
        return self._put(resource, obj)

    def _replace(self, target: Target, obj: Obj) -> Obj:
        existing = self._find(target.resource, target.namespace, target.name)
        if existing is None:
            raise not_found(target.resource, target.name)
        version = obj.get("metadata", {}).get("resourceVersion")
        if version and version != existing["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {target.resource.qualified} "{target.name}": '
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
            )
        if "status" in target.resource.subresources:
            obj["status"] = copy.deepcopy(existing.get("status"))
        return self._put(target.resource, obj, existing)

    def _patch(self, target: Target, content_type: str, body: bytes) -> Obj:
        existing = self._find(target.resource, target.namespace, target.name)
        if existing is None:
            raise not_found(target.resource, target.name)
        patched = copy.deepcopy(existing)
        if content_type in MERGE_TYPES:
            _merge(patched, self._decode(body), drop_nulls=True)
        elif content_type == JSON_PATCH:
            _json_patch(patched, self._decode(body))
        else:
            raise ApiError(
                415, "UnsupportedMediaType", f"the body of type {content_type} is unsupported"
            )
        if "status" in target.resource.subresources:
            patched["status"] = copy.deepcopy(existing.get("status"))
        return self._put(target.resource, patched, existing)

    def _apply(self, target: Target, config: Obj, manager: str, force: bool) -> tuple[Obj, bool]:
        resource, namespace, name = target.resource, target.namespace, target.name
        if not manager:
            raise ApiError(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch",
            )
        if config.get("kind") != resource.kind or not config.get("apiVersion"):
            raise ApiError(
                400, "BadRequest", "invalid object type: apply needs apiVersion and kind"
            )
        if config.get("metadata", {}).get("name", name) != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({config['metadata']['name']}) does not match the "
                f"name on the URL ({name})",
            )
        self._check_same_namespace(resource, namespace, config)
        for fault in self._apply_faults:
            if fault.matches(resource.kind, name) and fault.times != 0:
                if fault.times is not None:
                    fault.times -= 1
                raise ApiError(
                    fault.code,
                    "InternalError" if fault.code >= 500 else "Forbidden",
                    f'Internal error occurred: injected fault applying {resource.kind} "{name}"',
                )
        config = copy.deepcopy(config)
        config.setdefault("metadata", {})["name"] = name
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
            config["metadata"].pop(key, None)
        if "status" in resource.subresources:
            config.pop("status", None)
        owned_key = (resource.group, resource.plural, namespace, name, manager)
        fields = _leaf_paths({k: v for k, v in config.items() if k not in ("apiVersion", "kind")})
        existing = self._find(resource, namespace, name)
        if existing is None:
            self._check_name(resource, name)
            self._check_namespace(resource, namespace, name)
            config["metadata"]["namespace"] = namespace
            self._admit(resource, namespace, config)
            self._drop_ownership(resource, namespace, name)
            self._owned[owned_key] = fields
            return self._put(resource, config, manager=manager), True
        others = {
            key[4]: paths
            for key, paths in self._owned.items()
            if key[:4] == owned_key[:4] and key[4] != manager
        }
        if not force:
            conflicts = sorted(
                f'conflict with "{other}": .{".".join(path)}'
                for other, paths in others.items()
                for path in fields & paths
                if _get_path(existing, path) != _get_path(config, path)
            )
            if conflicts:
                raise ApiError(
                    409,
                    "Conflict",
                    f"Apply failed with {len(conflicts)} conflict(s): " + "; ".join(conflicts),
                )
        merged = copy.deepcopy(existing)
        for path in self._owned.get(owned_key, set()) - fields:
            if any(path in paths for paths in others.values()):
                continue
            parent = _get_path(merged, path[:-1])
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
        _merge(merged, config, drop_nulls=False)
        for paths in others.values():
            if force:
                paths -= fields
        self._owned[owned_key] = fields
        if self._same(merged, existing):
            return existing, False
        return self._put(resource, merged, existing, manager=manager), False

    @staticmethod
    def _same(a: Obj, b: Obj) -> bool:
        def bare(obj: Obj) -> Obj:
            meta = {
                k: v
                for k, v in obj.get("metadata", {}).items()
                if k not in ("resourceVersion", "managedFields")
            }
            return {**obj, "metadata": meta}

        return bare(a) == bare(b)

    def _drop_ownership(self, resource: Resource, namespace: str, name: str) -> None:
        for key in [
            k for k in self._owned if k[:4] == (resource.group, resource.plural, namespace, name)
        ]:
            del self._owned[key]

    async def _subresource(self, request: web.Request, target: Target, body: bytes) -> web.Response:
        resource, ns, name = target.resource, target.namespace, target.name
        qualified = f"{resource.qualified}/{target.subresource}"
        existing = self._find(resource, ns, name)
        if existing is None:
            self._calls[Call(request.method.lower(), qualified, ns, name)] += 1
            raise not_found(resource, name)
        if request.method == "GET":
            self._calls[Call("get", qualified, ns, name)] += 1
            return web.json_response(existing)
        if target.subresource != "status" or request.method not in ("PUT", "PATCH"):
            raise ApiError(405, "MethodNotAllowed", f"{request.method} {qualified} is not served")
        verb = "update" if request.method == "PUT" else "patch"
        if request.content_type in APPLY_TYPES:
            verb = "apply"
        self._calls[Call(verb, qualified, ns, name)] += 1
        given = self._decode(body).get("status") or {}
        updated = copy.deepcopy(existing)
        if request.method == "PUT":
            updated["status"] = given
        else:
            _merge(updated.setdefault("status", {}), given, drop_nulls=True)
        return web.json_response(self._put(resource, updated, existing))

    def _delete(self, resource: Resource, namespace: str, name: str) -> Obj:
        found = self._find(resource, namespace, name)
        if found is None:
            raise not_found(resource, name)
        if resource.plural == "namespaces" and not resource.group:
            if found["status"].get("phase") == "Terminating":
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on namespaces "{name}": {TERMINATING_CONFLICT}',
                )
            self._empty_namespace(name)
            if self._linger is not None:
                return self._terminate(found, *self._linger)
        return self._remove(resource, namespace, name)

    def _empty_namespace(self, namespace: str) -> None:
        for (group, plural), objects in list(self._store.items()):
            for ns, name in [key for key in objects if key[0] == namespace]:
                self._remove(self.resource(group, plural), ns, name)

    def _terminate(self, namespace: Obj, content: str, finalizers: str) -> Obj:
        updated = copy.deepcopy(namespace)
        updated["metadata"]["deletionTimestamp"] = now_text()
        stamp = now_text()
        updated["status"] = {
            "phase": "Terminating",
            "conditions": [
                {
                    "type": "NamespaceDeletionDiscoveryFailure",
                    "status": "False",
                    "reason": "ResourcesDiscovered",
                    "message": "All resources successfully discovered",
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "NamespaceDeletionContentFailure",
                    "status": "False",
                    "reason": "ContentDeleted",
                    "message": "All content successfully deleted, may be waiting on finalization",
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "NamespaceContentRemaining",
                    "status": "True",
                    "reason": "SomeResourcesRemain",
                    "message": content,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "NamespaceFinalizersRemaining",
                    "status": "True",
                    "reason": "SomeFinalizersRemain",
                    "message": finalizers,
                    "lastTransitionTime": stamp,
                },
            ],
        }
        return self._put(self.resource("", "namespaces"), updated, namespace)

    # -- storage and behaviour ---------------------------------------------
    def _put(
        self, resource: Resource, obj: Obj, existing: Obj | None = None, manager: str = ""
    ) -> Obj:
        """Store a new state of an object, stamping metadata; behaviour follows."""
        meta = obj.setdefault("metadata", {})
        name = meta["name"]
        namespace = meta.get("namespace", "") if resource.namespaced else ""
        existing = existing or self._find(resource, namespace, name)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if resource.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if existing is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_text()
            meta["generation"] = 1
            self._creations[self.ref(resource, namespace, name)] += 1
        else:
            for key in ("uid", "creationTimestamp", "generation", "managedFields"):
                if key in existing["metadata"]:
                    meta[key] = existing["metadata"][key]
            if obj.get("spec") != existing.get("spec"):
                meta["generation"] = existing["metadata"].get("generation", 1) + 1
        if manager:
            entries = [e for e in meta.get("managedFields", []) if e["manager"] != manager]
            entries.append(
                {
                    "manager": manager,
                    "operation": "Apply",
                    "apiVersion": resource.api_version,
                    "time": now_text(),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {},
                }
            )
            meta["managedFields"] = entries
        meta["resourceVersion"] = self._next_revision()
        self._defaults(resource, obj, existing)
        self._objects(resource)[(namespace, name)] = obj
        self._after_write(resource, obj, existing)
        return obj

    def _remove(self, resource: Resource, namespace: str, name: str) -> Obj:
        obj = self._objects(resource).pop((namespace, name))
        self._drop_ownership(resource, namespace, name)
        if resource.plural == "namespaces" and not resource.group:
            self._empty_namespace(name)
        self._after_delete(resource, obj)
        return obj

    def _defaults(self, resource: Resource, obj: Obj, existing: Obj | None) -> None:
        """What the API server and its controllers fill in."""
        kind = resource.kind
        if kind == "Namespace":
            name = obj["metadata"]["name"]
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj.setdefault("status", {"phase": "Active"})
        elif kind == "StatefulSet" and existing is None:
            obj["status"] = {"replicas": 0, "availableReplicas": 0}
        elif kind == "Deployment" and existing is None:
            obj["status"] = {}
        elif kind == "Pod" and existing is None:
            obj["status"] = {"phase": "Running"}
        elif kind == "CustomResourceDefinition":
            spec = obj.get("spec", {})
            obj["status"] = {
                "acceptedNames": spec.get("names", {}),
                "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")],
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
                ],
            }
        elif kind == "Service":
            balanced = (obj.get("spec") or {}).get("type") == "LoadBalancer"
            ingress = {"ingress": [{"ip": "127.0.0.1", "ipMode": "VIP"}]} if balanced else {}
            obj["status"] = {"loadBalancer": ingress}
        elif kind == "ServiceAccount" and existing is None:
            obj.pop("secrets", None)

    def _after_write(self, resource: Resource, obj: Obj, existing: Obj | None) -> None:
        kind = resource.kind
        if kind in ("StatefulSet", "Deployment"):
            generation = obj["metadata"]["generation"]
            if existing is None or existing["metadata"].get("generation") != generation:
                self._schedule_ready(resource, obj)
        elif kind == "CustomResourceDefinition":
            self._register_crd(obj)
        elif kind in ("Pod", "ResourceQuota"):
            self._refresh_quotas(obj["metadata"]["namespace"])

    def _after_delete(self, resource: Resource, obj: Obj) -> None:
        if resource.kind == "Pod":
            self._refresh_quotas(obj["metadata"]["namespace"])

    def _register_crd(self, crd: Obj) -> None:
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        for version in spec.get("versions", []):
            if version.get("served", True):
                subresources = tuple(version.get("subresources") or {})
                self._register(
                    Resource(
                        spec["group"],
                        version["name"],
                        names["plural"],
                        names["kind"],
                        spec.get("scope", "Namespaced") == "Namespaced",
                        subresources,
                        tuple(names.get("shortNames") or ()),
                    )
                )

    # -- workloads ---------------------------------------------------------
    def _stalled_workload(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        return (
            meta["name"] in self._stalled or f"{meta['namespace']}/{meta['name']}" in self._stalled
        )

    def _schedule_ready(self, resource: Resource, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        self.loop.call_later(self.ready_delay_s, self._make_ready, resource, key, meta["uid"])

    def _schedule_all_workloads(self) -> None:
        for plural in ("statefulsets", "deployments"):
            resource = self.resource("apps", plural)
            for obj in self._objects(resource).values():
                self._schedule_ready(resource, obj)

    def _make_ready(self, resource: Resource, key: tuple[str, str], uid: str) -> None:
        obj = self._objects(resource).get(key)
        if obj is None or obj["metadata"]["uid"] != uid or self._stalled_workload(obj):
            return
        replicas = obj.get("spec", {}).get("replicas", 1)
        generation = obj["metadata"]["generation"]
        if resource.kind == "StatefulSet":
            state: Obj = {
                "observedGeneration": generation,
                "replicas": replicas,
                "readyReplicas": replicas,
                "currentReplicas": replicas,
                "updatedReplicas": replicas,
                "availableReplicas": replicas,
            }
        else:
            state = {
                "observedGeneration": generation,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
                "conditions": [
                    {
                        "type": "Available",
                        "status": "True",
                        "reason": "MinimumReplicasAvailable",
                        "message": "Deployment has minimum availability.",
                    }
                ],
            }
        if obj.get("status") == state:
            return
        updated = {**obj, "status": state}
        self._put(resource, updated, obj)
        self._became_ready(resource, updated)

    def _became_ready(self, resource: Resource, obj: Obj) -> None:
        """A hook for what happens once a workload is ready (the host's vCluster)."""

    # -- tokens ------------------------------------------------------------
    def _token_request(self, target: Target, request: Obj) -> Obj:
        accounts = self.resource("", "serviceaccounts")
        account = self._find(accounts, target.namespace, target.name)
        if account is None:
            raise not_found(accounts, target.name)
        spec = request.get("spec") or {}
        audiences = spec.get("audiences") or [ISSUER]
        seconds = spec.get("expirationSeconds") or 3600
        if not isinstance(seconds, int) or seconds < MIN_TOKEN_SECONDS:
            raise ApiError(
                422,
                "Invalid",
                "TokenRequest.authentication.k8s.io is invalid: spec.expirationSeconds: "
                "Invalid value: may not specify a duration less than 10 minutes",
            )
        issued = dt.datetime.now(dt.UTC).replace(microsecond=0)
        expires = issued + dt.timedelta(seconds=seconds)
        uid = account["metadata"]["uid"]
        token = _jwt(
            {
                "aud": audiences,
                "exp": int(expires.timestamp()),
                "iat": int(issued.timestamp()),
                "nbf": int(issued.timestamp()),
                "iss": ISSUER,
                "sub": f"system:serviceaccount:{target.namespace}:{target.name}",
                "kubernetes.io": {
                    "namespace": target.namespace,
                    "serviceaccount": {"name": target.name, "uid": uid},
                },
            }
        )
        self.tokens[token] = IssuedToken(target.namespace, target.name, uid, expires)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {
                "name": target.name,
                "namespace": target.namespace,
                "creationTimestamp": now_text(),
            },
            "spec": {
                "audiences": audiences,
                "expirationSeconds": seconds,
                "boundObjectRef": spec.get("boundObjectRef"),
            },
            "status": {
                "token": token,
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }

    def token_valid(self, token: str) -> bool:
        """A TokenRequest token of this server, unexpired, whose ServiceAccount still
        exists (the same one: a token dies with the account it was bound to)."""
        issued = self.tokens.get(token)
        if issued is None or issued.expires <= dt.datetime.now(dt.UTC):
            return False
        account = self._find(
            self.resource("", "serviceaccounts"), issued.namespace, issued.service_account
        )
        return account is not None and account["metadata"]["uid"] == issued.uid

    # -- pods and quotas ---------------------------------------------------
    def _in_namespace(self, plural: str, namespace: str) -> list[Obj]:
        return [
            obj
            for (ns, _), obj in sorted(self._objects(self.resource("", plural)).items())
            if ns == namespace
        ]

    def _admit(self, resource: Resource, namespace: str, obj: Obj) -> None:
        """Admission for a new pod: LimitRange defaults, then every ResourceQuota."""
        if resource.kind != "Pod":
            return
        try:
            apply_limit_range_defaults(obj, self._in_namespace("limitranges", namespace))
            refusal = quota_refusal(
                obj,
                self._in_namespace("resourcequotas", namespace),
                self._in_namespace("pods", namespace),
            )
        except ValueError as error:
            raise ApiError(
                422, "Invalid", f'Pod "{obj["metadata"]["name"]}" is invalid: {error}'
            ) from None
        if refusal is not None:
            raise ApiError(403, "Forbidden", refusal)

    def _refresh_quotas(self, namespace: str) -> None:
        """The quota controller: `status.hard` mirrors the spec, `status.used` the pods."""
        pods = self._in_namespace("pods", namespace)
        objects = self._objects(self.resource("", "resourcequotas"))
        for quota in self._in_namespace("resourcequotas", namespace):
            state = quota_status(quota, pods)
            if quota.get("status") != state:
                metadata = {**quota["metadata"], "resourceVersion": self._next_revision()}
                objects[(namespace, quota["metadata"]["name"])] = {
                    **quota,
                    "status": state,
                    "metadata": metadata,
                }


def secret_data(values: dict[str, str]) -> dict[str, str]:
    """A Secret's `data`: each value base64-encoded, as the API stores it."""
    return {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}
