"""What the strict-quota webhook decides for one AdmissionReview (admission.k8s.io/v1)
from a CloudSpace's vCluster (README "Strict quota at admission").

A pod is admitted when what it requests, added to what the CloudSpace's pods use across
every namespace of every vCluster (as last observed, plus pods admitted since), stays
within the quota; it is then held as a reservation until an observation sees it, in the
same transaction that locked the CloudSpace's row, so concurrent admissions on any replica
never both take the last room. A workload (Deployment, StatefulSet, ReplicaSet, DaemonSet,
Job, CronJob, and `scale`) is refused when the pods it asks for (replicas times one pod's
requests; on an update or a scale, only what it adds) would not fit now, or, for pods that
start later (a CronJob, a suspended Job), when they could never fit the quota at all.
Refusals give the numbers: requested, in use, quota. A dry run decides the same and
holds nothing.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from core.cloudspaces.pod_requests import (
    WORKLOADS,
    Need,
    controlled,
    pod_need,
    texts,
    workload_of,
)
from core.common.services import Services
from db import admission as rows
from db.admission_tables import QuotaReservation, WorkloadShape

REVIEW_VERSION = "admission.k8s.io/v1"
ACROSS = "counted across all namespaces of all its vClusters"


class MalformedReview(ValueError):
    """The body is not an AdmissionReview v1 request; the message says what is wrong."""


@dataclass(frozen=True)
class Review:
    uid: str
    operation: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    obj: Mapping[str, Any]
    old: Mapping[str, Any] | None
    dry_run: bool


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""
    code: int = 200
    reason: str = ""
    warnings: tuple[str, ...] = ()


ALLOWED = Verdict(True)


def _text(request: Mapping[str, Any], key: str) -> str:
    value = request.get(key, "")
    if not isinstance(value, str):
        raise MalformedReview(f"request.{key} must be a string")
    return value


def review_of(document: object) -> Review:
    """The request of an AdmissionReview v1; MalformedReview otherwise."""
    if not isinstance(document, Mapping) or (
        document.get("apiVersion"),
        document.get("kind"),
    ) != (REVIEW_VERSION, "AdmissionReview"):
        raise MalformedReview(f"the body must be an {REVIEW_VERSION} AdmissionReview")
    request = document.get("request")
    if not isinstance(request, Mapping):
        raise MalformedReview("the AdmissionReview has no request")
    resource = request.get("resource")
    if not isinstance(resource, Mapping):
        raise MalformedReview("request.resource must be an object")
    uid = _text(request, "uid")
    if not uid:
        raise MalformedReview("request.uid is required")
    obj, old = request.get("object"), request.get("oldObject")
    if obj is not None and not isinstance(obj, Mapping):
        raise MalformedReview("request.object must be an object")
    if old is not None and not isinstance(old, Mapping):
        raise MalformedReview("request.oldObject must be an object")
    return Review(
        uid=uid,
        operation=_text(request, "operation"),
        group=_text(resource, "group"),
        resource=_text(resource, "resource"),
        subresource=_text(request, "subResource"),
        namespace=_text(request, "namespace"),
        name=_text(request, "name"),
        obj=obj or {},
        old=old,
        dry_run=request.get("dryRun") is True,
    )


def response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answer the API server expects for `uid`."""
    answer: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        answer["status"] = {
            "code": verdict.code,
            "reason": verdict.reason,
            "message": verdict.message,
        }
    if verdict.warnings:
        answer["warnings"] = list(verdict.warnings)
    return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": answer}


def _over(used: Need, more: Need, quota: Need) -> tuple[str, ...]:
    """The quota keys that `more` on top of `used` would exceed."""
    return tuple(
        key
        for (key, adding), (_, using), (_, limit) in zip(
            more.items(), used.items(), quota.items(), strict=True
        )
        if adding > 0 and using + adding > limit
    )


def _refused(
    what: str,
    cloud_space: str,
    over: tuple[str, ...],
    asked: Need,
    detail: str,
    used: Need,
    quota: Need,
    *,
    never: bool = False,
) -> Verdict:
    verdict = (
        f'can never fit in CloudSpace "{cloud_space}"'
        if never
        else f'would take CloudSpace "{cloud_space}" over its quota'
    )
    message = (
        f"{what} {verdict}: requested {texts(asked, over)}{detail}, in use {texts(used, over)}, "
        f"quota {texts(quota, over)} ({ACROSS}); free some, or raise the quota "
        "(updateCloudSpaceQuota)"
    )
    return Verdict(False, message, 403, "Forbidden")


