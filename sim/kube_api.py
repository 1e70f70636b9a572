"""A generic Kubernetes API as the host and vCluster stand-ins serve it.

Any object kind a built-in or a CRD declares is stored under its API path (core
`/api/v1/...` and `/apis/{group}/{version}/...`, namespaced and cluster-scoped), with
discovery, label and field selectors, server-side apply, dry runs, the `status` and
`scale` subresources, `Status` error bodies, and the server-side behaviour the
CloudSpace reconciler relies on: StatefulSets and Deployments that become ready after a
delay, CRDs that become Established, TokenRequest, namespaces that delete their content
and may linger in Terminating. Every call is counted per verb and object, every object
creation per object.

A write goes through what a real API server does, in its order: decoding (unknown
fields: kube_validation.py), mutating admission (LimitRange defaults), validation
(names, labels, the kind's schema: kube_validation.py), validating webhooks
(kube_admission.py), ResourceQuota admission (kube_quota.py), then storage. Controllers
in the same process (flux_standin.py) send their requests through `serve()`, the same
way as HTTP clients do.

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
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml
from aiohttp import web
from multidict import CIMultiDict

from sim import strategic_merge
from sim.kube_admission import (
    Attributes,
    UserInfo,
    WebhookCall,
    admit,
    configuration_errors,
)
from sim.kube_paging import BadContinue, page_of
from sim.kube_quota import apply_limit_range_defaults, quota_refusal, quota_status
from sim.kube_standin import _matches
from sim.kube_validation import (
    CrdSchema,
    FieldError,
    Invalid,
    builtin_schemas,
    crd_schema,
    invalid_value,
    metadata_errors,
    object_meta_fields,
    prune,
    strict_decoding_failure,
    typed_patch_failure,
    unknown_field_warning,
)
from sim.loop_calls import call_on

Obj = dict[str, Any]
T = TypeVar("T")

APPLY_TYPES = ("application/apply-patch+yaml", "application/apply-patch+json")
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
NO_STRATEGIC_MERGE = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)
JSON_PATCH = "application/json-patch+json"
BINARY_TYPES = ("application/vnd.kubernetes.protobuf", "application/cbor")
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
    read_only: bool = False  # an aggregated API that only serves reads (metrics.k8s.io)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How kubectl names it: `statefulsets.apps`, `secrets`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def discovery(self) -> list[Obj]:
        verbs = (
            ["get", "list"]
            if self.read_only
            else ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        )
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
        r("batch", "v1", "jobs", "Job", True, ("status",)),
        r("batch", "v1", "cronjobs", "CronJob", True, ("status",), ("cj",)),
        r(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            True,
            ("status",),
            ("hpa",),
        ),
        r("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, ()),
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


# metrics-server's aggregated API (kubectl top): read only, and served only once installed.
METRICS_PODS = Resource(
    "metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, (), (), read_only=True
)


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
    retry_after_s: int | None = None  # a 429's Retry-After

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
    """A refusal, answered as a `Status` body (`body` when the caller built it whole)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        body: Obj | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.body = code, reason, message, body
        self.headers = headers or {}

    def status(self) -> Obj:
        if self.body is not None:
            return self.body
        found: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        }
        if self.reason:
            found["reason"] = self.reason
        return found

    def response(self) -> web.Response:
        return web.json_response(self.status(), status=self.code, headers=self.headers)


def refused(invalid: Invalid) -> ApiError:
    return ApiError(422, "Invalid", invalid.message, invalid.status())


@dataclass(frozen=True)
class WriteMode:
    store: bool  # False: computed for admission or a dry run, never kept
    quota: bool  # ResourceQuota admission runs (after the webhooks)


ADMIT = WriteMode(store=False, quota=False)
DRY_RUN = WriteMode(store=False, quota=True)
COMMIT = WriteMode(store=True, quota=True)


@dataclass
class Write:
    """One write's mode, its fieldValidation, and the warnings it earns."""

    mode: WriteMode
    validation: str = "Warn"
    warnings: list[str] = field(default_factory=list)


@dataclass
class Written:
    """What a write made: the new object (None when deleted), the old one, and what the
    call answers when that is not the object (a Scale, a terminating namespace)."""

    obj: Obj | None
    old: Obj | None
    created: bool = False
    kind: tuple[str, str, str] | None = None  # of `obj`, when not the resource's own
    shown: Obj | None = None

    @property
    def result(self) -> Obj:
        if self.shown is not None:
            return self.shown
        return self.obj or self.old or {}


