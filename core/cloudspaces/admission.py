"""Strict quota at admission (README "Strict quota at admission"): the validating webhook
spacedock registers in each vCluster of a CloudSpace, how its calls are authenticated,
and the observations that keep its numbers true.

Each vCluster calls `SPACEDOCK_ADMISSION_URL` + `/api/v1/admission/<CloudSpace id>/
<vCluster>/<secret>`: an API server sends no credential of its own to a webhook, so the
URL carries a secret made for that vCluster alone, sealed at rest, known here by its
SHA-256 and compared in constant time. A call without the right secret is refused and
changes nothing. The decisions are in core.cloudspaces.admission_review.

Each refresh (the reconciler's hook `keep`) applies the configuration and lists the
vCluster's pods: what they request becomes that vCluster's observed usage, and the
reservations of the pods the list saw end, in one transaction on the CloudSpace's row.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar
from urllib.parse import quote

from core.cloudspaces.admission_review import (
    Call,
    MalformedReview,
    Review,
    Serial,
    Verdict,
    decide,
    review_of,
)
from core.cloudspaces.pod_requests import Need, counts, pod_need
from core.cloudspaces.settings import MANAGED_BY, CloudSpaceSettings
from core.cloudspaces.tenant import Used
from core.common.metrics import Sample
from core.common.services import Services, utcnow
from db import admission as rows
from db.admission_tables import AdmissionKey
from db.engine import UniqueViolation
from providers import host as host_api

ROUTE = "/api/v1/admission"
CONFIGURATION_NAME = "spacedock-quota"
WEBHOOK_NAME = "quota.spacedock.dev"
# The API server waits this long for an answer before its failurePolicy applies (its
# default; spacedock answers in milliseconds, and refuses past 80% of it).
TIMEOUT_S = 10
# Ignore: when spacedock cannot answer, the vCluster admits, and the headroom quotas in
# every namespace and the quota on the host hold the line (README: why not Fail).
FAILURE_POLICY = "Ignore"
# A pod admitted this long before a pod list began and missing from it was refused later
# in the API server (validating webhooks run at once, each within at most 30 s) or is gone.
UNSEEN_GRACE = timedelta(seconds=45)

APPS = ["deployments", "statefulsets", "replicasets", "daemonsets"]
SCALABLE = ["deployments/scale", "statefulsets/scale", "replicasets/scale"]
RULES = [
    {
        "operations": ["CREATE"],
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": ["pods"],
        "scope": "Namespaced",
    },
    {
        "operations": ["CREATE", "UPDATE"],
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "resources": APPS + SCALABLE,
        "scope": "Namespaced",
    },
    {
        "operations": ["CREATE", "UPDATE"],
        "apiGroups": ["batch"],
        "apiVersions": ["v1"],
        "resources": ["jobs", "cronjobs"],
        "scope": "Namespaced",
    },
]


def webhook_path(cloud_space_id: str, vcluster: str, secret: str) -> str:
    return f"{ROUTE}/{quote(cloud_space_id, safe='')}/{quote(vcluster, safe='')}/{secret}"


def webhook_manifest(url: str, ca_pem: str | None) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration that sends a vCluster's pod and workload writes
    to `url`, trusting `ca_pem` (None: the system roots).

    sideEffects NoneOnDryRun: a real write leaves a reservation in spacedock's database, a
    dry run only asks."""
    client: dict[str, Any] = {"url": url}
    if ca_pem:
        client["caBundle"] = base64.b64encode(ca_pem.encode()).decode()
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME, "labels": dict(MANAGED_BY)},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": client,
                "rules": RULES,
                "failurePolicy": FAILURE_POLICY,
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": TIMEOUT_S,
            }
        ],
    }


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def _key(services: Services, cloud_space_id: str, vcluster: str) -> AdmissionKey:
    """The vCluster's webhook key, made on first use (by one process, whichever wins)."""
    async with services.read() as session:
        found = await rows.key(session, cloud_space_id, vcluster)
    if found is not None:
        return found
    secret = secrets.token_urlsafe(32)
    made = AdmissionKey(
        cloud_space_id=cloud_space_id,
        vcluster=vcluster,
        secret_sealed=services.secrets.seal({"secret": secret}),
        secret_sha256=_digest(secret),
        observed_cpu_m=0,
        observed_memory_bytes=0,
    )
    try:
        async with services.unit() as unit:
            await rows.add_key(unit.session, made)
    except UniqueViolation:  # another replica made it first: theirs is the one
        async with services.read() as session:
            found = await rows.key(session, cloud_space_id, vcluster)
        assert found is not None
        return found
    return made


async def _secret(services: Services, key: AdmissionKey) -> str:
    """The key's secret. One sealed with a key this server no longer has (a changed
    SPACEDOCK_SECRET_KEY, a restored database) is replaced by a new one, compare-and-swap,
    so replicas that do this at once agree on one; the configuration applied next carries
    it, and calls with the old one are refused until then."""
    try:
        return str(services.secrets.open(key.secret_sealed)["secret"])
    except RuntimeError:
        fresh = secrets.token_urlsafe(32)
    async with services.unit() as unit:
        swapped = await rows.replace_secret(
            unit.session,
            key,
            sealed=services.secrets.seal({"secret": fresh}),
            sha256=_digest(fresh),
        )
    if swapped:
        return fresh
    async with services.read() as session:
        now = await rows.key(session, key.cloud_space_id, key.vcluster)
    # Another replica replaced it first (under the key both hold); gone: being deleted.
    return fresh if now is None else str(services.secrets.open(now.secret_sealed)["secret"])


