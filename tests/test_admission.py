"""Strict quota at admission, end to end: the running server registers its webhook in each
vCluster the reconciler builds, the vCluster stand-in calls it over HTTPS through an
ingress (as a real API server calls a webhook), and tenants see refusals, with the numbers,
in kubernetes-asyncio and in the real kubectl. Concurrent creations never take a CloudSpace
over its quota, on one server or two replicas of one Postgres; a call that does not
authenticate as the vCluster changes nothing.

"Across vClusters" (two pods in two vClusters of one CloudSpace) is
tests/test_cloudspace_vclusters.py; here it is across namespaces of one vCluster."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import AppsV1Api, BatchV1Api, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from sim.host_standin import HostStandIn, VClusterApi
from sim.kube_quota import quantity_units
from sim.tenant_objects import cron_job, deployment, pod, pod_review
from tests.conftest import Org, stop_checked
from tests.support.cloudspaces import (
    Platform,
    download,
    eventually,
    key,
    ready_cloud_space,
    serve_platform,
)
from tests.support.kube_clients import kube_from, kubectl, message, refused
from tests.support.server import Backend, Server
from tests.support.tls_ingress import TlsIngress
from tests.test_vcluster_webhooks import kubectl_create

WEBHOOK = "quota.spacedock.dev"
ACROSS = "(counted across all namespaces of all its vClusters); free some, or raise the quota"


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("32", "128Gi"), ("32", "128Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def ingress() -> Iterator[TlsIngress]:
    running = TlsIngress()
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def platform(
    backend: Backend,
    host: HostStandIn,
    ingress: TlsIngress,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Platform]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    env = {
        "SPACEDOCK_ADMISSION_URL": ingress.url,
        "SPACEDOCK_ADMISSION_CA_FILE": str(ingress.ca_file),
    }
    serving = serve_platform(backend, host, log_path, env)
    running = next(serving)
    ingress.route_to(running.server.port)
    yield running
    next(serving, None)


@pytest.fixture
def second(
    platform: Platform, ingress: TlsIngress, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A second replica on the platform's database, the ingress alternating between both."""
    if platform.server.backend.name != "postgres":
        pytest.skip("replicas share a database on Postgres; SQLite serves one process")
    log_path = Path(tmp_path_factory.mktemp("replica")) / "server.log"
    running = Server(
        backend=platform.server.backend, log_path=log_path, env=dict(platform.server.env)
    ).start()
    ingress.route_to(platform.server.port, running.port)
    yield running
    ingress.route_to(platform.server.port)
    stop_checked(running)


@pytest.fixture
async def tenant(platform: Platform) -> Org:
    return await platform.tenant()


def vcluster_of(host: HostStandIn, cloud_space: dict[str, Any]) -> VClusterApi:
    return host.vcluster(f"cs-{key(cloud_space['id'])}", cloud_space["name"])


async def kubeconfig(platform: Platform, org: Org, cloud_space: dict[str, Any]) -> str:
    status, _, body = await asyncio.to_thread(
        download, platform.server, cloud_space["id"], cloud_space["name"], org.tokens["editor"]
    )
    assert status == 200, body
    return body


async def namespaces(client: Any, vcluster: VClusterApi, *names: str) -> None:
    """Made by the tenant; returns once the reconciler placed its headroom quota in each."""
    core: Any = CoreV1Api(client)
    for name in names:
        await core.create_namespace({"metadata": {"name": name}})

    async def placed() -> bool:
        return all(vcluster.find("resourcequotas", "spacedock-quota", n) for n in names)

    await eventually(placed)


def pods_cpu_m(vcluster: VClusterApi) -> int:
    """What the pods stored in the vCluster request, in millicores: the ground truth."""
    return sum(
        quantity_units("requests.cpu", container["resources"]["requests"]["cpu"])
        for stored in vcluster.find_all("pods")
        for container in stored["spec"]["containers"]
    )


