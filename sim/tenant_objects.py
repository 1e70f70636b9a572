"""What tenants write into a vCluster, as kubectl and kubernetes-asyncio send it, and the
AdmissionReview an API server makes of a pod: the strict-quota tests' objects."""

from __future__ import annotations

import uuid
from typing import Any

from sim.kube_admission import Attributes, UserInfo


def pod(name: str, cpu: str, namespace: str | None = None, memory: str = "64Mi") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    requests = {"cpu": cpu, "memory": memory}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [{"name": "app", "image": "nginx", "resources": {"requests": requests}}]
        },
    }


def template(cpu: str, **spec: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
            ],
            **spec,
        },
    }


def cron_job(cpu: str) -> dict[str, Any]:
    """CronJob `nightly`: one pod of `cpu` a night."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": template(cpu, restartPolicy="Never")}},
        },
    }


def deployment(name: str, replicas: int, cpu: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": template(cpu),
        },
    }


def pod_review(name: str, cpu: str, *, dry_run: bool = False) -> dict[str, Any]:
    """An AdmissionReview of a pod's creation, as the API server sends it."""
    created = pod(name, cpu, "default")
    attributes = Attributes(
        operation="CREATE",
        group="",
        version="v1",
        resource="pods",
        subresource="",
        kind=("", "v1", "Pod"),
        namespaced=True,
        namespace="default",
        name=name,
        obj=created,
        old=None,
        user=UserInfo("admin", groups=("system:masters", "system:authenticated")),
        dry_run=dry_run,
    )
    return attributes.review(str(uuid.uuid4()))
