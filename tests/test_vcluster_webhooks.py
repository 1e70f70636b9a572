"""The vCluster stand-in as a real API server on what issue 22 relies on: it calls the
validating webhooks registered in it (AdmissionReview v1 over HTTPS, caBundle, timeout,
failurePolicy), refuses names and fields a real server refuses, and admits pods against
quotas, driven through kubernetes-asyncio and kubectl as the product and its users do."""

from __future__ import annotations

import base64
import copy
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import (
    AdmissionregistrationV1Api,
    ApiClient,
    AppsV1Api,
    CoreV1Api,
)

from sim.host_standin import HostStandIn, VClusterApi
from sim.kube_admission import AdmissionWebhookStandIn
from sim.pki import CertificateAuthority
from tests.support.kube_clients import APPLY, kube_from, kubectl, message, refused, status_of

NS = "cs-hooks"
WEBHOOK = "quota.spacedock.dev"


@pytest.fixture(scope="module")
def standin() -> Iterator[HostStandIn]:
    """A host whose vCluster `demo` came from the chart through Flux."""
    with HostStandIn(ready_delay_s=0.02) as host:
        host.flux.serve_vcluster_chart("https://charts.loft.sh")
        url = host.vcluster_url(NS, "demo")
        host.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        host.api.put(
            {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "HelmRepository",
                "metadata": {"name": "loft", "namespace": NS},
                "spec": {"url": "https://charts.loft.sh", "interval": "1h"},
            }
        )
        host.api.put(
            {
                "apiVersion": "helm.toolkit.fluxcd.io/v2",
                "kind": "HelmRelease",
                "metadata": {"name": "demo", "namespace": NS},
                "spec": {
                    "interval": "10m",
                    "chart": {
                        "spec": {
                            "chart": "vcluster",
                            "version": "0.36.1",
                            "sourceRef": {"kind": "HelmRepository", "name": "loft"},
                        }
                    },
                    "values": {"exportKubeConfig": {"server": url}},
                },
            }
        )
        host.flux.wait_ready("HelmRelease", NS, "demo")
        yield host


@pytest.fixture(scope="module")
def webhook_server() -> Iterator[AdmissionWebhookStandIn]:
    with AdmissionWebhookStandIn() as server:
        yield server


@pytest.fixture
def webhook(
    webhook_server: AdmissionWebhookStandIn, standin: HostStandIn
) -> Iterator[AdmissionWebhookStandIn]:
    yield webhook_server
    webhook_server.heal()
    vcluster = standin.vcluster(NS, "demo")
    group = "admissionregistration.k8s.io"
    for config in vcluster.find_all("validatingwebhookconfigurations", group=group):
        vcluster.remove("validatingwebhookconfigurations", config["metadata"]["name"], group=group)


@pytest.fixture
def vcluster(standin: HostStandIn) -> VClusterApi:
    return standin.vcluster(NS, "demo")


def admin_config(host: HostStandIn) -> str:
    secret = host.api.find("secrets", "vc-demo", NS)
    assert secret is not None
    return base64.b64decode(secret["data"]["config"]).decode()


@asynccontextmanager
async def inside(host: HostStandIn) -> AsyncIterator[ApiClient]:
    async with kube_from(admin_config(host)) as client:
        yield client


def configuration(
    url: str,
    ca_bundle: str,
    *,
    policy: str = "Fail",
    timeout: int = 5,
    resources: tuple[str, ...] = ("deployments", "deployments/scale"),
) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "spacedock-quota"},
        "webhooks": [
            {
                "name": WEBHOOK,
                "clientConfig": {"url": url, "caBundle": ca_bundle},
                "rules": [
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    },
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "resources": list(resources),
                    },
                ],
                "failurePolicy": policy,
                "sideEffects": "None",
                "timeoutSeconds": timeout,
                "admissionReviewVersions": ["v1"],
            }
        ],
    }


async def register(client: ApiClient, config: dict[str, Any]) -> None:
    api: Any = AdmissionregistrationV1Api(client)
    await api.patch_validating_webhook_configuration(config["metadata"]["name"], config, **APPLY)


def deployment(name: str, replicas: int = 3, cpu: str = "2") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
                    ]
                },
            },
        },
    }


