"""The vCluster Helm chart 0.36.1 (loft-sh/vcluster `chart/` at tag v0.36.1), as the host
stand-in installs it for a HelmRelease, and what its syncer writes once it runs.

What it checks, as Helm v4 (helm-controller v1.6.3's) does:

* the release's values coalesced over the chart's defaults (`upstream/vcluster/
  values.yaml`; a `null` removes a default) must pass the chart's
  `values.schema.json` (Draft 2020-12, checked with `jsonschema`); a failure is
  worded as Helm v4 words it (santhosh-tekuri/jsonschema v6 through
  `pkg/chart/common/util`): `values don't meet the specifications of the schema(s) in
  the following chart(s):\\nvcluster:\\n- at '/controlPlane/distro': additional
  properties 'k3s' not allowed` (errors sorted by path; Go's map order is random);
* the templates' own `fail`s (`_validate.tpl`, `_exportKubeConfig.tpl`): the
  volume-snapshot keys removed in 0.36.0, `exportKubeConfig.secret` together with
  `additionalSecrets`, an additional secret with neither name nor namespace;
* Helm's release name rule (at most 53, DNS-1123 subdomain).

What it renders into the release namespace (names and shapes read from the templates;
the objects are built here): the control plane's StatefulSet `<release>` (a
Deployment when persistence is off), Services `<release>` (`controlPlane.service`)
and `<release>-headless`, Secret `vc-config-<release>` (the merged values under
`config.yaml`), ServiceAccounts `vc-<release>` and `vc-workload-<release>`, Role and
RoleBinding `vc-<release>`, ResourceQuota and LimitRange `vc-<release>` (only when one
of `policies.resourceQuota.enabled` / `policies.limitRange.enabled` is literally
true, each unless its own is false), NetworkPolicies `vc-work-`, `vc-cp-`,
`vc-kube-dns-` and `vc-snapshot-<release>` (`policies.networkPolicy.enabled`), and
the Ingress `<release>` (`controlPlane.ingress.enabled`). Not rendered: ClusterRoles,
PodDisruptionBudgets, etcd, the platform's objects. Probes, volumes and most pod
settings are left out of the StatefulSet; its resources, images
(`defaultImageRegistry` honoured) and persistence are in.

What the syncer writes once the control plane is up (`pkg/setup/controllers.go`):
Secret `vc-<release>` (always) and one per `exportKubeConfig.additionalSecrets` entry
(or the deprecated `exportKubeConfig.secret`), keys `config`, `certificate-authority`,
`client-certificate`, `client-key`, `token`; the server is `exportKubeConfig.server`
(default `https://localhost:8443`), the names are `exportKubeConfig.context` (else
`my-vcluster`: the default is not confirmed), `insecure` drops the CA, and a
`serviceAccount` makes the credential a token of that account inside the vCluster.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sim.kube_validation import DNS1123_SUBDOMAIN

Obj = dict[str, Any]

CHART_NAME = "vcluster"
CHART_VERSION = "0.36.1"
APP_VERSION = "0.36.1"
UPSTREAM = Path(__file__).parent / "upstream" / "vcluster"
CHART_LABEL = f"{CHART_NAME}-{CHART_VERSION}"
SCHEMA_ROOT = "jsonschema validation failed with 'file:///values.schema.json#'"
REMOVED_IN_0_36 = (
    ("sync", "toHost", "volumeSnapshots"),
    ("sync", "toHost", "volumeSnapshotContents"),
    ("sync", "fromHost", "volumeSnapshotClasses"),
    ("deploy", "volumeSnapshotController"),
    ("rbac", "enableVolumeSnapshotRules"),
)
DEFAULT_CONTEXT = "my-vcluster"


@functools.cache
def default_values() -> Obj:
    found: Obj = yaml.safe_load((UPSTREAM / "values.yaml").read_text())
    return found


@functools.cache
def values_schema() -> Obj:
    found: Obj = json.loads((UPSTREAM / "values.schema.json").read_text())
    return found


def coalesce(defaults: Any, values: Any) -> Any:
    """Helm's coalescing of a release's values over a chart's defaults: maps merge,
    anything else replaces, and a null removes the default."""
    if not isinstance(defaults, dict) or not isinstance(values, dict):
        return copy.deepcopy(values)
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# -- Helm v4's schema errors --------------------------------------------------
@dataclass
class _Error:
    """One node of santhosh-tekuri/jsonschema v6's error tree."""

    location: tuple[str, ...]
    message: str
    causes: list[_Error]
    reference: bool = False  # a $ref's error, not shown when it has one cause
    group: bool = False  # several errors of one schema

    def lines(self, indent: int) -> Iterator[str]:
        if self.reference and len(self.causes) == 1:
            yield from self.causes[0].lines(indent)
            return
        pointer = "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in self.location)
        yield "  " * (indent - 1) + f"- at {_quote(pointer)}: {self.message}"
        for cause in self.causes:
            yield from cause.lines(indent + 1)