async def test_a_pod_over_the_cloudspaces_quota_in_another_namespace_is_refused_with_the_numbers(
    platform: Platform, host: HostStandIn, ingress: TlsIngress, tenant: Org
) -> None:
    cloud_space = await ready_cloud_space(tenant, "strict", 4, 4096)
    vcluster = vcluster_of(host, cloud_space)
    registered = vcluster.find(
        "validatingwebhookconfigurations", "spacedock-quota", group="admissionregistration.k8s.io"
    )
    assert registered is not None
    (hook,) = registered["webhooks"]
    assert hook["name"] == WEBHOOK
    assert hook["clientConfig"]["url"].startswith(
        f"{ingress.url}/api/v1/admission/{cloud_space['id']}/strict/"
    )
    assert base64.b64decode(hook["clientConfig"]["caBundle"]).decode() == ingress.ca.pem
    assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
        "Ignore",
        "NoneOnDryRun",
        10,
    )
    config = await kubeconfig(platform, tenant, cloud_space)
    async with kube_from(config) as client:
        await namespaces(client, vcluster, "team-a", "team-b")
        core: Any = CoreV1Api(client)
        await core.create_namespaced_pod("team-a", pod("first", "2500m"))
        # At once, before any refresh: team-b's own headroom quota would still admit it.
        denied = await refused(core.create_namespaced_pod("team-b", pod("second", "2500m")))
    assert denied.status == 403
    assert message(denied) == (
        f'admission webhook "{WEBHOOK}" denied the request: pod "second" would take CloudSpace '
        '"strict" over its quota: requested requests.cpu=2500m, in use requests.cpu=2500m, '
        f"quota requests.cpu=4 {ACROSS} (updateCloudSpaceQuota)"
    )
    assert vcluster.find("pods", "second", "team-b") is None

    # A person with kubectl sees the same, in kubectl's words around it.
    sent = await asyncio.to_thread(kubectl_create, config, pod("third", "2", "team-b"))
    assert sent.returncode == 1
    assert 'Error from server (Forbidden): error when creating "' in sent.stderr
    assert (
        f'admission webhook "{WEBHOOK}" denied the request: pod "third" would take CloudSpace '
        '"strict" over its quota: requested requests.cpu=2, in use requests.cpu=2500m, quota '
        "requests.cpu=4"
    ) in sent.stderr
    # What fits is admitted, up to the quota exactly; the usage shows it.
    fits = await asyncio.to_thread(kubectl_create, config, pod("fits", "1500m", "team-b"))
    assert fits.returncode == 0, fits.stderr
    assert pods_cpu_m(vcluster) == 4000

    async def usage_seen() -> bool:
        data = await tenant.viewer.data(
            "query($id: ID!) { cloudSpace(id: $id) { usage { cpu } } }", {"id": cloud_space["id"]}
        )
        return bool(data["cloudSpace"]["usage"] == {"cpu": 4.0})

    await eventually(usage_seen)