def pod(name: str, cpu: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                }
            ]
        },
    }


# -- webhooks -------------------------------------------------------------------
async def test_a_webhook_gets_a_well_formed_review_and_its_refusal_reaches_the_client(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn, vcluster: VClusterApi
) -> None:
    async with inside(standin) as client:
        await register(client, configuration(webhook.url("/admission/s3cret"), webhook.ca_bundle))
        webhook.deny(
            "CloudSpace quota exceeded: requested cpu 6, in use 0, quota 4",
            code=403,
            reason="Forbidden",
        )
        apps: Any = AppsV1Api(client)
        denied = await refused(apps.create_namespaced_deployment("default", deployment("web")))
        assert denied.status == 403
        assert message(denied) == (
            f'admission webhook "{WEBHOOK}" denied the request: CloudSpace quota exceeded: '
            "requested cpu 6, in use 0, quota 4"
        )
        assert status_of(denied)["status"] == "Failure"
        assert vcluster.find("deployments", "web", "default", group="apps") is None

        (review,) = webhook.wait_for_reviews(1)
        request = review["request"]
        assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        assert uuid.UUID(request["uid"])
        assert request["kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
        assert request["resource"] == {"group": "apps", "version": "v1", "resource": "deployments"}
        assert "subResource" not in request
        assert (request["operation"], request["namespace"], request["name"]) == (
            "CREATE",
            "default",
            "web",
        )
        assert request["userInfo"]["username"] == "admin"
        assert "system:masters" in request["userInfo"]["groups"]
        assert request["object"]["spec"]["replicas"] == 3
        assert request["object"]["spec"]["template"]["spec"]["containers"][0]["resources"] == {
            "requests": {"cpu": "2"}
        }
        assert request["oldObject"] is None and request["dryRun"] is False
        assert request["options"]["kind"] == "CreateOptions"
        assert review["_path"] == "/admission/s3cret" and review["_query"] == {"timeout": "5s"}

        # A person with kubectl sees the same refusal.
        sent = kubectl_create(admin_config(standin), deployment("cli"))
        assert 'Error from server (Forbidden): error when creating "' in sent.stderr
        assert f'admission webhook "{WEBHOOK}" denied the request: CloudSpace quota' in sent.stderr

        # Allowed, then scaled: the scale subresource is its own rule, with a Scale in it.
        webhook.allow()
        await apps.create_namespaced_deployment("default", deployment("web"))
        webhook.deny("CloudSpace quota exceeded: requested cpu 10, in use 6, quota 4", code=403)
        scaled = await refused(
            apps.patch_namespaced_deployment_scale(
                "web",
                "default",
                {"spec": {"replicas": 5}},
                _content_type="application/merge-patch+json",
            )
        )
        assert "requested cpu 10" in message(scaled)
        stored = vcluster.find("deployments", "web", "default", group="apps")
        assert stored is not None and stored["spec"]["replicas"] == 3
        scale = webhook.reviews[-1]["request"]
        assert scale["subResource"] == "scale" and scale["operation"] == "UPDATE"
        assert scale["kind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}
        assert scale["resource"]["resource"] == "deployments"
        assert (scale["object"]["spec"]["replicas"], scale["oldObject"]["spec"]["replicas"]) == (
            5,
            3,
        )

        # What no rule names is never sent.
        before = len(webhook.reviews)
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
        core: Any = CoreV1Api(client)
        await core.create_namespaced_config_map("default", config_map)
        assert len(webhook.reviews) == before


def kubectl_create(config: str, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as directory:
        manifest = Path(directory, "obj.yaml")
        manifest.write_text(yaml.safe_dump(obj))
        return kubectl(config, "create", "-f", str(manifest))


async def test_a_scale_rule_is_needed_to_see_scale_requests(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn
) -> None:
    async with inside(standin) as client:
        await register(
            client,
            configuration(webhook.url(), webhook.ca_bundle, resources=("deployments",)),
        )
        apps: Any = AppsV1Api(client)
        await apps.create_namespaced_deployment("default", deployment("unscaled"))
        webhook.deny("no")
        await apps.patch_namespaced_deployment_scale(
            "unscaled",
            "default",
            {"spec": {"replicas": 4}},
            _content_type="application/merge-patch+json",
        )
        read = await apps.read_namespaced_deployment_scale("unscaled", "default")
    assert read.spec.replicas == 4
    assert [r["request"].get("subResource") for r in webhook.reviews] == [None]


async def test_failure_policy_fail_refuses_and_ignore_admits_when_the_webhook_is_down(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn, vcluster: VClusterApi
) -> None:
    url = webhook.url("/admission/down")
    webhook.refuse()
    async with inside(standin) as client:
        await register(client, configuration(url, webhook.ca_bundle))
        core: Any = CoreV1Api(client)
        closed = await refused(core.create_namespaced_pod("default", pod("p-closed", "100m")))
        assert closed.status == 500
        assert message(closed) == (
            f'Internal error occurred: failed calling webhook "{WEBHOOK}": failed to call webhook: '
            f'Post "{url}?timeout=5s": dial tcp 127.0.0.1:{webhook.port}: connect: connection refused'
        )
        assert status_of(closed)["reason"] == "InternalError"
        assert vcluster.find("pods", "p-closed", "default") is None

        await register(client, configuration(url, webhook.ca_bundle, policy="Ignore"))
        await core.create_namespaced_pod("default", pod("p-open", "100m"))
    assert vcluster.find("pods", "p-open", "default") is not None
    assert webhook.reviews == []


async def test_a_webhook_slower_than_its_timeout_is_a_failed_call(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn
) -> None:
    webhook.hold()
    url = webhook.url()
    async with inside(standin) as client:
        await register(client, configuration(url, webhook.ca_bundle, timeout=1))
        core: Any = CoreV1Api(client)
        slow = await refused(core.create_namespaced_pod("default", pod("slow", "100m")))
    webhook.release()
    assert slow.status == 500
    assert message(slow).endswith(f'Post "{url}?timeout=1s": context deadline exceeded')
    assert webhook.reviews[0]["_query"] == {"timeout": "1s"}


async def test_the_webhooks_certificate_is_checked_against_its_ca_bundle(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn
) -> None:
    other = base64.b64encode(CertificateAuthority("someone-else").pem.encode()).decode()
    async with inside(standin) as client:
        await register(client, configuration(webhook.url(), other))
        core: Any = CoreV1Api(client)
        untrusted = await refused(core.create_namespaced_pod("default", pod("untrusted", "100m")))
    assert "x509: certificate signed by unknown authority" in message(untrusted)
    assert webhook.reviews == []


async def test_a_webhook_off_loopback_is_never_contacted(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn, vcluster: VClusterApi
) -> None:
    async with inside(standin) as client:
        await register(client, configuration("https://10.99.0.1/admission", webhook.ca_bundle))
        core: Any = CoreV1Api(client)
        far = await refused(core.create_namespaced_pod("default", pod("far", "100m")))
    assert far.status == 500
    assert "the stand-in calls webhooks on 127.0.0.0/8 only" in message(far)
    assert vcluster.webhook_calls[-1].outcome == "not contacted: not loopback"


async def test_a_malformed_answer_is_a_failed_call_and_a_dry_run_stores_nothing(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn, vcluster: VClusterApi
) -> None:
    webhook.answer(
        lambda review: {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "not-the-uid", "allowed": True},
        }
    )
    async with inside(standin) as client:
        await register(client, configuration(webhook.url(), webhook.ca_bundle))
        core: Any = CoreV1Api(client)
        wrong = await refused(core.create_namespaced_pod("default", pod("wrong", "100m")))
        assert 'received invalid webhook response: expected response.uid="' in message(wrong)
        webhook.allow()
        await core.create_namespaced_pod("default", pod("dry", "100m"), dry_run="All")
    assert webhook.reviews[-1]["request"]["dryRun"] is True
    assert vcluster.find("pods", "dry", "default") is None


async def test_webhook_configurations_follow_the_api_servers_rules(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn
) -> None:
    async with inside(standin) as client:
        plain = configuration("http://127.0.0.1:1/x", webhook.ca_bundle)
        refusal = await refused(register(client, plain))
        assert refusal.status == 422
        assert message(refusal).endswith(
            'webhooks[0].clientConfig.url: Invalid value: "http://127.0.0.1:1/x": '
            "'https' is the only allowed URL scheme"
        )
        unsaid = configuration(webhook.url(), webhook.ca_bundle)
        del unsaid["webhooks"][0]["sideEffects"]
        assert "webhooks[0].sideEffects: Required value" in message(
            await refused(register(client, unsaid))
        )
        short = configuration(webhook.url(), webhook.ca_bundle)
        short["webhooks"][0]["name"] = "quota"
        assert "should be a domain with at least three segments" in message(
            await refused(register(client, short))
        )
        query = configuration(webhook.url() + "?token=x", webhook.ca_bundle)
        assert "query parameters are not permitted" in message(
            await refused(register(client, query))
        )


# -- what the API server refuses itself ------------------------------------------------
async def test_the_vcluster_refuses_names_and_fields_a_real_server_refuses(
    standin: HostStandIn, vcluster: VClusterApi
) -> None:
    async with inside(standin) as client:
        core: Any = CoreV1Api(client)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "1abc"},
            "spec": {"ports": [{"port": 80}]},
        }
        digit = await refused(core.create_namespaced_service("default", service))
        assert digit.status == 422
        assert message(digit) == (
            'Service "1abc" is invalid: metadata.name: Invalid value: "1abc": a DNS-1035 label '
            "must consist of lower case alphanumeric characters or '-', start with an alphabetic "
            "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
            "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
        assert status_of(digit)["details"]["causes"][0]["field"] == "metadata.name"
        labelled = copy.deepcopy(service)
        labelled["metadata"] = {"name": "abc", "labels": {"team": "x" * 64}}
        assert "metadata.labels: Invalid value" in message(
            await refused(core.create_namespaced_service("default", labelled))
        )
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Team_A"}}
        assert "a lowercase RFC 1123 label" in message(
            await refused(core.create_namespace(namespace))
        )

        # A field Kubernetes does not know: apply fails, Strict refuses, the default drops it.
        typo = deployment("typo", replicas=1)
        typo["spec"]["replica"] = 2
        apps: Any = AppsV1Api(client)
        applied = await refused(apps.patch_namespaced_deployment("typo", "default", typo, **APPLY))
        assert applied.status == 500
        assert message(applied) == (
            "failed to create typed patch object (default/typo; apps/v1, Kind=Deployment): "
            ".spec.replica: field not declared in schema"
        )
        strict = await refused(
            apps.create_namespaced_deployment("default", typo, field_validation="Strict")
        )
        assert strict.status == 400
        assert 'strict decoding error: unknown field "spec.replica"' in message(strict)
        await apps.create_namespaced_deployment("default", typo)
        stored = vcluster.find("deployments", "typo", "default", group="apps")
        assert stored is not None and "replica" not in stored["spec"]
        missing = deployment("noselector")
        del missing["spec"]["selector"]
        assert "spec.selector: Required value" in message(
            await refused(apps.create_namespaced_deployment("default", missing))
        )


async def test_pods_with_requests_are_admitted_against_quota_after_the_webhooks(
    standin: HostStandIn, webhook: AdmissionWebhookStandIn, vcluster: VClusterApi
) -> None:
    async with inside(standin) as client:
        core: Any = CoreV1Api(client)
        await core.create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-q"}}
        )
        quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "spacedock-quota"},
            "spec": {"hard": {"requests.cpu": "4", "requests.memory": "1Gi"}},
        }
        await core.create_namespaced_resource_quota("team-q", quota)
        await register(client, configuration(webhook.url(), webhook.ca_bundle))
        await core.create_namespaced_pod("team-q", pod("first", "2500m", "team-q"))
        second = await refused(
            core.create_namespaced_pod("team-q", pod("second", "2500m", "team-q"))
        )
    assert second.status == 403
    assert message(second) == (
        'pods "second" is forbidden: exceeded quota: spacedock-quota, requested: '
        "requests.cpu=2500m, used: requests.cpu=2500m, limited: requests.cpu=4"
    )
    # The webhook saw both (it runs before ResourceQuota admission) and allowed both.
    assert [r["request"]["name"] for r in webhook.reviews] == ["first", "second"]
    used = vcluster.find("resourcequotas", "spacedock-quota", "team-q")
    assert used is not None and used["status"]["used"]["requests.cpu"] == "2500m"