def _quote(text: str) -> str:
    return "'" + json.dumps(text)[1:-1].replace('\\"', '"').replace("'", "\\'") + "'"


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


TYPE_ORDER = ("null", "boolean", "number", "integer", "string", "array", "object")


class _Tree:
    """Builds the error tree the Go validator builds, for the keywords this schema uses."""

    def __init__(self, root: Obj) -> None:
        self.root = root

    def resolve(self, ref: str) -> Obj:
        node: Any = self.root
        for part in ref.removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        found: Obj = node
        return found

    def validate(self, schema: Any, value: Any, at: tuple[str, ...]) -> _Error | None:
        if schema is True or schema is None:
            return None
        if schema is False:
            return _Error(at, "false schema", [])
        errors: list[_Error] = []
        types = schema.get("type")
        if types is not None:
            wanted = [types] if isinstance(types, str) else list(types)
            got = _type_of(value)
            integral = got == "number" and float(value).is_integer()
            if got not in wanted and not ("integer" in wanted and integral):
                want = " or ".join(t for t in TYPE_ORDER if t in wanted)
                return _Error(at, f"got {got}, want {want}", [])
        if "const" in schema and value != schema["const"]:
            return _Error(at, f"value must be {json.dumps(schema['const'])}", [])
        if "enum" in schema and value not in schema["enum"]:
            shown = ", ".join(_quote(v) if isinstance(v, str) else str(v) for v in schema["enum"])
            return _Error(at, f"value must be one of {shown}", [])
        if "$ref" in schema:
            inner = self.validate(self.resolve(schema["$ref"]), value, at)
            if inner is not None:
                causes = inner.causes if inner.group else [inner]
                errors.append(_Error(at, "validation failed", causes, reference=True))
        if isinstance(value, dict):
            errors += self._object(schema, value, at)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                found = self.validate(schema["items"], item, (*at, str(index)))
                if found is not None:
                    errors.append(found)
        elif isinstance(value, str):
            if "minLength" in schema and len(value) < schema["minLength"]:
                errors.append(
                    _Error(at, f"minLength: got {len(value)}, want {schema['minLength']}", [])
                )
            if "pattern" in schema and not re.search(schema["pattern"], value):
                errors.append(
                    _Error(
                        at,
                        f"{_quote(value)} does not match pattern {_quote(schema['pattern'])}",
                        [],
                    )
                )
        for keyword, label in (
            ("anyOf", "'anyOf' failed"),
            ("oneOf", "'oneOf' failed, none matched"),
        ):
            if keyword in schema:
                failures = [self.validate(s, value, at) for s in schema[keyword]]
                if all(f is not None for f in failures):
                    errors.append(_Error(at, label, [f for f in failures if f is not None]))
        if not errors:
            return None
        if len(errors) == 1:
            return errors[0]
        return _Error(at, "validation failed", errors, group=True)

    def _object(self, schema: Obj, value: Obj, at: tuple[str, ...]) -> list[_Error]:
        errors: list[_Error] = []
        missing = [key for key in schema.get("required") or [] if key not in value]
        if missing:
            listed = ", ".join(_quote(k) for k in missing)
            noun = "property" if len(missing) == 1 else "properties"
            errors.append(_Error(at, f"missing {noun} {listed}", []))
        properties = schema.get("properties") or {}
        patterns = schema.get("patternProperties") or {}
        additional = schema.get("additionalProperties")
        extra: list[str] = []
        for key, inner in value.items():
            evaluated = False
            if key in properties:
                evaluated = True
                found = self.validate(properties[key], inner, (*at, key))
                if found is not None:
                    errors.append(found)
            for pattern, sub in patterns.items():
                if re.search(pattern, key):
                    evaluated = True
                    found = self.validate(sub, inner, (*at, key))
                    if found is not None:
                        errors.append(found)
            if not evaluated and additional is not None:
                if additional is False:
                    extra.append(key)
                elif isinstance(additional, dict):
                    found = self.validate(additional, inner, (*at, key))
                    if found is not None:
                        errors.append(found)
        if extra:
            listed = ", ".join(_quote(k) for k in extra)
            errors.append(_Error(at, f"additional properties {listed} not allowed", []))
        return errors


