"""The rule that decides whether an app in a CloudSpace can be delivered now
(core.apps.targets), case by case over its CloudSpace's and its vCluster's phases: a vCluster
not READY holds the app like a CloudSpace not READY, a removed vCluster is GONE, and a second
vCluster failing (the CloudSpace shows FAILED) does not hold the apps of the first. The
end-to-end cases are in tests/test_apps_vclusters.py."""

from __future__ import annotations

from typing import cast

import pytest

from core.apps.targets import TargetState, World, target_of_app
from core.cloudspaces.lifecycle import Step
from core.cloudspaces.vcluster_rules import Removal
from core.common.services import Services, utcnow
from db.app_tables import App
from db.cloudspace_tables import CloudSpace
from db.tables import Space
from db.vcluster_tables import VCluster

NOW = utcnow()
HOST = Space(
    id="spc_host",
    org_id="org_platform",
    name="host",
    provider="KUBECONFIG",
    space_type="KUBERNETES",
    config_json="{}",
    identity_key="host",
)
# A CloudSpace's target is decided from its rows alone; the services are an environment's.
NO_SERVICES = cast(Services, None)


def world(cloud_space: tuple[str, str | None], *vclusters: tuple[str, str, str]) -> World:
    phase, message = cloud_space
    row = CloudSpace(
        id="cs_1",
        org_id="org_1",
        name="shop",
        host_space_id=HOST.id,
        cpu=2,
        memory_mib=2048,
        phase=phase,
        step=Step.REFRESH,
        message=message,
    )
    found = World(cloud_spaces={row.id: row}, spaces={HOST.id: HOST})
    for name, vphase, step in vclusters:
        vcluster = VCluster(
            id=f"vc_{name}",
            cloud_space_id=row.id,
            org_id="org_1",
            name=name,
            phase=vphase,
            step=step,
            created_at=NOW,
        )
        vcluster.message = "it broke" if vphase == "FAILED" else None
        found.vclusters[(row.id, name)] = vcluster
    return found


def target(app_vcluster: str, found: World) -> tuple[TargetState, str | None]:
    app = App(
        id="app_1",
        org_id="org_1",
        name="web",
        target_key=f"cs:cs_1/{app_vcluster}",
        cloud_space_id="cs_1",
        vcluster=app_vcluster,
        namespace="default",
        source_kind="GIT",
    )
    made = target_of_app(NO_SERVICES, app, found, NOW)
    if made.state is not TargetState.GONE:
        assert made.vcluster is not None and made.vcluster.name == app_vcluster
    return made.state, made.why


READY = ("READY", None)
SHOP_READY = ("shop", "READY", Step.REFRESH)


@pytest.mark.parametrize(
    ("cloud_space", "second", "expected"),
    [
        (READY, ("b", "READY", Step.REFRESH), (TargetState.AVAILABLE, None)),
        (
            READY,
            ("b", "PROVISIONING", Step.VCLUSTER_READY),
            (TargetState.COMING_UP, "vCluster b of CloudSpace shop is PROVISIONING"),
        ),
        (
            ("FAILED", "vCluster b: it broke"),
            ("b", "FAILED", Step.FLUX_READY),
            (TargetState.UNAVAILABLE, "vCluster b of CloudSpace shop is FAILED: it broke"),
        ),
        (
            READY,
            ("b", "DELETING", Removal.DELETE),
            (TargetState.GONE, "vCluster b being removed"),
        ),
        (
            ("PROVISIONING", None),
            ("b", "READY", Step.REFRESH),
            (TargetState.COMING_UP, "CloudSpace shop is PROVISIONING"),
        ),
        (
            ("FAILED", "the host is full"),
            ("b", "INSTALLING_FLUX", Step.FLUX),
            (TargetState.UNAVAILABLE, "CloudSpace shop is FAILED: the host is full"),
        ),
    ],
)
def test_the_named_vclusters_phase_decides(
    cloud_space: tuple[str, str | None],
    second: tuple[str, str, str],
    expected: tuple[TargetState, str | None],
) -> None:
    assert target("b", world(cloud_space, SHOP_READY, second)) == expected


def test_a_removed_vcluster_is_gone_and_a_failing_second_does_not_hold_the_first() -> None:
    assert target("b", world(READY, SHOP_READY)) == (TargetState.GONE, "vCluster b removed")
    failing = world(("FAILED", "vCluster b: it broke"), SHOP_READY, ("b", "FAILED", Step.FLUX))
    assert target("shop", failing) == (TargetState.AVAILABLE, None)
    deleting = world(("DELETING", None), SHOP_READY)
    assert target("shop", deleting) == (TargetState.GONE, "CloudSpace being deleted")
