"""A CloudSpace card (name, phase, quota, usage, its apps with their status, gate, workloads
and newest revision) is one request whose SQL statements do not grow with CloudSpaces or
apps: the apps, their revisions and their targets come through the request's loaders."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim.host_standin import HostStandIn
from tests.conftest import Org
from tests.support import apps as support
from tests.support.cloudspaces import CREATE, Platform, eventually, serve_platform
from tests.support.server import Backend
from tests.support.sql_counts import quiet, statements

CARDS = """
{
  cloudSpaces(first: 10) {
    nodes {
      id name phase quota { cpu memoryMiB } usage { cpu memoryMiB }
      apps(first: 10) {
        totalCount
        nodes {
          id name status statusReason gate
          workloads { kind name readyReplicas desiredReplicas }
          latestRevision { number state }
        }
      }
    }
  }
}"""


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("32", "128Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host: HostStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    directory = Path(tmp_path_factory.mktemp("server"))
    # Loops that wake rarely, so the server goes quiet between requests.
    env = {
        "SPACEDOCK_RECONCILE_INTERVAL_S": "3600",
        "SPACEDOCK_APP_STATUS_INTERVAL_S": "3600",
        "SPACEDOCK_TOKEN_CACHE_TTL_S": "3600",
    }
    yield from serve_platform(backend, host, directory / "server.log", env)


async def cards_statements(platform: Platform, org: Org) -> tuple[float, dict[str, Any]]:
    """The fewest statements of three card reads (a background loop may add one)."""
    counted = []
    data: dict[str, Any] = {}
    for _ in range(3):
        await quiet(platform.server)
        before = await statements(platform.server)
        data = await org.viewer.data(CARDS)
        counted.append(await statements(platform.server) - before)
    return min(counted), data


async def ready_cloud_spaces(org: Org, count: int) -> None:
    async def ready() -> bool:
        data = await org.viewer.data("{ cloudSpaces(first: 10) { nodes { phase } } }")
        phases = [cs["phase"] for cs in data["cloudSpaces"]["nodes"]]
        return len(phases) == count and set(phases) == {"READY"}

    await eventually(ready, 180)


async def delivered(org: Org, app_ids: list[str]) -> None:
    for app_id in app_ids:

        async def applied(app_id: str = app_id) -> bool:
            found = await support.app(org.viewer, app_id)
            return found["latestRevision"]["state"] in ("APPLIED", "READY")

        await eventually(applied, 120)


async def test_a_cloudspace_card_query_costs_the_same_statements_for_any_number_of_apps(
    platform: Platform, host: HostStandIn
) -> None:
    org = await platform.tenant()
    host.flux.helm("https://charts.example").add_chart(
        "web", "1.0.0", render=support.chart_render("web")
    )
    await ready_cloud_spaces(org, 1)
    data = await org.viewer.data("{ cloudSpaces(first: 1) { nodes { id } } }")
    default = data["cloudSpaces"]["nodes"][0]["id"]

    def helm(name: str, cloud_space_id: str) -> Any:
        return support.create(
            org.editor,
            name,
            {"cloudSpaceId": cloud_space_id},
            support.helm_input("https://charts.example", "web", version="1.0.0"),
        )

    first = await helm("first", default)
    await delivered(org, [first["app"]["id"]])
    alone, seen = await cards_statements(platform, org)
    (card,) = seen["cloudSpaces"]["nodes"]
    assert card["apps"]["totalCount"] == 1

    for name in ("north", "south"):
        made = await org.editor.mutate(
            CREATE, {"input": {"name": name, "cpu": 1, "memoryMiB": 1024}}
        )
        assert made["userErrors"] == []
    await ready_cloud_spaces(org, 3)
    data = await org.viewer.data("{ cloudSpaces(first: 10) { nodes { id } } }")
    ids = [cs["id"] for cs in data["cloudSpaces"]["nodes"]]
    created = await asyncio.gather(*(helm(f"app-{index}", ids[index % 3]) for index in range(8)))
    await delivered(org, [c["app"]["id"] for c in created])
    many, seen = await cards_statements(platform, org)
    assert sum(card["apps"]["totalCount"] for card in seen["cloudSpaces"]["nodes"]) == 9
    assert all(
        app["gate"] is None
        for card in seen["cloudSpaces"]["nodes"]
        for app in card["apps"]["nodes"]
    )
    assert alone > 0
    assert many == alone, f"1 CloudSpace with 1 app: {alone} statements; 3 with 9: {many}"