def schema_failure(chart: str, values: Obj, schema: Obj) -> str | None:
    """Helm v4's error for values that fail a chart's schema, or None when they pass.

    jsonschema decides; the tree built beside it only words the answer."""
    validator = jsonschema.Draft202012Validator(schema)
    if validator.is_valid(values):
        return None
    tree = _Tree(schema).validate(schema, values, ())
    if tree is None:  # the two disagree: say what jsonschema found, never pass silently
        error = jsonschema.exceptions.best_match(validator.iter_errors(values))
        pointer = "".join(f"/{p}" for p in error.absolute_path)
        lines = [f"- at {_quote(pointer)}: {error.message}"]
    else:
        causes = tree.causes if tree.group else [tree]
        lines = [
            line for cause in sorted(causes, key=lambda c: c.location) for line in cause.lines(1)
        ]
    return (
        "values don't meet the specifications of the schema(s) in the following chart(s):\n"
        f"{chart}:\n" + "\n".join(lines)
    )


# -- the chart's own failures ----------------------------------------------------
def _has(values: Obj, path: tuple[str, ...]) -> bool:
    node: Any = values
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    return isinstance(node, dict) and path[-1] in node


def template_failure(values: Obj) -> str | None:
    """What the chart's templates `fail` with for these values (Helm prefixes
    `execution error at (<template>): `), or None."""
    for path in REMOVED_IN_0_36:
        if _has(values, path):
            key = ".".join(path)
            return (
                "execution error at (vcluster/templates/statefulset.yaml:2:4): "
                f"{key} was removed in 0.36.0 and is no longer supported. Please remove it "
                "from your values."
            )
    export = values.get("exportKubeConfig") or {}
    secret = export.get("secret") or {}
    additional = export.get("additionalSecrets") or []
    secret_set = bool(
        str(secret.get("name") or "").strip() or str(secret.get("namespace") or "").strip()
    )
    if secret_set and additional:
        return (
            "execution error at (vcluster/templates/statefulset.yaml:1:4): "
            "exportKubeConfig.secret and exportKubeConfig.additionalSecrets cannot be set at "
            "the same time"
        )
    for entry in additional:
        if not (str(entry.get("name") or "").strip() or str(entry.get("namespace") or "").strip()):
            return (
                "execution error at (vcluster/templates/statefulset.yaml:1:4): "
                f"additional secret must have name and/or namespace set, found: {json.dumps(entry, separators=(',', ':'))}"
            )
    return None


def release_name_failure(name: str) -> str | None:
    """Helm's own rule for release names (`pkg/chart/v2/util/validate_name.go`)."""
    if len(name) > 53 or not re.fullmatch(DNS1123_SUBDOMAIN, name):
        return f'release name "{name}": invalid release name, must match regex ' + (
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$ and the length "
            "must not be longer than 53"
        )
    return None


