"""Environments: a space and a namespace to deploy into, gated when the space cannot take deploys."""

from __future__ import annotations

from datetime import datetime

from core.common.errors import Problems
from core.common.ids import new_id
from core.common.names import check_new_name, dns_label_problem, name_key
from core.common.rbac import Viewer
from core.common.services import Unit
from core.spaces.health import HealthRule
from core.spaces.statuses import SpaceStatus
from db import environments as environment_rows
from db import owned
from db.tables import Environment, Space

SPACE_DEREGISTERED = "Space deregistered"
SPACE_INACTIVE = "Space inactive"


def gate(space: Space | None, health: HealthRule, now: datetime) -> str | None:
    """Why an environment cannot deploy now; None when it can."""
    if space is None or space.deregistered_at is not None:
        return SPACE_DEREGISTERED
    if health.status_of(space, now)[0] == SpaceStatus.INACTIVE:
        return SPACE_INACTIVE
    return None


async def _bindable_space(unit: Unit, viewer: Viewer, problems: Problems, space_id: str) -> None:
    space = await owned.by_id(unit.session, Space, viewer.org_id, space_id)
    if space is None:
        problems.add(["spaceId"], "no such space", "NOT_FOUND")
    elif space.deregistered_at is not None:
        problems.add(
            ["spaceId"], "the space is deregistered; pick a registered space", "PRECONDITION_FAILED"
        )


def _check_namespace(problems: Problems, namespace: str) -> None:
    if (why := dns_label_problem(namespace)) is not None:
        problems.add(["namespace"], f"namespace {why}")


async def create(
    unit: Unit, viewer: Viewer, name: str, space_id: str, namespace: str
) -> Environment:
    viewer.require("environment:create")
    problems = Problems("input")
    name = await check_new_name(
        problems,
        name,
        lambda key: owned.by_name_key(unit.session, Environment, viewer.org_id, key),
        "an environment",
    )
    _check_namespace(problems, namespace)
    await _bindable_space(unit, viewer, problems, space_id)
    problems.raise_if_any()
    environment = Environment(
        id=new_id("env"),
        org_id=viewer.org_id,
        name=name,
        name_key=name_key(name),
        space_id=space_id,
        namespace=namespace,
        created_at=unit.now,
    )
    await owned.add(unit.session, environment)
    return environment


async def bind(
    unit: Unit, viewer: Viewer, environment_id: str, space_id: str, namespace: str
) -> Environment:
    viewer.require("environment:update")
    environment = await owned.by_id(unit.session, Environment, viewer.org_id, environment_id)
    problems = Problems("input")
    if environment is None:
        problems.add(["id"], "no such environment", "NOT_FOUND")
    _check_namespace(problems, namespace)
    await _bindable_space(unit, viewer, problems, space_id)
    problems.raise_if_any()
    assert environment is not None
    await environment_rows.rebind(unit.session, environment, space_id, namespace)
    return environment
