"""Flux v2.9.4's CRDs and install manifests, built for the stand-ins.

* `flux_crds()`: the CustomResourceDefinitions of the kinds the stand-ins serve
  (GitRepository, HelmRepository, OCIRepository, HelmChart of source-controller
  v1.9.4; HelmRelease of helm-controller v1.6.3; Kustomization of
  kustomize-controller v1.9.4), each with its served version's schema from
  `upstream/flux/`, as a host running Flux has them.
* `flux_install()`: what `oci://ghcr.io/fluxcd/flux-manifests:v2.9.4` holds as
  `gotk-components.yaml` (`flux install --export` with the extra components, per
  fluxcd/flux2's release workflow): Namespace `flux-system` (PSA warn restricted),
  those CRDs, a ServiceAccount per controller, the `crd-controller-`,
  `cluster-reconciler-`, `flux-edit-` and `flux-view-flux-system` RBAC, ResourceQuota
  `critical-pods-flux-system`, NetworkPolicies `allow-egress`, `allow-scraping`,
  `allow-webhooks`, Services `source-controller`, `notification-controller`,
  `webhook-receiver`, `source-watcher`, and the seven controllers' Deployments with
  the pinned images (`<registry>/<name>:<version>`) and their resources. Every object
  carries `app.kubernetes.io/part-of: flux`, `instance: flux-system` and
  `version: v2.9.4`.

Not included: the CRDs of notification-, image-reflector-, image-automation-controller
and source-watcher, and Bucket/ExternalArtifact (the stand-ins do not serve those
kinds); the Deployments' probes and volumes.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

FLUX_VERSION = "v2.9.4"
NAMESPACE = "flux-system"
UPSTREAM = Path(__file__).parent / "upstream" / "flux"
CRD_FILES = (
    "source.toolkit.fluxcd.io_gitrepositories.json",
    "source.toolkit.fluxcd.io_helmrepositories.json",
    "source.toolkit.fluxcd.io_ocirepositories.json",
    "source.toolkit.fluxcd.io_helmcharts.json",
    "helm.toolkit.fluxcd.io_helmreleases.json",
    "kustomize.toolkit.fluxcd.io_kustomizations.json",
)
# manifests/bases/*/kustomization.yaml @ v2.9.4; resources from each config/manager.
CONTROLLERS: dict[str, tuple[str, str]] = {
    "source-controller": ("v1.9.4", "50m"),
    "kustomize-controller": ("v1.9.4", "100m"),
    "helm-controller": ("v1.6.3", "100m"),
    "notification-controller": ("v1.9.3", "100m"),
    "image-reflector-controller": ("v1.2.4", "100m"),
    "image-automation-controller": ("v1.2.4", "100m"),
    "source-watcher": ("v2.2.3", "50m"),
}
FLUX_GROUPS = ["source.toolkit.fluxcd.io", "kustomize.toolkit.fluxcd.io", "helm.toolkit.fluxcd.io"]
CRITICAL = ("source-controller", "kustomize-controller", "helm-controller", "source-watcher")
# Which controller reconciles which kind: a cluster runs a kind only where its
# controller's Deployment is available.
CONTROLLER_OF = {
    "GitRepository": "source-controller",
    "HelmRepository": "source-controller",
    "OCIRepository": "source-controller",
    "HelmChart": "source-controller",
    "HelmRelease": "helm-controller",
    "Kustomization": "kustomize-controller",
}


def labels() -> dict[str, str]:
    return {
        "app.kubernetes.io/instance": NAMESPACE,
        "app.kubernetes.io/part-of": "flux",
        "app.kubernetes.io/version": FLUX_VERSION,
    }


@functools.cache
def _crd_files() -> tuple[Obj, ...]:
    return tuple(json.loads((UPSTREAM / name).read_text()) for name in CRD_FILES)


def flux_crds() -> list[Obj]:
    crds = []
    for found in _crd_files():
        group, names = found["group"], found["names"]
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {
                    "name": f"{names['plural']}.{group}",
                    "labels": {
                        **labels(),
                        "app.kubernetes.io/component": CONTROLLER_OF[names["kind"]],
                    },
                },
                "spec": {
                    "group": group,
                    "names": copy.deepcopy(names),
                    "scope": found["scope"],
                    "versions": [
                        {
                            "name": found["version"],
                            "served": True,
                            "storage": True,
                            "subresources": copy.deepcopy(found["subresources"]),
                            "schema": {"openAPIV3Schema": copy.deepcopy(found["openAPIV3Schema"])},
                        }
                    ],
                },
            }
        )
    return crds


def served_kinds() -> list[tuple[str, str, str]]:
    """(group, version, kind) of every Flux kind the stand-ins serve."""
    return [(f["group"], f["version"], f["names"]["kind"]) for f in _crd_files()]


def _deployment(name: str, version: str, cpu: str, registry: str) -> Obj:
    args = ["--events-addr=http://notification-controller.flux-system.svc.cluster.local./"]
    args += [
        "--watch-all-namespaces",
        "--log-level=info",
        "--log-encoding=json",
        "--enable-leader-election",
    ]
    spec: Obj = {
        "serviceAccountName": name,
        "terminationGracePeriodSeconds": 10,
        "securityContext": {"fsGroup": 1337},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "containers": [
            {
                "name": "manager",
                "image": f"{registry}/{name}:{version}",
                "imagePullPolicy": "IfNotPresent",
                "args": args,
                "env": [
                    {
                        "name": "RUNTIME_NAMESPACE",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                    },
                    {
                        "name": "GOMEMLIMIT",
                        "valueFrom": {
                            "resourceFieldRef": {
                                "containerName": "manager",
                                "resource": "limits.memory",
                            }
                        },
                    },
                ],
                "ports": [
                    {"containerPort": 8080, "name": "http-prom", "protocol": "TCP"},
                    {"containerPort": 9440, "name": "healthz", "protocol": "TCP"},
                ],
                "resources": {
                    "limits": {"cpu": "1000m", "memory": "1Gi"},
                    "requests": {"cpu": cpu, "memory": "64Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ],
    }
    if name in CRITICAL:
        spec["priorityClassName"] = "system-cluster-critical"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                **labels(),
                "app.kubernetes.io/component": name,
                "control-plane": "controller",
            },
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            **({"strategy": {"type": "Recreate"}} if name == "source-controller" else {}),
            "template": {
                "metadata": {
                    "labels": {**labels(), "app": name},
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
                },
                "spec": spec,
            },
        },
    }


def controller_deployments(
    registry: str = "ghcr.io/fluxcd", names: tuple[str, ...] = tuple(CONTROLLERS)
) -> list[Obj]:
    return [_deployment(name, *CONTROLLERS[name], registry) for name in names]


def flux_install(registry: str = "ghcr.io/fluxcd") -> list[Obj]:
    """gotk-components.yaml of Flux v2.9.4, in its order (namespace and CRDs first)."""
    common = labels()

    def meta(name: str, namespaced: bool = True, component: str = "") -> Obj:
        found: Obj = {"name": name, "labels": dict(common)}
        if component:
            found["labels"]["app.kubernetes.io/component"] = component
        if namespaced:
            found["namespace"] = NAMESPACE
        return found

    objects: list[Obj] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": NAMESPACE,
                "labels": {
                    **common,
                    "pod-security.kubernetes.io/warn": "restricted",
                    "pod-security.kubernetes.io/warn-version": "latest",
                },
            },
        },
        *flux_crds(),
    ]
    objects += [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, component=name)}
        for name in CONTROLLERS
    ]
    objects += [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta("crd-controller-flux-system", namespaced=False),
            "rules": [
                {
                    "apiGroups": list(FLUX_GROUPS),
                    "resources": ["*"],
                    "verbs": ["*"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["namespaces", "secrets", "configmaps", "serviceaccounts"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta("crd-controller-flux-system", namespaced=False),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "crd-controller-flux-system",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}
                for name in CONTROLLERS
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta("cluster-reconciler-flux-system", namespaced=False),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "kustomize-controller", "namespace": NAMESPACE},
                {"kind": "ServiceAccount", "name": "helm-controller", "namespace": NAMESPACE},
            ],
        },
        *[
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": meta(f"flux-{verb}-flux-system", namespaced=False),
                "rules": [
                    {
                        "apiGroups": list(FLUX_GROUPS),
                        "resources": ["*"],
                        "verbs": verbs,
                    }
                ],
            }
            for verb, verbs in (
                ("edit", ["create", "delete", "deletecollection", "patch", "update"]),
                ("view", ["get", "list", "watch"]),
            )
        ],
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": meta("critical-pods-flux-system"),
            "spec": {
                "hard": {"pods": "1000"},
                "scopeSelector": {
                    "matchExpressions": [
                        {
                            "operator": "In",
                            "scopeName": "PriorityClass",
                            "values": ["system-node-critical", "system-cluster-critical"],
                        }
                    ]
                },
            },
        },
    ]
    for name, selector, port in (
        ("source-controller", "source-controller", "http"),
        ("notification-controller", "notification-controller", "http"),
        ("webhook-receiver", "notification-controller", "http-webhook"),
        ("source-watcher", "source-watcher", "http"),
    ):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    **meta(name, component=selector),
                    "labels": {
                        **meta(name, component=selector)["labels"],
                        "control-plane": "controller",
                    },
                },
                "spec": {
                    "type": "ClusterIP",
                    "selector": {"app": selector},
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": port}],
                },
            }
        )
    objects += controller_deployments(registry)
    objects += [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta("allow-egress"),
            "spec": {
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [{}],
                "podSelector": {},
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta("allow-scraping"),
            "spec": {
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"namespaceSelector": {}}],
                        "ports": [{"port": 8080, "protocol": "TCP"}],
                    }
                ],
                "podSelector": {},
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta("allow-webhooks"),
            "spec": {
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"namespaceSelector": {}}]}],
                "podSelector": {"matchLabels": {"app": "notification-controller"}},
            },
        },
    ]
    return objects