# -- what the chart renders -------------------------------------------------------
def _image(values: Obj, image: Obj, default_tag: str) -> str:
    registry = (values.get("controlPlane") or {}).get("advanced", {}).get("defaultImageRegistry")
    tag = image.get("tag") or default_tag
    repository = image.get("repository", "")
    if registry:
        return f"{registry}/{repository}:{tag}"
    if image.get("registry"):
        return f"{image['registry']}/{repository}:{tag}"
    return f"{repository}:{tag}"


def _enabled(flag: Any) -> bool:
    return str(flag).lower() == "true"


def kubernetes_version(values: Obj) -> str:
    """The API server version the vCluster runs (its `kubernetes` image's tag)."""
    k8s = ((values.get("controlPlane") or {}).get("distro") or {}).get("k8s") or {}
    return str(k8s.get("version") or (k8s.get("image") or {}).get("tag") or "v1.36.0")


def persistent(values: Obj) -> bool:
    claim = (
        ((values.get("controlPlane") or {}).get("statefulSet") or {}).get("persistence") or {}
    ).get("volumeClaim") or {}
    enabled = claim.get("enabled", "auto")
    return str(enabled).lower() != "false"  # "auto": the embedded database wants a volume


def render(values: Obj, release: str, namespace: str) -> list[Obj]:
    """The host objects the chart installs for these (coalesced) values."""
    control = values.get("controlPlane") or {}
    statefulset = control.get("statefulSet") or {}
    labels = {"app": "vcluster", "chart": CHART_LABEL, "release": release, "heritage": "Helm"}
    selector = {"app": "vcluster", "release": release}
    global_annotations = ((control.get("advanced") or {}).get("globalMetadata") or {}).get(
        "annotations"
    ) or {}

    def meta(name: str, extra_labels: Obj | None = None, annotations: Obj | None = None) -> Obj:
        found: Obj = {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, **(extra_labels or {})},
        }
        merged = {**global_annotations, **(annotations or {})}
        if merged:
            found["annotations"] = merged
        return found

    objects: list[Obj] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta(f"vc-config-{release}"),
            "type": "Opaque",
            "data": {"config.yaml": base64.b64encode(yaml.safe_dump(values).encode()).decode()},
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(f"vc-{release}")},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(f"vc-workload-{release}")},
    ]
    if ((values.get("rbac") or {}).get("role") or {}).get("enabled", True):
        objects += _role(meta, release)
    service = control.get("service") or {}
    if service.get("enabled", True):
        spec: Obj = {"type": "ClusterIP", **copy.deepcopy(service.get("spec") or {})}
        if "ports" not in spec:
            port: Obj = {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}
            if spec["type"] in ("NodePort", "LoadBalancer") and service.get("httpsNodePort"):
                port["nodePort"] = service["httpsNodePort"]
            spec["ports"] = [port]
        spec.setdefault("selector", dict(selector))
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta(release, service.get("labels"), service.get("annotations")),
                "spec": spec,
            }
        )
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(f"{release}-headless"),
            "spec": {
                "publishNotReadyAddresses": True,
                "clusterIP": "None",
                "ports": [{"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}],
                "selector": dict(selector),
            },
        }
    )
    objects.append(_control_plane(values, statefulset, meta, release, selector))
    objects += _policies(values, meta, release)
    ingress = control.get("ingress") or {}
    if ingress.get("enabled"):
        objects.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": meta(release, ingress.get("labels"), ingress.get("annotations")),
                "spec": {
                    **copy.deepcopy(ingress.get("spec") or {}),
                    "rules": [
                        {
                            "host": ingress.get("host"),
                            "http": {
                                "paths": [
                                    {
                                        "path": "/",
                                        "pathType": ingress.get(
                                            "pathType", "ImplementationSpecific"
                                        ),
                                        "backend": {
                                            "service": {"name": release, "port": {"name": "https"}}
                                        },
                                    }
                                ]
                            },
                        }
                    ],
                },
            }
        )
    return objects


