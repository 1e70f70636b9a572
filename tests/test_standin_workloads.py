"""What the Kubernetes stand-ins grew for the App Advisor, driven through kubernetes-asyncio
and kubectl as the advisor and its users drive a real API server: lists in chunks
(`limit`/`continue`), strategic merge patches merged by each list's merge key, status
written through the `status` subresource and checked against the kind's schema (status
included), the kinds the advisor reads (Jobs, CronJobs, HPAs, EndpointSlices), and
metrics.k8s.io, read only and only once metrics-server is there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, AppsV1Api, CoreV1Api

from sim import workloads as w
from sim.host_standin import HostStandIn
from tests.support.kube_clients import kube, kubeconfig_of, kubectl, message, refused


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(ready_delay_s=0.02) as standin:
        yield standin


async def call(
    client: ApiClient,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> Any:
    response = await client.call_api(
        path,
        method,
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    return json.loads(await response.read())


async def test_a_list_comes_in_chunks_with_a_continue_token(host: HostStandIn) -> None:
    async with kube(host.url, host.ca_pem, token=host.token) as client:
        core: Any = CoreV1Api(client)  # plain dict bodies, as clients send them
        for index in range(7):
            await core.create_namespaced_config_map(
                "default", {"metadata": {"name": f"chunk-{index}"}}
            )
        first = await core.list_namespaced_config_map("default", limit=3)
        assert len(first.items) == 3 and first.metadata._continue
        assert first.metadata.remaining_item_count >= 4
        names = [c.metadata.name for c in first.items]
        token = first.metadata._continue
        while token:
            page = await core.list_namespaced_config_map("default", limit=3, _continue=token)
            names += [c.metadata.name for c in page.items]
            token = page.metadata._continue
        assert [n for n in names if n.startswith("chunk-")] == [f"chunk-{i}" for i in range(7)]
        assert len(names) == len(set(names))  # every item once
        filtered = await core.list_namespaced_config_map(
            "default", limit=2, label_selector="team=none"
        )
        assert filtered.items == [] and filtered.metadata.remaining_item_count is None
        error = await refused(
            core.list_namespaced_config_map("default", limit=2, _continue="not-a-token")
        )
        assert error.status == 400 and message(error).startswith("continue key is not valid")


async def test_a_strategic_merge_patch_merges_containers_by_name_as_kubectl_sends_it(
    host: HostStandIn,
) -> None:
    deployment = w.deployment(
        "default", "merged", [w.container("web"), w.container("sidecar", port=9090)]
    )
    async with kube(host.url, host.ca_pem, token=host.token) as client:
        apps: Any = AppsV1Api(client)
        await apps.create_namespaced_deployment("default", deployment)
        patch = {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "web", "resources": {"limits": {"memory": "1Gi"}}},
                            {
                                "name": "sidecar",
                                "ports": [{"containerPort": 9090, "hostPort": None}],
                                "$patch": "delete",
                            },
                        ]
                    }
                }
            }
        }
        config = yaml.safe_dump(kubeconfig_of(host.url, host.ca_pem, token=host.token))
        patched = kubectl(
            config,
            "patch",
            "deployment",
            "merged",
            "-n",
            "default",
            "-p",
            json.dumps(patch),
            "-o",
            "json",
        )
        assert patched.returncode == 0, patched.stderr
        (web,) = json.loads(patched.stdout)["spec"]["template"]["spec"]["containers"]
        assert (
            web["name"] == "web"
            and web["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        )
        assert web["resources"]["limits"] == {"cpu": "500m", "memory": "1Gi"}
        repository = {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "unmergeable", "namespace": "default"},
            "spec": {"url": "https://git.example.com/x.git", "interval": "1m"},
        }
        path = "/apis/source.toolkit.fluxcd.io/v1/namespaces/default/gitrepositories"
        await call(client, "POST", path, repository)
        custom = await call(
            client,
            "PATCH",
            f"{path}/unmergeable",
            {"spec": {"interval": "5m"}},
            "application/strategic-merge-patch+json",
        )
        assert custom["code"] == 415  # custom resources have no merge strategies
        assert "application/merge-patch+json" in custom["message"]


async def test_status_is_written_as_a_kubelet_writes_it_and_checked_against_the_schema(
    host: HostStandIn,
) -> None:
    async with kube(host.url, host.ca_pem, token=host.token) as client:
        pod = await call(
            client,
            "POST",
            "/api/v1/namespaces/default/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "kubelet-made"},
                "spec": {"containers": [w.container("web")]},
            },
        )
        status = w.crash_looping(pod, "web", "OOMKilled", 137)
        path = "/api/v1/namespaces/default/pods/kubelet-made/status"
        written = await call(
            client,
            "PATCH",
            path,
            {"status": status, "spec": {"nodeName": "ignored"}},
            "application/strategic-merge-patch+json",
        )
        (state,) = written["status"]["containerStatuses"]
        assert state["lastState"]["terminated"]["reason"] == "OOMKilled"
        assert "nodeName" not in written["spec"]  # the status subresource changes status only
        broken = {
            "containerStatuses": [
                {"name": "web", "ready": "yes", "restartCount": 0, "image": "x", "imageID": ""}
            ]
        }
        answer = await call(
            client, "PATCH", path, {"status": broken}, "application/strategic-merge-patch+json"
        )
        assert answer["code"] == 422 and "containerStatuses[0].ready" in answer["message"]
        missing = {"containerStatuses": [{"name": "web", "ready": True}]}
        answer = await call(
            client, "PATCH", path, {"status": missing}, "application/merge-patch+json"
        )
        assert answer["code"] == 422 and "restartCount" in answer["message"]


async def test_the_kinds_the_advisor_reads_are_served_and_metrics_only_once_installed(
    host: HostStandIn,
) -> None:
    async with kube(host.url, host.ca_pem, token=host.token) as client:
        for path in (
            "/apis/batch/v1/jobs",
            "/apis/batch/v1/cronjobs",
            "/apis/autoscaling/v2/horizontalpodautoscalers",
            "/apis/discovery.k8s.io/v1/endpointslices",
        ):
            assert (await call(client, "GET", path))["items"] == []
        absent = await call(client, "GET", "/apis/metrics.k8s.io/v1beta1/pods")
        assert absent["code"] == 404
        host.api.serve_metrics()
        host.api.set_pod_metrics("default", "kubelet-made", {"web": ("12m", "40Mi")})
        listed = await call(client, "GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")
        (metrics,) = [m for m in listed["items"] if m["metadata"]["name"] == "kubelet-made"]
        assert metrics["containers"] == [{"name": "web", "usage": {"cpu": "12m", "memory": "40Mi"}}]
        write = await call(
            client, "POST", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods", metrics
        )
        assert write["code"] == 405
        groups = await call(client, "GET", "/apis")
        assert "metrics.k8s.io" in {g["name"] for g in groups["groups"]}