@dataclass
class ApiRequest:
    """One request, from HTTP or from a controller in the process."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    body: bytes = b""
    user: UserInfo = field(
        default_factory=lambda: UserInfo("system:admin", groups=("system:masters",))
    )
    # Whether the HTTP client has hung up (a controller in the process never does).
    client_gone: Callable[[], bool] = lambda: False


@dataclass
class Answer:
    code: int
    body: Obj
    warnings: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)


def _scale_of(workload: Obj) -> Obj:
    """The autoscaling/v1 Scale of a Deployment, StatefulSet or ReplicaSet."""
    meta = workload["metadata"]
    selector = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": (workload.get("spec") or {}).get("replicas", 1)},
        "status": {
            "replicas": (workload.get("status") or {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        },
    }


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


def _json_patch(obj: Obj, operations: Any) -> Obj:
    if not isinstance(operations, list) or not all(
        isinstance(op, dict) and isinstance(op.get("path"), str) for op in operations
    ):
        raise ApiError(
            400,
            "BadRequest",
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        )
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


# The objects a controller's work reads, while it records them: (api, group, plural,
# namespace, name) per `_find`. The Flux stand-in reconciles an object again only when
# one of these changes (sim/flux_standin.py).
READS: ContextVar[set[tuple[Any, ...]] | None] = ContextVar("reads", default=None)
# Told of every change: the resource, namespace and name of the object written or
# deleted, or None when something no object holds changed (tokens expired).
ChangeListener = Callable[["Resource | None", str, str], None]


def _not_json(constant: str) -> Any:
    """NaN and Infinity are not JSON: a body holding them is read as YAML."""
    raise ValueError(constant)


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
        self.schemas = builtin_schemas(git_version)
        self._meta_fields = object_meta_fields(self.schemas.version)
        self._crd_schemas: dict[tuple[str, str, str], CrdSchema] = {}
        self.webhook_calls: list[WebhookCall] = []
        self.listeners: list[ChangeListener] = []  # told of every change
        self.deletion_listeners: list[Callable[[Resource, Obj], None]] = []
        self.resources: dict[tuple[str, str, str], Resource] = {}
        for resource in _builtin():
            self._register(resource)
        self._store: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        self._owned: dict[tuple[str, str, str, str, str], set[tuple[str, ...]]] = {}
        self._revision = 0
        self._calls: Counter[Call] = Counter()
        self._creations: Counter[str] = Counter()
        self._apply_faults: list[ApplyFault] = []
        # Applies that wait before they are answered (`hold_applies`), and how many wait now.
        self._holds: list[ApplyFault] = []
        self._held = 0
        # Of the held applies: each one's object name and whether its client has hung up;
        # how many arrived, and per name the most whose clients all still waited at once.
        self._held_clients: list[tuple[str, Callable[[], bool]]] = []
        self._held_arrivals: Counter[str] = Counter()
        self._most_waiting: Counter[str] = Counter()
        self._holds_released = asyncio.Event()
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

    def remove(self, plural: str, name: str, namespace: str = "", group: str = "") -> None:
        """Delete an object as a controller would (not counted; no admission)."""

        def removed() -> None:
            if self._find(self.resource(group, plural), namespace, name) is not None:
                self._remove(self.resource(group, plural), namespace, name)

        self._sync(removed)

    def serve_metrics(self) -> None:
        """metrics-server is installed: metrics.k8s.io/v1beta1 serves PodMetrics, read
        only, as `set_pod_metrics` gives them (the stand-in runs no containers to measure)."""
        self._sync(lambda: self._register(METRICS_PODS))

    def set_pod_metrics(self, namespace: str, pod: str, usage: dict[str, tuple[str, str]]) -> None:
        """What metrics-server reports for a pod: {container: (cpu, memory)}, e.g.
        {"web": ("12m", "40Mi")}. Gone with the pod."""

        def stored() -> None:
            self._objects(METRICS_PODS)[(namespace, pod)] = {
                "kind": "PodMetrics",
                "apiVersion": METRICS_PODS.api_version,
                "metadata": {"name": pod, "namespace": namespace, "creationTimestamp": now_text()},
                "timestamp": now_text(),
                "window": "30s",
                "containers": [
                    {"name": name, "usage": {"cpu": cpu, "memory": memory}}
                    for name, (cpu, memory) in usage.items()
                ],
            }

        self._sync(stored)

    def fail_apply(
        self,
        *,
        kind: str | None = None,
        name: str | None = None,
        times: int | None = 1,
        code: int = 500,
        retry_after_s: int | None = None,
    ) -> None:
        """The next `times` server-side applies (of that kind and/or name, if
        given; every one until `heal()` if times is None) answer `code`; a 429 as the
        API server's priority and fairness sheds load, with `Retry-After`."""
        fault = ApplyFault(code, kind, name, times, retry_after_s)
        self._sync(lambda: self._apply_faults.append(fault))

    def hold_applies(self, *, kind: str | None = None, name: str | None = None) -> None:
        """A slow API server: server-side applies of that kind and/or name wait, unanswered
        and not yet done, until `release_applies()` (or `heal()`); then each is done as
        usual, whether or not its client is still there, as a real server finishes a
        request it has read."""

        def held() -> None:
            self._holds.append(ApplyFault(0, kind, name, None))
            self._holds_released.clear()

        self._sync(held)

    def applies_held(self) -> int:
        """How many applies wait on a hold now."""
        return self._sync(lambda: self._held)

    def applies_waiting(self, name: str | None = None) -> int:
        """How many held applies (of objects called `name`) have a client still waiting
        for the answer now."""
        return self._sync(
            lambda: sum(not gone() for held, gone in self._held_clients if name in (None, held))
        )

    def held_arrivals(self, name: str) -> int:
        """How many applies of objects called `name` have arrived at a hold so far."""
        return self._sync(lambda: self._held_arrivals[name])

    def most_waiting_at_once(self, name: str) -> int:
        """The most held applies of objects called `name` whose clients all still waited
        at one time: two means two callers did the same work at once. Counted as each
        one arrives."""
        return self._sync(lambda: self._most_waiting[name])

    def release_applies(self) -> None:
        def released() -> None:
            self._holds.clear()
            self._holds_released.set()

        self._sync(released)

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
            self._changed(None)

        self._sync(expired)

    def heal(self) -> None:
        """Drop every fault switch; stalled workloads get ready, lingering namespaces go."""

        def healed() -> None:
            self._apply_faults.clear()
            self._holds.clear()
            self._holds_released.set()
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

        return call_on(self.loop, run())

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
        reads = READS.get()
        if reads is not None:
            reads.add((self, resource.group, resource.plural, namespace, name))
        return self._store.get((resource.group, resource.plural), {}).get((namespace, name))

    def _namespace(self, name: str) -> Obj | None:
        return self._store.get(("", "namespaces"), {}).get(("", name))

    # -- HTTP --------------------------------------------------------------
    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        """Answer one request whose API path (after any routing prefix) is `path`."""
        answer = await self.serve(
            ApiRequest(
                request.method,
                path,
                dict(request.query),
                request.content_type,
                await request.read(),
                self.user_of(request),
                lambda: request.transport is None or request.transport.is_closing(),
            )
        )
        headers = CIMultiDict[str](answer.headers)
        for warning in answer.warnings:
            headers.add("Warning", warning)
        return web.json_response(answer.body, status=answer.code, headers=headers)

    async def serve(self, request: ApiRequest) -> Answer:
        """Answer one request, over HTTP or from a controller in the same process."""
        try:
            if request.body and request.content_type in BINARY_TYPES:
                # The stand-in reads JSON and YAML only (a real server reads protobuf too):
                # say so plainly. kubectl's typed commands (`create namespace`) send protobuf
                # to servers newer than themselves; `apply -f` sends JSON.
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of type {request.content_type} is unsupported",
                )
            return await self._handle(request)
        except ApiError as error:
            return Answer(error.code, error.status(), headers=error.headers)

    def user_of(self, request: web.Request) -> UserInfo:
        """Who sent a request: a ServiceAccount for a token this server issued, the
        certificate's CN and O for a client certificate, else the host's admin."""
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            issued = self.tokens.get(header[7:])
            if issued is not None:
                return UserInfo.service_account(
                    issued.namespace, issued.service_account, issued.uid
                )
            return UserInfo("cluster-admin", groups=("system:masters", "system:authenticated"))
        transport = request.transport
        tls = transport.get_extra_info("ssl_object") if transport is not None else None
        subject = (tls.getpeercert() or {}).get("subject", ()) if tls is not None else ()
        names = [(key, value) for rdn in subject for key, value in rdn]
        common = next((v for k, v in names if k == "commonName"), "system:anonymous")
        groups = tuple(v for k, v in names if k == "organizationName")
        return UserInfo(common, groups=(*groups, "system:authenticated"))

    async def _handle(self, request: ApiRequest) -> Answer:
        path = "/" + request.path.strip("/")
        discovered = self._discovery(path)
        if discovered is not None:
            self._calls[Call("discovery", path)] += 1
            return Answer(200, discovered)
        body = request.body
        target = self._target(path)
        if request.query.get("watch") in ("true", "1"):
            raise ApiError(405, "MethodNotAllowed", "the stand-in does not serve watches")
        method = request.method
        if target.subresource == "token" and target.resource.plural == "serviceaccounts":
            self._calls[Call("create", "serviceaccounts/token", target.namespace, target.name)] += 1
            return Answer(201, self._token_request(target, self._decode(body)))
        if target.subresource:
            return await self._subresource(request, target)
        resource, ns, name = target.resource, target.namespace, target.name
        if resource.read_only and request.method != "GET":
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        qualified = resource.qualified
        if not name:
            if method == "GET":
                self._calls[Call("list", qualified, ns)] += 1
                return Answer(200, self._list(target, request.query))
            if method == "POST":
                obj = self._decode(body)
                meta = obj.setdefault("metadata", {}) if isinstance(obj, dict) else {}
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
                self._calls[Call("create", qualified, ns, meta.get("name", ""))] += 1
                named = Target(resource, ns, meta.get("name", ""), "")
                written, warnings = await self._write(
                    request,
                    named,
                    lambda write: self._create(resource, ns, copy.deepcopy(obj), write),
                )
                return Answer(201, written.result, warnings)
            if method == "DELETE":
                self._calls[Call("deletecollection", qualified, ns)] += 1
                warnings = []
                for item in self._list(target, request.query)["items"]:
                    one = Target(
                        resource,
                        ns or item["metadata"].get("namespace", ""),
                        item["metadata"]["name"],
                        "",
                    )
                    _, said = await self._write(request, one, self._deleting(one))
                    warnings += said
                return Answer(
                    200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}, warnings
                )
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        if method == "GET":
            self._calls[Call("get", qualified, ns, name)] += 1
            found = self._find(resource, ns, name)
            if found is None:
                raise not_found(resource, name)
            return Answer(200, found)
        if method == "PUT":
            self._calls[Call("update", qualified, ns, name)] += 1
            obj = self._decode(body)
            written, warnings = await self._write(
                request, target, lambda write: self._replace(target, copy.deepcopy(obj), write)
            )
            return Answer(200, written.result, warnings)
        if method == "PATCH":
            if request.content_type in APPLY_TYPES:
                self._calls[Call("apply", qualified, ns, name)] += 1
                await self._wait_if_held(resource.kind, name, request.client_gone)
                manager = request.query.get("fieldManager", "")
                force = request.query.get("force") in ("true", "1")
                config = self._decode(body)
                written, warnings = await self._write(
                    request,
                    target,
                    lambda write: self._apply(target, copy.deepcopy(config), manager, force, write),
                )
                return Answer(201 if written.created else 200, written.result, warnings)
            self._calls[Call("patch", qualified, ns, name)] += 1
            written, warnings = await self._write(
                request,
                target,
                lambda write: self._patch(target, request.content_type, body, write),
            )
            return Answer(200, written.result, warnings)
        if method == "DELETE":
            self._calls[Call("delete", qualified, ns, name)] += 1
            written, warnings = await self._write(
                request, target, lambda write: self._delete(resource, ns, name, write)
            )
            return Answer(200, written.result, warnings)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed")

    async def _wait_if_held(self, kind: str, name: str, client_gone: Callable[[], bool]) -> None:
        if not any(hold.matches(kind, name) for hold in self._holds):
            return
        self._held += 1
        self._held_arrivals[name] += 1
        entry = (name, client_gone)
        self._held_clients.append(entry)
        waiting = sum(not gone() for held, gone in self._held_clients if held == name)
        self._most_waiting[name] = max(self._most_waiting[name], waiting)
        try:
            await asyncio.shield(self._holds_released.wait())
        finally:
            self._held -= 1
            self._held_clients.remove(entry)

    def _deleting(self, target: Target) -> Callable[[Write], Written]:
        return lambda write: self._delete(target.resource, target.namespace, target.name, write)

    async def _write(
        self, request: ApiRequest, target: Target, compute: Callable[[Write], Written]
    ) -> tuple[Written, list[str]]:
        """A write through admission: computed once without storing for the webhooks
        (when any is registered, or for a dry run), then for real."""
        dry_run = request.query.get("dryRun") == "All"
        validation = request.query.get("fieldValidation") or "Warn"
        if validation not in ("Strict", "Warn", "Ignore"):
            raise ApiError(
                400,
                "BadRequest",
                f'fieldValidation must be one of "Ignore", "Warn", or "Strict", got {validation}',
            )
        warnings: list[str] = []
        if dry_run or self._webhook_configurations():
            probe = compute(Write(ADMIT, validation))
            warnings += await self._call_webhooks(request, target, probe, dry_run)
        final = Write(DRY_RUN if dry_run else COMMIT, validation)
        written = compute(final)
        return written, final.warnings + warnings

    def _webhook_configurations(self) -> list[Obj]:
        return list(
            self._store.get(
                ("admissionregistration.k8s.io", "validatingwebhookconfigurations"), {}
            ).values()
        )

    async def _call_webhooks(
        self, request: ApiRequest, target: Target, written: Written, dry_run: bool
    ) -> list[str]:
        resource = target.resource
        if written.obj is None:
            operation = "DELETE"
        elif target.subresource or written.old is not None:
            operation = "UPDATE"
        else:
            operation = "CREATE"
        kind = written.kind or (resource.group, resource.version, resource.kind)
        subject = written.obj or written.old or {}
        name = (subject.get("metadata") or {}).get("name", target.name)
        if resource.kind == "Namespace":
            labels: dict[str, str] | None = (subject.get("metadata") or {}).get("labels") or {}
        elif resource.namespaced:
            namespace = self._namespace(target.namespace) or {}
            labels = (namespace.get("metadata") or {}).get("labels") or {}
        else:
            labels = None
        attributes = Attributes(
            operation=operation,
            group=resource.group,
            version=resource.version,
            resource=resource.plural,
            subresource=target.subresource,
            kind=kind,
            namespaced=resource.namespaced,
            namespace=target.namespace,
            name=name,
            obj=copy.deepcopy(written.obj),
            old=copy.deepcopy(written.old),
            user=request.user,
            dry_run=dry_run,
            field_manager=request.query.get("fieldManager", ""),
        )
        refusal, warnings = await admit(
            self._webhook_configurations(), attributes, labels, self.webhook_calls
        )
        if refusal is not None:
            raise ApiError(
                refusal.code, str(refusal.status.get("reason", "")), refusal.message, refusal.status
            )
        return warnings

    @staticmethod
    def _decode(body: bytes) -> Any:
        try:
            # JSON is read as JSON, as the API server reads it: PyYAML builds a large body
            # (the CRDs Flux applies into every vCluster) ten times slower, and reads a
            # number such as 1e3 as a string.
            decoded = json.loads(body or b"{}", parse_constant=_not_json)
        except ValueError:
            try:
                decoded = yaml.load(body, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            except yaml.YAMLError as error:
                raise ApiError(
                    400, "BadRequest", f"the body is neither JSON nor YAML: {error}"
                ) from None
        if not isinstance(decoded, dict | list):
            raise ApiError(400, "BadRequest", "the body is not an object")
        return decoded

    # -- discovery ---------------------------------------------------------
    def _discovery(self, path: str) -> Obj | None:
        if path.startswith("/openapi/v3"):
            return self._openapi(path)
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

    def _openapi(self, path: str) -> Obj | None:
        """OpenAPI v3 as far as kubectl reads it: which PATCH operations take the
        `fieldValidation` query parameter (every one here), so it validates server-side."""
        if path == "/openapi/v3":
            versions = sorted({r.api_version for r in self.resources.values()})
            return {
                "paths": {
                    (f"apis/{v}" if "/" in v else f"api/{v}"): {
                        "serverRelativeURL": f"/openapi/v3/{'apis' if '/' in v else 'api'}/{v}"
                    }
                    for v in versions
                }
            }
        prefix = "/openapi/v3/"
        if not path.startswith(prefix):
            return None
        wanted = path[len(prefix) :].removeprefix("apis/").removeprefix("api/")
        served = [r for r in self.resources.values() if r.api_version == wanted]
        if not served:
            return None
        parameter = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        paths = {
            self.path_for(r, "{namespace}", "{name}"): {
                "patch": {
                    "x-kubernetes-group-version-kind": {
                        "group": r.group,
                        "version": r.version,
                        "kind": r.kind,
                    },
                    "parameters": [parameter],
                    "responses": {},
                }
            }
            for r in served
        }
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": self.git_version},
            "paths": paths,
        }

    def _groups(self) -> list[str]:
        return sorted({r.group for r in self.resources.values() if r.group})

    def _group(self, group: str) -> Obj:
        versions = sorted({r.version for r in self.resources.values() if r.group == group})
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": dict(entries[-1])}

    # -- paths -------------------------------------------------------------
    def _target(self, path: str) -> Target:
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
        try:
            page, paging = page_of(items, query, self._revision, filtered=bool(labels or fields))
        except BadContinue as error:
            raise ApiError(400, "BadRequest", str(error)) from None
        return {
            "kind": f"{target.resource.kind}List",
            "apiVersion": target.resource.api_version,
            "metadata": {"resourceVersion": str(self._revision), **paging},
            "items": page,
        }

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

    def _create(self, resource: Resource, namespace: str, obj: Obj, write: Write) -> Written:
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body is not an object")
        name = obj.get("metadata", {}).get("name") or ""
        self._check_same_namespace(resource, namespace, obj)
        if name and self._find(resource, namespace, name) is not None:
            raise ApiError(409, "AlreadyExists", f'{resource.qualified} "{name}" already exists')
        if name:
            self._check_namespace(resource, namespace, name)
        if "status" in resource.subresources:
            obj.pop("status", None)
        if resource.namespaced:
            obj.setdefault("metadata", {})["namespace"] = namespace
        self._mutate(resource, namespace, obj)
        self._validate(resource, obj, write, creating=True)
        if write.mode.quota:
            self._quota(resource, namespace, obj)
        return Written(self._put(resource, obj, store=write.mode.store), None, created=True)

    def _replace(self, target: Target, obj: Obj, write: Write) -> Written:
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
        self._validate(target.resource, obj, write, creating=False)
        stored = self._put(target.resource, obj, existing, store=write.mode.store)
        return Written(stored, existing)

    def _patch(self, target: Target, content_type: str, body: bytes, write: Write) -> Written:
        existing = self._find(target.resource, target.namespace, target.name)
        if existing is None:
            raise not_found(target.resource, target.name)
        patched = self._patched(target.resource, existing, content_type, body)
        if "status" in target.resource.subresources:
            patched["status"] = copy.deepcopy(existing.get("status"))
        self._validate(target.resource, patched, write, creating=False)
        stored = self._put(target.resource, patched, existing, store=write.mode.store)
        return Written(stored, existing)

    def _patched(self, resource: Resource, existing: Obj, content_type: str, body: bytes) -> Obj:
        """`existing` with a merge, strategic merge or JSON patch applied (not stored)."""
        patched = copy.deepcopy(existing)
        if content_type == MERGE_PATCH:
            return _merge(patched, self._decode(body), drop_nulls=True)
        if content_type == JSON_PATCH:
            return _json_patch(patched, self._decode(body))
        if content_type != STRATEGIC_PATCH:
            raise ApiError(
                415, "UnsupportedMediaType", f"the body of type {content_type} is unsupported"
            )
        schema = self.schemas.kind_schema(resource.api_version, resource.kind)
        if self._crd_schema(resource) is not None or schema is None:
            raise ApiError(415, "UnsupportedMediaType", NO_STRATEGIC_MERGE)
        try:
            return strategic_merge.apply(patched, self._decode(body), schema, self.schemas.resolve)
        except strategic_merge.PatchError as error:
            raise ApiError(400, "BadRequest", str(error)) from None

    def _apply(
        self, target: Target, config: Obj, manager: str, force: bool, write: Write
    ) -> Written:
        resource, namespace, name = target.resource, target.namespace, target.name
        store = write.mode.store
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
                if not store:
                    break
                if fault.times is not None:
                    fault.times -= 1
                if fault.code == 429:
                    wait = 1 if fault.retry_after_s is None else fault.retry_after_s
                    raise ApiError(
                        429,
                        "TooManyRequests",
                        "Too many requests, please try again later.",
                        {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "metadata": {},
                            "status": "Failure",
                            "message": "Too many requests, please try again later.",
                            "reason": "TooManyRequests",
                            "details": {"retryAfterSeconds": wait},
                            "code": 429,
                        },
                        {"Retry-After": str(wait)},
                    )
                raise ApiError(
                    fault.code,
                    "InternalError" if fault.code >= 500 else "Forbidden",
                    f'Internal error occurred: injected fault applying {resource.kind} "{name}"',
                )
        config = copy.deepcopy(config)
        config.setdefault("metadata", {})["name"] = name
        if resource.namespaced:
            config["metadata"]["namespace"] = namespace
        self._refuse_unknown_in_patch(resource, config)
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
            config["metadata"].pop(key, None)
        if "status" in resource.subresources:
            config.pop("status", None)
        owned_key = (resource.group, resource.plural, namespace, name, manager)
        fields = _leaf_paths({k: v for k, v in config.items() if k not in ("apiVersion", "kind")})
        existing = self._find(resource, namespace, name)
        if existing is None:
            self._check_namespace(resource, namespace, name)
            self._mutate(resource, namespace, config)
            self._validate(resource, config, write, creating=True)
            if write.mode.quota:
                self._quota(resource, namespace, config)
            if store:
                self._drop_ownership(resource, namespace, name)
                self._owned[owned_key] = fields
            return Written(self._put(resource, config, manager=manager, store=store), None, True)
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
        self._validate(resource, merged, write, creating=False)
        if store:
            for paths in others.values():
                if force:
                    paths -= fields
            self._owned[owned_key] = fields
        if self._same(merged, existing):
            return Written(existing, existing)
        stored = self._put(resource, merged, existing, manager=manager, store=store)
        return Written(stored, existing)

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

    async def _subresource(self, request: ApiRequest, target: Target) -> Answer:
        resource, ns, name = target.resource, target.namespace, target.name
        qualified = f"{resource.qualified}/{target.subresource}"
        existing = self._find(resource, ns, name)
        if existing is None:
            self._calls[Call(request.method.lower(), qualified, ns, name)] += 1
            raise not_found(resource, name)
        scale = target.subresource == "scale"
        if request.method == "GET":
            self._calls[Call("get", qualified, ns, name)] += 1
            return Answer(200, _scale_of(existing) if scale else existing)
        if target.subresource not in ("status", "scale") or request.method not in ("PUT", "PATCH"):
            raise ApiError(405, "MethodNotAllowed", f"{request.method} {qualified} is not served")
        verb = "update" if request.method == "PUT" else "patch"
        if request.content_type in APPLY_TYPES:
            verb = "apply"
        self._calls[Call(verb, qualified, ns, name)] += 1
        given = self._decode(request.body)

        def compute(write: Write) -> Written:
            current = self._find(resource, ns, name)
            if current is None:
                raise not_found(resource, name)
            if scale:
                return self._scale(resource, current, given, request.method == "PUT", write)
            if request.method == "PUT":
                updated = {**copy.deepcopy(current), "status": given.get("status") or {}}
            else:
                patched = self._patched(resource, current, request.content_type, request.body)
                updated = {**copy.deepcopy(current), "status": patched.get("status") or {}}
            self._validate_status(resource, updated, write)
            return Written(self._put(resource, updated, current, store=write.mode.store), current)

        written, warnings = await self._write(request, target, compute)
        return Answer(200, written.result, warnings)

    def _scale(
        self, resource: Resource, current: Obj, given: Obj, replace: bool, write: Write
    ) -> Written:
        """The `scale` subresource: an autoscaling/v1 Scale in, spec.replicas out."""
        old = _scale_of(current)
        new = (
            copy.deepcopy(given) if replace else _merge(copy.deepcopy(old), given, drop_nulls=True)
        )
        replicas = (new.get("spec") or {}).get("replicas", 0)
        name = current["metadata"]["name"]
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            error = invalid_value("spec.replicas", replicas, "must be greater than or equal to 0")
            raise refused(Invalid("Scale", "autoscaling", name, [error]))
        updated = copy.deepcopy(current)
        updated.setdefault("spec", {})["replicas"] = replicas
        stored = self._put(resource, updated, current, store=write.mode.store)
        return Written(_scale_of(stored), old, kind=("autoscaling", "v1", "Scale"))

    def _delete(self, resource: Resource, namespace: str, name: str, write: Write) -> Written:
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
            if not write.mode.store:
                return Written(None, found, shown=found)
            self._empty_namespace(name)
            if self._linger is not None:
                terminating = self._terminate(found, *self._linger)
                return Written(None, found, shown=terminating)
        if not write.mode.store:
            return Written(None, found, shown=found)
        return Written(None, found, shown=self._remove(resource, namespace, name))

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

    # -- validation ----------------------------------------------------------
    def _crd_schema(self, resource: Resource) -> CrdSchema | None:
        return self._crd_schemas.get((resource.group, resource.version, resource.plural))

    def _unknown_fields(self, resource: Resource, obj: Obj) -> list[tuple[Any, ...]]:
        crd = self._crd_schema(resource)
        if crd is not None:
            return crd.unknown_fields(obj)
        return self.schemas.check(obj).unknown

    def _refuse_unknown_in_patch(self, resource: Resource, config: Obj) -> None:
        """Server-side apply types the patch against the schema: an unknown field fails it."""
        body = {k: v for k, v in config.items() if k != "status"}
        unknown = self._unknown_fields(resource, body)
        if unknown:
            raise ApiError(500, "", typed_patch_failure(config, unknown))

    def _validate(self, resource: Resource, obj: Obj, write: Write, *, creating: bool) -> None:
        """What the API server refuses or drops in an object about to be stored."""
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        crd = self._crd_schema(resource)
        body = {k: v for k, v in obj.items() if k != "status"}
        schema_errors: list[FieldError] = []
        if crd is not None:
            unknown = crd.unknown_fields(body)
        else:
            findings = self.schemas.check(body)  # an unknown field breaks no other rule
            unknown, schema_errors = findings.unknown, findings.errors
        if unknown:
            if write.validation == "Strict":
                raise ApiError(400, "BadRequest", strict_decoding_failure(obj, unknown))
            prune(obj, unknown)
            if write.validation == "Warn":
                write.warnings += unknown_field_warning(unknown)
        name = (obj.get("metadata") or {}).get("name", "")
        errors = metadata_errors(obj, creating=creating)
        if crd is not None:
            crd.apply_defaults(obj)
            errors += crd.errors(obj)
        errors += schema_errors
        if resource.kind == "ValidatingWebhookConfiguration":
            errors += configuration_errors(obj)
        elif resource.kind == "CustomResourceDefinition" and not errors:
            errors += self._crd_errors(obj)
        if errors:
            raise refused(Invalid(resource.kind, resource.group, str(name), errors))

    def _validate_status(self, resource: Resource, obj: Obj, write: Write | None = None) -> None:
        """A status write (a kubelet's, a controller's) against the kind's schema, status
        included: unknown fields as for any write (a controller in this process: refused),
        every other violation refused."""
        write = write or Write(COMMIT, "Strict")
        crd = self._crd_schema(resource)
        if crd is None:
            findings = self.schemas.check_with_status(obj)
            if findings.unknown:
                if write.validation == "Strict":
                    raise ApiError(
                        400, "BadRequest", strict_decoding_failure(obj, findings.unknown)
                    )
                prune(obj, findings.unknown)
                if write.validation == "Warn":
                    write.warnings += unknown_field_warning(findings.unknown)
            errors = findings.errors
        else:
            errors = crd.errors(obj, with_status=True)
        if errors:
            name = obj["metadata"]["name"]
            raise refused(Invalid(resource.kind, resource.group, name, errors))

    def _crd_errors(self, crd: Obj) -> list[FieldError]:
        """apiextensions/v1 wants a schema per version; the stand-in must be able to
        evaluate every rule in it."""
        errors: list[FieldError] = []
        spec = crd.get("spec") or {}
        for index, version in enumerate(spec.get("versions") or []):
            at = f"spec.versions[{index}].schema.openAPIV3Schema"
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if not isinstance(schema, dict):
                errors.append(
                    FieldError(at, "FieldValueRequired", "Required value: schemas are required")
                )
                continue
            try:
                CrdSchema(spec["names"]["kind"], spec.get("group", ""), schema, self._meta_fields)
            except ValueError as error:
                errors.append(FieldError(at, "FieldValueInvalid", f"Invalid value: {error}"))
        return errors

    # -- admission in the API server itself -----------------------------------
    def _mutate(self, resource: Resource, namespace: str, obj: Obj) -> None:
        """Mutating admission: LimitRange defaults for a new pod."""
        if resource.kind != "Pod":
            return
        try:
            apply_limit_range_defaults(obj, self._in_namespace("limitranges", namespace))
        except ValueError as error:
            raise ApiError(
                422, "Invalid", f'Pod "{obj["metadata"]["name"]}" is invalid: {error}'
            ) from None

    def _quota(self, resource: Resource, namespace: str, obj: Obj) -> None:
        """ResourceQuota admission, the last step: every quota of the namespace."""
        if resource.kind != "Pod":
            return
        try:
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

    # -- storage and behaviour ---------------------------------------------
    def _put(
        self,
        resource: Resource,
        obj: Obj,
        existing: Obj | None = None,
        manager: str = "",
        *,
        store: bool = True,
    ) -> Obj:
        """Stamp metadata on a new state of an object and, unless `store` is false (a
        state computed for admission or a dry run), store it; behaviour follows."""
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
            if store:
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
        self._defaults(resource, obj, existing)
        if not store:
            meta.pop("resourceVersion", None)
            if existing is not None:
                meta["resourceVersion"] = existing["metadata"]["resourceVersion"]
            return obj
        meta["resourceVersion"] = self._next_revision()
        self._objects(resource)[(namespace, name)] = obj
        self._after_write(resource, obj, existing)
        self._changed(resource, namespace, name)
        return obj

    def _remove(self, resource: Resource, namespace: str, name: str) -> Obj:
        obj = self._objects(resource).pop((namespace, name))
        self._drop_ownership(resource, namespace, name)
        if resource.plural == "namespaces" and not resource.group:
            self._empty_namespace(name)
        self._after_delete(resource, obj)
        for listener in self.deletion_listeners:
            listener(resource, obj)
        self._changed(resource, namespace, name)
        return obj

    def _changed(self, resource: Resource | None, namespace: str = "", name: str = "") -> None:
        for listener in self.listeners:
            listener(resource, namespace, name)

    @staticmethod
    def path_for(resource: Resource, namespace: str = "", name: str = "", sub: str = "") -> str:
        """The API path of an object (or collection) of a resource."""
        path = (
            f"/apis/{resource.group}/{resource.version}"
            if resource.group
            else f"/api/{resource.version}"
        )
        if resource.namespaced and namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{resource.plural}"
        if name:
            path += f"/{name}"
        if sub:
            path += f"/{sub}"
        return path

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
        elif kind == "Secret" and obj.get("stringData"):
            # stringData is write-only: the server merges it into data, base64-encoded.
            encoded = secret_data({str(k): str(v) for k, v in obj.pop("stringData").items()})
            obj["data"] = {**(obj.get("data") or {}), **encoded}

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
            self._objects(METRICS_PODS).pop(
                (obj["metadata"]["namespace"], obj["metadata"]["name"]), None
            )
        elif resource.kind == "CustomResourceDefinition":
            self._unregister_crd(obj)

    def _register_crd(self, crd: Obj) -> None:
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        for version in spec.get("versions", []):
            if version.get("served", True):
                subresources = tuple(version.get("subresources") or {})
                resource = Resource(
                    spec["group"],
                    version["name"],
                    names["plural"],
                    names["kind"],
                    spec.get("scope", "Namespaced") == "Namespaced",
                    subresources,
                    tuple(names.get("shortNames") or ()),
                )
                self._register(resource)
                schema = crd_schema(crd, version["name"], self._meta_fields)
                if schema is not None:
                    self._crd_schemas[(resource.group, resource.version, resource.plural)] = schema

    def _unregister_crd(self, crd: Obj) -> None:
        """A CRD deleted takes its kind and every object of it along."""
        spec = crd.get("spec", {})
        plural = (spec.get("names") or {}).get("plural", "")
        for key in [k for k in self.resources if k[0] == spec.get("group") and k[2] == plural]:
            del self.resources[key]
            self._crd_schemas.pop(key, None)
        self._store.pop((spec.get("group", ""), plural), None)

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
