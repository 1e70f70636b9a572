"""What the delivery worker does on a target cluster: write a revision's Flux objects, and
remove an app's. Every write is a server-side apply (field manager `spacedock`).

A revision is written at most once. A delivery that finds its revision already APPLYING
was cut short (its process died, its lease ran out): it reads each object first and leaves
alone the ones that carry this revision already, so an apply that reached the cluster
before the crash is not made again, and one that did not is made now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.apps import flux
from core.apps.flux import Obj, Placement, Ref
from providers import host as host_api
from providers.errors import PermanentError, ProviderError, TemporaryError, UnexpectedAnswer

FLUX_KINDS = frozenset({"GitRepository", "HelmRepository", "Kustomization", "HelmRelease"})
# Failures that say the target cannot be reached now, as opposed to refusing what was sent.
UNREACHABLE_WORDS = ("401 ", "403 ", "TLS", "cluster access revoked")


@dataclass(frozen=True)
class Written:
    """The generations the source and the Kustomization or HelmRelease have now, which
    Flux's `observedGeneration` must reach before the revision's fate is known; and how
    many objects were applied (0 when a resumed delivery found them all written)."""

    source_generation: int | None
    deploy_generation: int | None
    applied: int


class NoFlux(PermanentError):
    """The cluster serves no such Flux kind: Flux is not installed there."""


def path_of(ref: Ref) -> str:
    return host_api.path_of(ref.api_version, ref.kind, ref.namespace, ref.name)


async def write(
    kube: host_api.Kube, objects: list[Obj], revision: int, *, resumed: bool
) -> Written:
    """Applies the objects in order (a resumed delivery skips those written already)."""
    generations: dict[str, int | None] = {}
    applied = 0
    for obj in objects:
        kind = str(obj["kind"])
        answer: Mapping[str, Any] | None = None
        if resumed:
            found = await kube.get(_path(obj))
            if flux.revision_of(found) == revision:
                answer = found
        if answer is None:
            answer = await _apply(kube, obj)
            applied += 1
        generations[kind] = flux.generation_of(answer)
    source = generations.get("GitRepository", generations.get("HelmRepository"))
    if any(o["kind"] == "HelmRepository" and o["spec"].get("type") == "oci" for o in objects):
        source = None  # an OCI HelmRepository is static: Flux never reports a generation
    deploy = generations.get("Kustomization", generations.get("HelmRelease"))
    return Written(source, deploy, applied)


def _path(obj: Obj) -> str:
    meta = obj["metadata"]
    return host_api.path_of(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])


async def _apply(kube: host_api.Kube, obj: Obj) -> Mapping[str, Any]:
    try:
        return await kube.apply(obj)
    except PermanentError as refused:
        if obj["kind"] in FLUX_KINDS and refused.reason.startswith("HTTP 404"):
            raise NoFlux(
                f"the cluster serves no {obj['kind']} ({obj['apiVersion']}): Flux is not "
                "installed there; install Flux's source-, kustomize- and helm-controller"
            ) from refused
        raise


async def remove(
    kube: host_api.Kube, placement: Placement, source_kind: str, resume_first: Obj | None
) -> str | None:
    """One pass of deleteApp on the cluster: resume a suspended Kustomization or HelmRelease
    (Flux prunes nothing for a suspended one), delete it, and once it is gone the source
    and the Secret. None when all are gone; else what is still there."""
    if resume_first is not None:
        await kube.apply(resume_first)
    for ref in flux.removal_order(placement, source_kind):
        path = path_of(ref)
        found = await kube.get(path)  # None too when the kind is not served at all
        if found is None:
            continue
        await kube.delete(path)
        if await kube.get(path) is not None:
            entries = len(((found.get("status") or {}).get("inventory") or {}).get("entries") or [])
            pruning = f" (Flux is removing the {entries} objects it applied)" if entries else ""
            return f"waiting for {ref.kind} {ref.namespace}/{ref.name} to go{pruning}"
    return None


# -- what a step's cluster work came to (core.apps.delivery writes it) --------------
@dataclass(frozen=True)
class Wrote:
    written: Written


@dataclass(frozen=True)
class Removing:
    blocker: str | None  # None: all gone


@dataclass(frozen=True)
class Unreachable:
    reason: str


@dataclass(frozen=True)
class Refused:
    reason: str


@dataclass(frozen=True)
class Crashed:
    """Our own failure: retried later, no try spent."""


Outcome = Wrote | Removing | Unreachable | Refused | Crashed
AGAIN = "again"  # a step wrote a decision and the app should be looked at again now


def unreachable(failed: ProviderError) -> bool:
    if isinstance(failed, (TemporaryError, UnexpectedAnswer)):
        return True
    return isinstance(failed, PermanentError) and failed.reason.startswith(UNREACHABLE_WORDS)