def _role(meta: Callable[..., Obj], release: str) -> list[Obj]:
    rules = [
        {
            "apiGroups": [""],
            "resources": [
                "configmaps",
                "secrets",
                "services",
                "pods",
                "pods/attach",
                "pods/portforward",
                "pods/exec",
                "persistentvolumeclaims",
            ],
            "verbs": ["create", "delete", "patch", "update", "get", "list", "watch"],
        },
        {
            "apiGroups": [""],
            "resources": ["pods/status", "pods/ephemeralcontainers"],
            "verbs": ["patch", "update"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets", "replicasets", "deployments"],
            "verbs": ["get", "list", "watch", "patch", "update"],
        },
        {
            "apiGroups": [""],
            "resources": ["endpoints", "events", "pods/log"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(f"vc-{release}"),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(f"vc-{release}"),
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": f"vc-{release}",
                    "namespace": meta("x")["namespace"],
                }
            ],
            "roleRef": {
                "kind": "Role",
                "name": f"vc-{release}",
                "apiGroup": "rbac.authorization.k8s.io",
            },
        },
    ]


def _control_plane(
    values: Obj, statefulset: Obj, meta: Callable[..., Obj], release: str, selector: Obj
) -> Obj:
    distro = ((values.get("controlPlane") or {}).get("distro") or {}).get("k8s") or {}
    security = (statefulset.get("security") or {}).get("containerSecurityContext") or {}
    pods = statefulset.get("pods") or {}
    container: Obj = {
        "name": "syncer",
        "image": _image(values, statefulset.get("image") or {}, CHART_VERSION),
        "ports": [{"name": "https", "containerPort": 8443, "protocol": "TCP"}],
        "resources": copy.deepcopy(statefulset.get("resources") or {}),
    }
    if security:
        container["securityContext"] = copy.deepcopy(security)
    init: Obj = {
        "name": "kubernetes",
        "image": _image(values, distro.get("image") or {}, "v1.36.0"),
        "resources": copy.deepcopy(distro.get("resources") or {}),
    }
    spec: Obj = {
        "replicas": (statefulset.get("highAvailability") or {}).get("replicas", 1),
        "selector": {"matchLabels": dict(selector)},
        "template": {
            "metadata": {
                "labels": {**selector, **(pods.get("labels") or {})},
                # The chart's statefulset.yaml: `vClusterConfigHash: {{ .Values | toJson |
                # sha256sum }}`, so a release upgraded with new values restarts the control
                # plane, whose syncer then exports its kubeconfig anew.
                "annotations": {
                    **(pods.get("annotations") or {}),
                    "vClusterConfigHash": hashlib.sha256(
                        json.dumps(values, sort_keys=True).encode()
                    ).hexdigest(),
                },
            },
            "spec": {
                "serviceAccountName": f"vc-{release}",
                "terminationGracePeriodSeconds": 15,
                "initContainers": [init],
                "containers": [container],
            },
        },
    }
    kind = "StatefulSet" if persistent(values) else "Deployment"
    if kind == "StatefulSet":
        claim = ((statefulset.get("persistence") or {}).get("volumeClaim")) or {}
        spec["serviceName"] = f"{release}-headless"
        spec["podManagementPolicy"] = (statefulset.get("scheduling") or {}).get(
            "podManagementPolicy", "Parallel"
        )
        spec["persistentVolumeClaimRetentionPolicy"] = {
            "whenDeleted": claim.get("retentionPolicy", "Retain")
        }
        claim_spec: Obj = {
            "accessModes": list(claim.get("accessModes") or ["ReadWriteOnce"]),
            "resources": {"requests": {"storage": claim.get("size", "5Gi")}},
        }
        if claim.get("storageClass"):
            claim_spec["storageClassName"] = claim["storageClass"]
        spec["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": claim_spec}]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": meta(release, statefulset.get("labels"), statefulset.get("annotations")),
        "spec": spec,
    }