def _manifest(settings: CloudSpaceSettings, key: AdmissionKey, secret: str) -> dict[str, Any]:
    assert settings.admission_url is not None
    path = webhook_path(key.cloud_space_id, key.vcluster, secret)
    return webhook_manifest(settings.admission_url + path, settings.admission_ca_pem)


async def webhook_configuration(
    services: Services, cloud_space_id: str, vcluster: str
) -> dict[str, Any] | None:
    """The configuration to apply in the vCluster; None without SPACEDOCK_ADMISSION_URL."""
    if services.cloudspaces.admission_url is None:
        return None
    key = await _key(services, cloud_space_id, vcluster)
    return _manifest(services.cloudspaces, key, await _secret(services, key))


def observed_usage(pods: list[dict[str, Any]]) -> tuple[Need, set[tuple[str, str]]]:
    """What the listed pods that have not ended request, and every listed pod's namespace
    and name. A pod whose requests cannot be read counts nothing (the API server
    validated it; such a pod is no pod it would have stored)."""
    total = Need()
    seen: set[tuple[str, str]] = set()
    for pod in pods:
        metadata = pod.get("metadata") or {}
        seen.add((str(metadata.get("namespace", "")), str(metadata.get("name", ""))))
        if counts(pod):
            try:
                total += pod_need(pod.get("spec"))
            except ValueError:
                continue
    return total, seen


async def keep(services: Services, cloud_space_id: str, vcluster: str, kube: host_api.Kube) -> Used:
    """The reconciler's hook, on a connection to the vCluster: applies (or, without an
    address, removes) the webhook configuration, observes the pods, and answers what the
    CloudSpace's pods request in all its vClusters."""
    key = await _key(services, cloud_space_id, vcluster)
    if services.cloudspaces.admission_url is None:
        await kube.delete(
            host_api.path_of(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                None,
                CONFIGURATION_NAME,
            )
        )
    else:
        await kube.apply(_manifest(services.cloudspaces, key, await _secret(services, key)))
    listed_at = utcnow()
    usage, seen = observed_usage(await kube.items("/api/v1/pods"))
    async with services.unit() as unit:
        await rows.standing(unit.session, cloud_space_id, lock=True)
        await rows.observe(
            unit.session,
            cloud_space_id,
            vcluster,
            (usage.cpu_m, usage.memory_bytes),
            listed_at,
            seen,
            listed_at - UNSEEN_GRACE,
        )
        cpu_m, memory_bytes = await rows.observed(unit.session, cloud_space_id)
    return Used(cpu_m / 1000, memory_bytes / 2**20)


@dataclass
class AdmissionStats:
    """/metrics: what the webhook answered."""

    allowed: int = 0
    denied: int = 0
    unauthenticated: int = 0
    malformed: int = 0
    late: int = 0

    HELP: ClassVar[dict[str, str]] = {
        "allowed": "Admission reviews the quota webhook allowed.",
        "denied": "Admission reviews the quota webhook refused: over a CloudSpace's quota.",
        "unauthenticated": "Admission calls refused: not a CloudSpace's vCluster (wrong secret).",
        "malformed": "Admission calls refused: the body was no AdmissionReview v1.",
        "late": "Admission reviews refused because the quota could not be checked in time.",
    }

    def samples(self) -> list[Sample]:
        return [
            Sample(f"spacedock_admission_{name}_total", "counter", text, getattr(self, name))
            for name, text in self.HELP.items()
        ]


@dataclass
class Admissions:
    """The webhook's state in this process: its counts, and its queue per CloudSpace."""

    stats: AdmissionStats = field(default_factory=AdmissionStats)
    serial: Serial = field(default_factory=Serial)


UNAUTHENTICATED = Verdict(
    False,
    "spacedock does not know this webhook's address: it is not the one spacedock registered "
    "for this vCluster (spacedock registers it again within SPACEDOCK_RECONCILE_INTERVAL_S)",
    403,
    "Forbidden",
)


# Reachable but too slow (a database under load): refused, not let through unchecked;
# the pod's controller (or the person) tries again.
TOO_LATE = Verdict(
    False,
    "spacedock could not check the CloudSpace's quota in time; try again",
    503,
    "ServiceUnavailable",
)


async def authenticated(
    services: Services, cloud_space_id: str, vcluster: str, secret: str
) -> bool:
    async with services.read() as session:
        key = await rows.key(session, cloud_space_id, vcluster)
    expected = key.secret_sha256 if key is not None else _digest(secrets.token_urlsafe(32))
    return hmac.compare_digest(_digest(secret), expected) and key is not None


def review(admissions: Admissions, document: object) -> Review:
    """The review in a body; MalformedReview (counted) when it holds none."""
    try:
        return review_of(document)
    except MalformedReview:
        admissions.stats.malformed += 1
        raise


async def answer(
    services: Services,
    admissions: Admissions,
    cloud_space_id: str,
    vcluster: str,
    secret: str,
    asked: Review,
    deadline_s: float,
) -> Verdict:
    """The verdict on `asked`, within `deadline_s` (TOO_LATE past it). A call that does not
    authenticate as that vCluster is refused before anything is read or written."""
    stats = admissions.stats
    try:
        async with asyncio.timeout(deadline_s):
            if not await authenticated(services, cloud_space_id, vcluster, secret):
                stats.unauthenticated += 1
                return UNAUTHENTICATED
            verdict = await decide(
                Call(services, admissions.serial, cloud_space_id, vcluster, asked)
            )
    except TimeoutError:
        stats.late += 1
        return TOO_LATE
    if verdict.allowed:
        stats.allowed += 1
    else:
        stats.denied += 1
    return verdict