async def test_workloads_whose_pods_cannot_fit_are_refused_at_creation_and_when_scaled(
    platform: Platform, host: HostStandIn, tenant: Org
) -> None:
    cloud_space = await ready_cloud_space(tenant, "workloads", 4, 4096)
    vcluster = vcluster_of(host, cloud_space)
    config = await kubeconfig(platform, tenant, cloud_space)
    async with kube_from(config) as client:
        core: Any = CoreV1Api(client)
        apps: Any = AppsV1Api(client)
        batch: Any = BatchV1Api(client)
        await core.create_namespaced_pod("default", pod("running", "1"))  # 1 core in use

        denied = await refused(
            apps.create_namespaced_deployment("default", deployment("web", 3, "2"))
        )
        assert denied.status == 403
        assert message(denied) == (
            f'admission webhook "{WEBHOOK}" denied the request: deployment "web" would take '
            'CloudSpace "workloads" over its quota: requested requests.cpu=6 (3 pods, each '
            f"cpu=2), in use requests.cpu=1, quota requests.cpu=4 {ACROSS} "
            "(updateCloudSpaceQuota)"
        )
        assert vcluster.find("deployments", "web", "default", group="apps") is None
        sent = await asyncio.to_thread(kubectl_create, config, deployment("web", 3, "2", "default"))
        assert sent.returncode == 1
        assert 'deployment "web" would take CloudSpace "workloads" over its quota' in sent.stderr

        # One that fits is admitted; scaling it past the quota is refused with what it adds.
        await apps.create_namespaced_deployment("default", deployment("small", 2, "1"))
        scale = {"spec": {"replicas": 6}}
        merge = "application/merge-patch+json"
        scaled = await refused(
            apps.patch_namespaced_deployment_scale("small", "default", scale, _content_type=merge)
        )
        assert message(scaled) == (
            f'admission webhook "{WEBHOOK}" denied the request: deployment "small" would take '
            'CloudSpace "workloads" over its quota: requested requests.cpu=4 (4 more pods, each '
            f"cpu=1), in use requests.cpu=1, quota requests.cpu=4 {ACROSS} "
            "(updateCloudSpaceQuota)"
        )
        stored = vcluster.find("deployments", "small", "default", group="apps")
        assert stored is not None and stored["spec"]["replicas"] == 2
        cli = await asyncio.to_thread(
            kubectl, config, "scale", "deployment/small", "--replicas=7", "-n", "default"
        )
        assert cli.returncode == 1 and "5 more pods, each cpu=1" in cli.stderr
        await apps.patch_namespaced_deployment_scale(
            "small", "default", {"spec": {"replicas": 3}}, _content_type=merge
        )
        # An update is counted by what it adds: 3 pods of 1 core becoming 3 of 3.
        bigger = deployment("small", 3, "3")
        grown = await refused(apps.replace_namespaced_deployment("small", "default", bigger))
        assert (
            "requested requests.cpu=6 (3 pods, each cpu=3) instead of requests.cpu=3, in use "
            "requests.cpu=1"
        ) in message(grown)

        # Pods that start later (a CronJob) are refused only when they could never fit.
        never = await refused(batch.create_namespaced_cron_job("default", cron_job("5")))
        assert message(never) == (
            f'admission webhook "{WEBHOOK}" denied the request: cronjob "nightly" can never fit '
            'in CloudSpace "workloads": requested requests.cpu=5 (1 pod, each cpu=5), in use '
            f"requests.cpu=1, quota requests.cpu=4 {ACROSS} (updateCloudSpaceQuota)"
        )
        await batch.create_namespaced_cron_job("default", cron_job("3"))  # 3 of 4 may fit later

        # A dry run is answered alike and holds nothing: twice 3 cores asked, 3 still free.
        for _ in range(2):
            asked = await core.create_namespaced_pod("default", pod("maybe", "3"), dry_run="All")
            assert asked.metadata.name == "maybe"
        assert vcluster.find("pods", "maybe", "default") is None
        await core.create_namespaced_pod("default", pod("last", "3"))
        full = await refused(core.create_namespaced_pod("default", pod("one-more", "100m")))
        assert "in use requests.cpu=4, quota requests.cpu=4" in message(full)


async def test_twenty_pods_at_once_never_take_the_cloudspace_over_its_quota(
    platform: Platform, host: HostStandIn, tenant: Org
) -> None:
    await burst(platform, host, tenant, "burst")


async def test_two_replicas_admitting_at_once_never_go_over_the_quota_together(
    platform: Platform, host: HostStandIn, tenant: Org, second: Server, ingress: TlsIngress
) -> None:
    before = {
        server.port: server.metric("spacedock_admission_allowed_total")
        + server.metric("spacedock_admission_denied_total")
        for server in (platform.server, second)
    }
    await burst(platform, host, tenant, "replicated")
    for server in (platform.server, second):
        answered = server.metric("spacedock_admission_allowed_total") + server.metric(
            "spacedock_admission_denied_total"
        )
        assert answered > before[server.port], "each replica answered some of the reviews"