class Serial:
    """Admissions of one CloudSpace one at a time in this process, so they queue here
    instead of in the database's lock (where SQLite's writers would poll for it);
    replicas still serialize on the CloudSpace's row."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: Counter[str] = Counter()

    @asynccontextmanager
    async def one(self, cloud_space_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(cloud_space_id, asyncio.Lock())
        self._waiting[cloud_space_id] += 1
        try:
            async with lock:
                yield
        finally:
            self._waiting[cloud_space_id] -= 1
            if not self._waiting[cloud_space_id]:
                del self._waiting[cloud_space_id], self._locks[cloud_space_id]


@dataclass(frozen=True)
class Call:
    """An authenticated review from `vcluster` of the CloudSpace."""

    services: Services
    serial: Serial
    cloud_space_id: str
    vcluster: str
    review: Review

    @property
    def resource(self) -> str:
        return f"{self.review.resource}.{self.review.group}"


async def decide(call: Call) -> Verdict:
    review = call.review
    if (review.group, review.resource, review.subresource) == ("", "pods", ""):
        return await _pod(call)
    kind = WORKLOADS.get((review.group, review.resource))
    if kind is None or review.operation not in ("CREATE", "UPDATE"):
        return ALLOWED
    if review.subresource == "scale":
        return await _scale(call, kind)
    if review.subresource:
        return ALLOWED
    return await _workload(call, kind)


async def _pod(call: Call) -> Verdict:
    review = call.review
    need = pod_need(review.obj.get("spec"))
    if review.operation != "CREATE" or need.nothing:
        return ALLOWED
    async with call.serial.one(call.cloud_space_id), call.services.unit() as unit:
        found = await rows.standing(unit.session, call.cloud_space_id, lock=True)
        if found is None:
            return ALLOWED  # gone meanwhile: nothing left to count against
        used, limit = Need(*found.in_use), Need(*found.quota)
        if over := _over(used, need, limit):
            return _refused(f'pod "{review.name}"', found.name, over, need, "", used, limit)
        if not review.dry_run:
            await rows.reserve(
                unit.session,
                QuotaReservation(
                    cloud_space_id=call.cloud_space_id,
                    vcluster=call.vcluster,
                    namespace=review.namespace,
                    name=review.name,
                    cpu_m=need.cpu_m,
                    memory_bytes=need.memory_bytes,
                    made_at=unit.now,
                ),
            )
    return ALLOWED


def _pods(count: int, per_pod: Need, keys: tuple[str, ...], more: bool = False) -> str:
    each = texts(per_pod, keys).replace("requests.", "")
    return f" ({count} {'more ' if more else ''}pod{'' if count == 1 else 's'}, each {each})"


async def _workload(call: Call, kind: str) -> Verdict:
    review = call.review
    if controlled(review.obj):
        return ALLOWED
    new = workload_of(review.group, review.resource, review.obj)
    before = (
        workload_of(review.group, review.resource, review.old)
        if review.operation == "UPDATE" and review.old is not None
        else None
    )
    async with call.services.read() as session:
        found = await rows.standing(session, call.cloud_space_id)
    if found is None:
        return ALLOWED
    used, limit = Need(*found.in_use), Need(*found.quota)
    what = f'{kind} "{review.name}"'
    if new.later:  # its pods start later: only the whole quota bounds them now
        if over := _over(Need(), new.need, limit):
            detail = _pods(new.pods, new.per_pod, over)
            return _refused(what, found.name, over, new.need, detail, used, limit, never=True)
    else:
        already = Need() if before is None or before.later else before.need
        more = new.need - already
        if over := _over(used, more, limit):
            detail = _pods(new.pods, new.per_pod, over)
            if before is not None and not before.later:
                detail += f" instead of {texts(already, over)}"
            return _refused(what, found.name, over, more, detail, used, limit)
    if not review.dry_run:
        async with call.services.unit() as unit:
            await rows.keep_shape(
                unit.session,
                WorkloadShape(
                    cloud_space_id=call.cloud_space_id,
                    vcluster=call.vcluster,
                    resource=call.resource,
                    namespace=review.namespace,
                    name=review.name,
                    cpu_m=new.per_pod.cpu_m,
                    memory_bytes=new.per_pod.memory_bytes,
                ),
            )
    return ALLOWED


def _replicas(scale: Mapping[str, Any] | None) -> int:
    value = ((scale or {}).get("spec") or {}).get("replicas", 0)
    return value if isinstance(value, int) and value > 0 else 0


async def _scale(call: Call, kind: str) -> Verdict:
    review = call.review
    added = _replicas(review.obj) - _replicas(review.old)
    if added <= 0:
        return ALLOWED
    async with call.services.read() as session:
        found = await rows.standing(session, call.cloud_space_id)
        shape = await rows.shape(
            session,
            call.cloud_space_id,
            call.vcluster,
            call.resource,
            review.namespace,
            review.name,
        )
    if found is None:
        return ALLOWED
    if shape is None:
        return Verdict(
            True,
            warnings=(
                f'spacedock has not seen the pod template of {kind} "{review.name}" (made '
                "before its quota webhook); its new pods are checked one by one as they are made",
            ),
        )
    per_pod = Need(shape.cpu_m, shape.memory_bytes)
    more, used, limit = per_pod.times(added), Need(*found.in_use), Need(*found.quota)
    if over := _over(used, more, limit):
        detail = _pods(added, per_pod, over, more=True)
        return _refused(f'{kind} "{review.name}"', found.name, over, more, detail, used, limit)
    return ALLOWED
