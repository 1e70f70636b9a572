"""The Flux objects spacedock writes for an app, and where they live.

Per app, in its namespace of the target: the namespace itself, a Secret with the Git
credential when there is one, the source (`GitRepository` or `HelmRepository`,
`source.toolkit.fluxcd.io/v1`) and what applies it (`Kustomization`,
`kustomize.toolkit.fluxcd.io/v1`, or `HelmRelease`, `helm.toolkit.fluxcd.io/v2`), all named
like the app. They are the API versions Flux has served since v2.3 and still serves in
v2.9.4. Every object carries `app.kubernetes.io/managed-by: spacedock`, the app's id
(`spacedock.dev/app`, which the status loop lists by) and the revision it was written
for (`spacedock.dev/revision`, which tells a resumed delivery what is already there).
Nothing here calls a cluster.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.apps.sources import GitSource, HelmSource, Source

Obj = dict[str, Any]

SOURCE_API = "source.toolkit.fluxcd.io/v1"
KUSTOMIZE_API = "kustomize.toolkit.fluxcd.io/v1"
HELM_API = "helm.toolkit.fluxcd.io/v2"
APP_LABEL = "spacedock.dev/app"
REVISION_ANNOTATION = "spacedock.dev/revision"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"
MANAGED_BY = {"app.kubernetes.io/managed-by": "spacedock"}
API_OF = {
    "GitRepository": SOURCE_API,
    "HelmRepository": SOURCE_API,
    "HelmChart": SOURCE_API,
    "Kustomization": KUSTOMIZE_API,
    "HelmRelease": HELM_API,
}
# How long Flux waits for what it applied to become ready before it says it failed.
APPLY_TIMEOUT = "5m"


@dataclass(frozen=True)
class Placement:
    """Where an app's objects go in its target cluster."""

    app_id: str
    name: str
    namespace: str


@dataclass(frozen=True)
class Ref:
    """One object's API version, kind, namespace and name."""

    api_version: str
    kind: str
    namespace: str | None
    name: str


def source_kind(source: Source) -> str:
    return "GitRepository" if isinstance(source, GitSource) else "HelmRepository"


def deploy_kind(source: Source) -> str:
    return "Kustomization" if isinstance(source, GitSource) else "HelmRelease"


def secret_name(placement: Placement) -> str:
    return f"{placement.name}-git-auth"


def deploy_ref(placement: Placement, kind: str) -> Ref:
    api = KUSTOMIZE_API if kind == "Kustomization" else HELM_API
    return Ref(api, kind, placement.namespace, placement.name)


def source_ref(placement: Placement, kind: str) -> Ref:
    return Ref(SOURCE_API, kind, placement.namespace, placement.name)


def removal_order(placement: Placement, source_kind_name: str) -> list[Ref]:
    """What deleteApp removes, in order: the Kustomization or HelmRelease first (Flux
    prunes what it applied, or uninstalls the release, as it goes), then the source, then
    the credential's Secret. The namespace stays: it may hold more than this app."""
    deploy = "Kustomization" if source_kind_name == "GitRepository" else "HelmRelease"
    return [
        deploy_ref(placement, deploy),
        source_ref(placement, source_kind_name),
        Ref("v1", "Secret", placement.namespace, secret_name(placement)),
    ]


def _metadata(placement: Placement, name: str, revision: int, sync_at: datetime | None) -> Obj:
    annotations = {REVISION_ANNOTATION: str(revision)}
    if sync_at is not None:
        annotations[REQUESTED_AT] = sync_at.isoformat()
    return {
        "name": name,
        "namespace": placement.namespace,
        "labels": {**MANAGED_BY, APP_LABEL: placement.app_id},
        "annotations": annotations,
    }


def objects(
    placement: Placement,
    source: Source,
    revision: int,
    *,
    credential: Mapping[str, str] | None,
    suspended: bool,
    sync_at: datetime | None,
) -> list[Obj]:
    """Every object of one revision, in the order they are applied."""
    meta = _metadata(placement, placement.name, revision, sync_at)
    found: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": placement.namespace}}
    ]
    if isinstance(source, GitSource):
        if credential is not None:
            found.append(_secret(placement, revision, credential))
        found += [
            _git_repository(meta, placement, source, credential is not None),
            _kustomization(meta, placement, source, suspended),
        ]
    else:
        found += [_helm_repository(meta, source), _helm_release(meta, placement, source, suspended)]
    return found


def _secret(placement: Placement, revision: int, data: Mapping[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(placement, secret_name(placement), revision, None),
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def _git_repository(meta: Obj, placement: Placement, source: GitSource, private: bool) -> Obj:
    spec: Obj = {"interval": source.interval, "url": source.url, "ref": source.ref}
    if private:
        spec["secretRef"] = {"name": secret_name(placement)}
    return {"apiVersion": SOURCE_API, "kind": "GitRepository", "metadata": meta, "spec": spec}


def _kustomization(meta: Obj, placement: Placement, source: GitSource, suspended: bool) -> Obj:
    return {
        "apiVersion": KUSTOMIZE_API,
        "kind": "Kustomization",
        "metadata": meta,
        "spec": {
            "interval": source.interval,
            "sourceRef": {"kind": "GitRepository", "name": placement.name},
            "path": source.path,
            "prune": True,
            # Ready only once what it applied is ready: the app's status means it runs.
            "wait": True,
            "timeout": APPLY_TIMEOUT,
            "targetNamespace": placement.namespace,
            "suspend": suspended,
        },
    }


def _helm_repository(meta: Obj, source: HelmSource) -> Obj:
    spec: Obj = {"interval": source.interval, "url": source.repository_url}
    if source.oci:
        spec["type"] = "oci"
    return {"apiVersion": SOURCE_API, "kind": "HelmRepository", "metadata": meta, "spec": spec}


def _helm_release(meta: Obj, placement: Placement, source: HelmSource, suspended: bool) -> Obj:
    spec: Obj = {
        "interval": source.interval,
        "chart": {
            "spec": {
                "chart": source.chart,
                "version": source.version,
                "sourceRef": {"kind": "HelmRepository", "name": placement.name},
            }
        },
        "timeout": APPLY_TIMEOUT,
        "suspend": suspended,
    }
    values = source.values_object()
    if values:
        spec["values"] = values
    return {"apiVersion": HELM_API, "kind": "HelmRelease", "metadata": meta, "spec": spec}


def revision_of(obj: Mapping[str, Any] | None) -> int | None:
    """The app revision an object was last written for; None for none or a foreign one."""
    if obj is None:
        return None
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
    try:
        return int(text) if isinstance(text, str) else None
    except ValueError:
        return None


def generation_of(obj: Mapping[str, Any] | None) -> int | None:
    found = (obj or {}).get("metadata", {}).get("generation")
    return found if isinstance(found, int) else None