async def burst(platform: Platform, host: HostStandIn, tenant: Org, name: str) -> None:
    """20 pods of 500m in two namespaces at once, into a 4-core CloudSpace: exactly 8 are
    admitted (each namespace's headroom quota alone would admit 8 there), the rest are
    refused by the webhook, and the pods stored request 4 cores exactly."""
    cloud_space = await ready_cloud_space(tenant, name, 4, 4096)
    vcluster = vcluster_of(host, cloud_space)
    config = await kubeconfig(platform, tenant, cloud_space)
    async with kube_from(config) as client:
        await namespaces(client, vcluster, "left", "right")
        core: Any = CoreV1Api(client)
        outcomes = await asyncio.gather(
            *(
                core.create_namespaced_pod(("left", "right")[i % 2], pod(f"p{i}", "500m"))
                for i in range(20)
            ),
            return_exceptions=True,
        )
    refusals = [o for o in outcomes if isinstance(o, BaseException)]
    calls = [call.outcome for call in vcluster.webhook_calls if call.webhook == WEBHOOK]
    assert all(call in ("allowed", "denied") for call in calls), f"calls failed: {calls}"
    late = []
    for refusal in refusals:
        assert isinstance(refusal, ApiException), refusal
        said = message(refusal)
        assert said.startswith(f'admission webhook "{WEBHOOK}" denied the request'), said
        if "could not check the CloudSpace's quota in time; try again" in said:
            late.append(refusal)  # a machine too busy: refused, never let through
        else:
            assert refusal.status == 403 and "requested requests.cpu=500m" in said, said
    admitted = len(outcomes) - len(refusals)
    assert pods_cpu_m(vcluster) == admitted * 500 <= 4000, "never over the quota"
    if not late:
        assert admitted == 8, "and every pod that fits is admitted"


def hook_url(vcluster: VClusterApi) -> str:
    registered = vcluster.find(
        "validatingwebhookconfigurations", "spacedock-quota", group="admissionregistration.k8s.io"
    )
    assert registered is not None
    return str(registered["webhooks"][0]["clientConfig"]["url"])


def post(ingress: TlsIngress, url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST to the webhook through the ingress, trusting its CA, as an API server would."""
    trust = ssl.create_default_context(cafile=str(ingress.ca_file))
    request = urllib.request.Request(
        url + "?timeout=5s", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=trust) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())


async def test_a_call_that_does_not_authenticate_as_the_vcluster_changes_nothing(
    platform: Platform, host: HostStandIn, ingress: TlsIngress, tenant: Org
) -> None:
    guarded = await ready_cloud_space(tenant, "guarded", 4, 4096)
    neighbour = await ready_cloud_space(await platform.tenant("neighbour"), "next-door", 4, 4096)
    mine, theirs = hook_url(vcluster_of(host, guarded)), hook_url(vcluster_of(host, neighbour))
    base, _, secret = mine.rpartition("/")
    assert len(secret) >= 40
    strangers = [
        f"{base}/{'x' * len(secret)}",  # a guess
        f"{base}/{theirs.rpartition('/')[2]}",  # another CloudSpace's secret
        f"{theirs.rpartition('/')[0]}/{secret}",  # this secret on another CloudSpace
        mine.replace(guarded["id"], "cs_0000000000000000000000000000"),  # no such CloudSpace
        mine.replace("/guarded/", "/other/"),  # no such vCluster
    ]
    before = platform.server.metric("spacedock_admission_unauthenticated_total")
    for url in strangers:
        review = pod_review("greedy", "4")
        status, answer = await asyncio.to_thread(post, ingress, url, json.dumps(review).encode())
        assert status == 200
        response = answer["response"]
        assert response["uid"] == review["request"]["uid"] and response["allowed"] is False
        assert response["status"]["code"] == 403
        assert "not the one spacedock registered for this vCluster" in response["status"]["message"]
    after = platform.server.metric("spacedock_admission_unauthenticated_total")
    assert after - before == len(strangers)
    # What is no AdmissionReview is refused, even at the right address.
    for body in (b"not json", b'{"kind": "Pod"}', b'{"apiVersion": "admission.k8s.io/v1"}'):
        status, answer = await asyncio.to_thread(post, ingress, mine, body)
        assert status == 400 and answer["errors"][0]["extensions"]["code"] == "BAD_REQUEST"

    # Nothing was held: all 4 cores are still free, asked (dry run) at the right address,
    # and a real pod of 4 cores is admitted.
    status, answer = await asyncio.to_thread(
        post, ingress, mine, json.dumps(pod_review("probe", "4", dry_run=True)).encode()
    )
    assert (status, answer["response"]["allowed"]) == (200, True)
    config = await kubeconfig(platform, tenant, guarded)
    async with kube_from(config) as client:
        core: Any = CoreV1Api(client)
        await core.create_namespaced_pod("default", pod("whole", "4"))
    # The secret is never logged (the access log shows the path up to it).
    assert secret not in platform.server.log()
    assert f"/api/v1/admission/{guarded['id']}/guarded/…" in platform.server.log()