def _quoted(values: Obj | None) -> Obj:
    return {key: str(value) for key, value in (values or {}).items()}


def _policies(values: Obj, meta: Callable[..., Obj], release: str) -> list[Obj]:
    policies = values.get("policies") or {}
    quota, limits = policies.get("resourceQuota") or {}, policies.get("limitRange") or {}
    objects: list[Obj] = []
    if _enabled(quota.get("enabled")) or _enabled(limits.get("enabled")):
        if str(quota.get("enabled")).lower() != "false":
            spec: Obj = {}
            if quota.get("quota"):
                spec["hard"] = _quoted(quota["quota"])
            expressions = (quota.get("scopeSelector") or {}).get("matchExpressions")
            if expressions:
                spec["scopeSelector"] = {"matchExpressions": copy.deepcopy(expressions)}
            if quota.get("scopes"):
                spec["scopes"] = list(quota["scopes"])
            objects.append(
                {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": meta(
                        f"vc-{release}", quota.get("labels"), quota.get("annotations")
                    ),
                    "spec": spec,
                }
            )
        if str(limits.get("enabled")).lower() != "false":
            item: Obj = {
                "default": _quoted(limits.get("default")),
                "defaultRequest": _quoted(limits.get("defaultRequest")),
                "type": "Container",
            }
            for key in ("min", "max"):
                if limits.get(key):
                    item[key] = _quoted(limits[key])
            objects.append(
                {
                    "apiVersion": "v1",
                    "kind": "LimitRange",
                    "metadata": meta(
                        f"vc-{release}", limits.get("labels"), limits.get("annotations")
                    ),
                    "spec": {"limits": [item]},
                }
            )
    network = policies.get("networkPolicy") or {}
    if network.get("enabled"):
        objects += _network_policies(values, network, meta, release)
    return objects


def _network_policies(
    values: Obj, network: Obj, meta: Callable[..., Obj], release: str
) -> list[Obj]:
    managed = {"vcluster.loft.sh/managed-by": release}
    own = {"release": release}
    kube_dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    api_ports = [{"port": p, "protocol": "TCP"} for p in (443, 8443, 6443)]
    dns_ports = [{"port": 1053, "protocol": "UDP"}, {"port": 1053, "protocol": "TCP"}]
    workload = network.get("workload") or {}
    control = network.get("controlPlane") or {}

    def policy(name: str, pod_selector: Obj, egress: list[Obj], ingress: list[Obj]) -> Obj:
        found = meta(name, network.get("labels"), network.get("annotations"))
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": found,
            "spec": {
                "podSelector": {"matchLabels": pod_selector},
                "policyTypes": ["Egress", "Ingress"],
                "egress": egress,
                "ingress": ingress,
            },
        }

    objects: list[Obj] = []
    if not (values.get("privateNodes") or {}).get("enabled"):
        egress: list[Obj] = [
            {
                "ports": [*dns_ports, {"port": 8443, "protocol": "TCP"}],
                "to": [{"podSelector": {"matchLabels": own}}],
            },
            {"to": [{"podSelector": {"matchLabels": managed}}]},
        ]
        public = workload.get("publicEgress") or {}
        if public.get("enabled"):
            block: Obj = {"cidr": public.get("cidr", "0.0.0.0/0")}
            if public.get("except"):
                block["except"] = list(public["except"])
            egress.append({"to": [{"ipBlock": block}]})
        egress += copy.deepcopy(workload.get("egress") or [])
        ingress: list[Obj] = [
            {"from": [{"podSelector": {"matchLabels": own}}]},
            {"from": [{"podSelector": {"matchLabels": managed}}]},
            *copy.deepcopy(workload.get("ingress") or []),
        ]
        objects.append(policy(f"vc-work-{release}", managed, egress, ingress))
    loft = {"podSelector": {"matchLabels": {"app": "loft"}}, "namespaceSelector": {}}
    objects.append(
        policy(
            f"vc-cp-{release}",
            own,
            [
                {"to": [kube_dns]},
                {"ports": api_ports},
                {"to": [{"podSelector": {"matchLabels": own}}]},
                {"to": [{"podSelector": {"matchLabels": managed}}]},
                {"to": [loft]},
                *copy.deepcopy(control.get("egress") or []),
            ],
            [
                {"ports": [{"port": 8443, "protocol": "TCP"}]},
                {"from": [{"podSelector": {"matchLabels": own}}]},
                {
                    "ports": [*dns_ports, {"port": 8443, "protocol": "TCP"}],
                    "from": [{"podSelector": {"matchLabels": managed}}],
                },
                {"from": [{"podSelector": {"matchLabels": {"app": "vcluster-snapshot"}}}]},
                {"from": [loft]},
                *copy.deepcopy(control.get("ingress") or []),
            ],
        )
    )
    coredns = (values.get("controlPlane") or {}).get("coredns") or {}
    if (
        coredns.get("enabled", True)
        and not coredns.get("embedded")
        and not (values.get("privateNodes") or {}).get("enabled")
    ):
        objects.append(
            policy(
                f"vc-kube-dns-{release}",
                {"k8s-app": "vcluster-kube-dns", **managed},
                [
                    {"to": [kube_dns]},
                    {
                        "ports": [{"port": 8443, "protocol": "TCP"}],
                        "to": [{"podSelector": {"matchLabels": own}}],
                    },
                ],
                [
                    {
                        "ports": [
                            {"port": 1053, "protocol": "TCP"},
                            {"port": 1053, "protocol": "UDP"},
                        ],
                        "from": [{"podSelector": {"matchLabels": managed}}],
                    }
                ],
            )
        )
    objects.append(
        policy(
            f"vc-snapshot-{release}",
            {"app": "vcluster-snapshot"},
            [
                {"to": [{"podSelector": {"matchLabels": own}}]},
                {"to": [kube_dns]},
                {"ports": api_ports},
            ],
            [],
        )
    )
    return objects


