"""The rules that turn Flux's objects into an app's status and a revision's fate, case by
case, on objects shaped as Flux v2.9.4's controllers write them (core.apps.status); and the
Helm values rule (core.apps.sources)."""

from __future__ import annotations

from typing import Any

import pytest

from core.apps.sources import values_problem
from core.apps.status import AppStatus, Reading, Workload, observe, revision_outcome


def flux_object(
    kind: str,
    generation: int = 1,
    observed: int | None = 1,
    ready: tuple[str, str, str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    conditions = []
    if ready is not None:
        conditions.append(
            {"type": "Ready", "status": ready[0], "reason": ready[1], "message": ready[2]}
        )
    found: dict[str, Any] = {
        "kind": kind,
        "metadata": {"name": "web", "generation": generation},
        "spec": {},
    }
    found["status"] = {"conditions": conditions, **status}
    if observed is not None:
        found["status"]["observedGeneration"] = observed
    return found


GIT_OK = flux_object(
    "GitRepository",
    ready=("True", "Succeeded", "stored artifact for revision 'main@sha1:abc'"),
    artifact={"revision": "main@sha1:abc"},
)
APPLIED = flux_object(
    "Kustomization",
    ready=("True", "ReconciliationSucceeded", "Applied revision: main@sha1:abc"),
    lastAppliedRevision="main@sha1:abc",
    lastAttemptedRevision="main@sha1:abc",
    inventory={
        "entries": [
            {"id": "shop_web_apps_Deployment", "v": "v1"},
            {"id": "shop_web__Service", "v": "v1"},
            {"id": "shop_db_apps_StatefulSet", "v": "v1"},
        ]
    },
)
WORKLOADS = {
    ("Deployment", "shop", "web"): {
        "kind": "Deployment",
        "spec": {"replicas": 3},
        "status": {"readyReplicas": 2},
    },
}


def test_ready_lists_the_inventorys_workloads_with_their_replicas() -> None:
    seen = observe(Reading(GIT_OK, APPLIED), WORKLOADS)
    assert (seen.status, seen.reason) == (AppStatus.READY, "ReconciliationSucceeded")
    assert seen.last_applied == "main@sha1:abc"
    assert seen.workloads == (
        Workload("Deployment", "shop", "web", 2, 3),
        Workload("StatefulSet", "shop", "db", None, None),  # named, but not read: replicas unknown
    )


def test_a_failing_source_decides_before_the_kustomization() -> None:
    source = flux_object(
        "GitRepository",
        ready=("False", "GitOperationFailed", "unable to clone 'x': couldn't find remote ref"),
    )
    kustomization = flux_object(
        "Kustomization", ready=("False", "ArtifactFailed", "Source artifact not found")
    )
    seen = observe(Reading(source, kustomization), {})
    assert (seen.status, seen.reason) == (AppStatus.FAILED, "GitOperationFailed")
    assert "couldn't find remote ref" in (seen.message or "")


def test_a_missing_chart_version_is_the_helm_charts_reason() -> None:
    release = flux_object(
        "HelmRelease", ready=("False", "SourceNotReady", "HelmChart 'x' is not ready")
    )
    chart = flux_object(
        "HelmChart",
        ready=(
            "False",
            "InvalidChartReference",
            "no 'web' chart with version matching '9.9.9' found",
        ),
    )
    repository = flux_object("HelmRepository", ready=("True", "Succeeded", "stored artifact"))
    seen = observe(Reading(repository, release, chart), {})
    assert (seen.status, seen.reason) == (AppStatus.FAILED, "InvalidChartReference")


@pytest.mark.parametrize(
    ("deploy", "expected"),
    [
        # Flux has not seen the new generation yet: whatever its Ready says is old.
        (
            flux_object(
                "Kustomization",
                generation=2,
                observed=1,
                ready=("True", "ReconciliationSucceeded", "old"),
            ),
            AppStatus.PROGRESSING,
        ),
        (
            flux_object(
                "HelmRelease", ready=("Unknown", "Progressing", "Fresh install in progress")
            ),
            AppStatus.PROGRESSING,
        ),
        (
            flux_object(
                "Kustomization", ready=("False", "DependencyNotReady", "dependency not ready")
            ),
            AppStatus.PROGRESSING,
        ),
        (
            flux_object("HelmRelease", ready=("False", "InstallFailed", "Helm install failed")),
            AppStatus.FAILED,
        ),
    ],
)
def test_what_flux_is_still_doing_is_progressing_and_what_it_gave_up_on_is_failed(
    deploy: dict[str, Any], expected: AppStatus
) -> None:
    assert observe(Reading(GIT_OK, deploy), {}).status is expected


def test_stalled_is_failed_whatever_ready_says() -> None:
    release = flux_object("HelmRelease", ready=("Unknown", "Progressing", "retrying"))
    release["status"]["conditions"].append(
        {"type": "Stalled", "status": "True", "reason": "RetriesExceeded", "message": "spent"}
    )
    seen = observe(Reading(GIT_OK, release), {})
    assert (seen.status, seen.reason) == (AppStatus.FAILED, "RetriesExceeded")


def test_a_new_source_revision_not_yet_applied_is_progressing() -> None:
    newer = flux_object(
        "GitRepository",
        generation=2,
        observed=2,
        ready=("True", "Succeeded", "x"),
        artifact={"revision": "main@sha1:def"},
    )
    assert observe(Reading(newer, APPLIED), {}).status is AppStatus.PROGRESSING


def test_suspended_and_missing_objects() -> None:
    suspended = {**APPLIED, "spec": {"suspend": True}}
    assert observe(Reading(GIT_OK, suspended), WORKLOADS).status is AppStatus.SUSPENDED
    missing = observe(Reading(GIT_OK, None), {})
    assert (missing.status, missing.reason) == (AppStatus.UNKNOWN, "NotFound")


def test_a_revision_is_decided_once_flux_answered_for_its_generations() -> None:
    seen = observe(Reading(GIT_OK, APPLIED), {})
    assert revision_outcome(Reading(GIT_OK, APPLIED), seen, 1, 1) == "READY"
    assert revision_outcome(Reading(GIT_OK, APPLIED), seen, 2, 1) is None  # the source lags
    failing = flux_object("Kustomization", ready=("False", "ReconciliationFailed", "bad"))
    seen = observe(Reading(GIT_OK, failing), {})
    assert revision_outcome(Reading(GIT_OK, failing), seen, 1, 1) == "FAILED"
    assert revision_outcome(Reading(GIT_OK, failing), seen, 1, 2) is None


# Thirty levels of aliases, each twice the one before: 2**30 nodes from 1 KiB of text.
BILLION_LAUGHS = "l0: &l0 [x, x]\n" + "".join(
    f"l{level}: &l{level} [*l{level - 1}, *l{level - 1}]\n" for level in range(1, 31)
)


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ("replicaCount: 2\nimage: {tag: '1.2'}\n", None),
        ("", None),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("a: [1, 2\n", "are not YAML at line"),
        ("when: 2024-01-01\n", "quote it"),
        (BILLION_LAUGHS, "more than"),
        ("[" * 20_000, "nested deeper"),
    ],
)
def test_helm_values(values: str, problem: str | None) -> None:
    found = values_problem(values)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found