# -- what the syncer writes ---------------------------------------------------------
@dataclass(frozen=True)
class ExportTarget:
    """One kubeconfig Secret the syncer keeps."""

    name: str
    namespace: str
    server: str
    context: str
    insecure: bool
    service_account: Obj


def export_targets(values: Obj, release: str, namespace: str) -> list[ExportTarget]:
    export = values.get("exportKubeConfig") or {}
    port = ((values.get("controlPlane") or {}).get("proxy") or {}).get("port", 8443)

    def target(entry: Obj, name: str, ns: str) -> ExportTarget:
        return ExportTarget(
            name=str(entry.get("name") or name),
            namespace=str(entry.get("namespace") or ns),
            server=str(entry.get("server") or f"https://localhost:{port}"),
            context=str(entry.get("context") or ""),
            insecure=bool(entry.get("insecure")),
            service_account=dict(entry.get("serviceAccount") or {}),
        )

    found = [target(export, f"vc-{release}", namespace)]
    secret = export.get("secret") or {}
    if str(secret.get("name") or "").strip() or str(secret.get("namespace") or "").strip():
        found.append(target({**export, **secret}, f"vc-{release}", namespace))
    found += [
        target(entry, f"vc-{release}", namespace) for entry in export.get("additionalSecrets") or []
    ]
    return found


def kubeconfig(
    target: ExportTarget, ca_pem: str, certificate_pem: str, key_pem: str, token: str
) -> str:
    name = target.context or DEFAULT_CONTEXT
    cluster: Obj = {"server": target.server}
    if target.insecure:
        cluster["insecure-skip-tls-verify"] = True
    else:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    user: Obj = (
        {"token": token}
        if token
        else {
            "client-certificate-data": base64.b64encode(certificate_pem.encode()).decode(),
            "client-key-data": base64.b64encode(key_pem.encode()).decode(),
        }
    )
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
            "users": [{"name": name, "user": user}],
            "preferences": {},
        },
        sort_keys=False,
    )
