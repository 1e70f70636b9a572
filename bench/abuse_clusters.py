"""Hostile-cluster attacks for bench/abuse.py: what a registered cluster can cost everyone
else. Each attack is an `Attack` of that script (a coroutine on its `Scene`, running
until `scene.stop` is set, tallying how the server answered in `scene.answers`).

One TLS Kubernetes stand-in (sim/kube_standin.py) plays every hostile
cluster, registered as GENERIC spaces with the scene's admin token; the attacker is a
viewer asking for live fields over HTTP, as fast as the server answers:

- a 60 MB namespace list, streamed (refused at SPACEDOCK_CLUSTER_MAX_BODY_BYTES);
- a list of 5,000 namespaces, the most one operation may return (decoded off the
  event loop, then rendered on it);
- malformed answers, one shape after another (PROVIDER_ERROR, never a 500);
- a redirect of every call to a canary (never followed);
- `namespaces` of 50 spaces in one query, on a cluster answering after 200 ms (capped
  at SPACEDOCK_LIVE_CALLS_PER_REQUEST, SPACEDOCK_LIVE_CALL_CONCURRENCY at once).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Protocol

import aiohttp

from sim.kube_standin import HostileAnswer, KubeStandIn, huge_namespace_list
from tests.support import factories as make
from tests.support.canary import Canary

LIST = "GET /api/v1/namespaces"
LIST_HEAD = b'{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":['
NAMESPACES = "query($id: ID!) { space(id: $id) { namespaces { name } } }"
MALFORMED = [
    b'{"items":[{}]}',
    b'{"items":[{"metadata":null}]}',
    b'{"items":{"a":1}}',
    b'{"items":[{"metadata":{"name":null}}]}',
    b'{"items":[{"metadata":{"name":"a"',
    b"[" * 50_000,
    b"<html>not json</html>",
]


class Scene(Protocol):
    """What bench/abuse.py's Scene offers an attack."""

    server: Any
    viewer: str
    admin: str
    stop: Any  # asyncio.Event
    answers: Any  # Counter[str]


Attack = Callable[[Any], Coroutine[Any, Any, None]]


@functools.cache
def standin() -> KubeStandIn:
    """One stand-in for every cluster attack, started on first use; a daemon thread that
    ends with the benchmark."""
    return KubeStandIn().start()


@functools.cache
def canary() -> Canary:
    return Canary("127.0.0.2").__enter__()


async def _graphql(
    session: aiohttp.ClientSession, scene: Scene, token: str, query: str, variables: Any = None
) -> dict[str, Any]:
    async with session.post(
        scene.server.url,
        json={"query": query, "variables": variables or {}},
        headers={"Authorization": f"Bearer {token}"},
    ) as reply:
        answer: dict[str, Any] = await reply.json()
        return answer


async def _space(session: aiohttp.ClientSession, scene: Scene) -> str:
    cluster = standin()
    config = {
        "clusterName": make.unique("hostile"),
        "server": f"{cluster.url}/{make.unique('c')}",
        "caCert": cluster.ca_pem,
        "serviceAccountToken": cluster.token,
    }
    variables = {"input": {"name": make.unique("hostile"), "provider": "GENERIC", "config": config}}
    payload = (await _graphql(session, scene, scene.admin, make.REGISTER_SPACE, variables))["data"]
    space_id: str = make.succeeded(payload["registerSpace"])["space"]["id"]
    return space_id


def _tally(scene: Scene, answer: dict[str, Any]) -> None:
    """One count per response: "ok", or the codes of its errors."""
    codes = {e.get("extensions", {}).get("code", "?") for e in answer.get("errors") or []}
    scene.answers["+".join(sorted(codes)) or "ok"] += 1


async def _ask_until_stopped(scene: Scene, query: Callable[[str], str]) -> None:
    """Registers one hostile space, then asks `query(space_id)` back to back."""
    async with aiohttp.ClientSession() as session:
        space_id = await _space(session, scene)
        while not scene.stop.is_set():
            _tally(scene, await _graphql(session, scene, scene.viewer, query(space_id)))
    standin().heal()


def _namespaces(space_id: str) -> str:
    return f'{{ space(id: "{space_id}") {{ namespaces {{ name }} }} }}'


async def huge_list(scene: Scene) -> None:
    standin().answers[LIST] = HostileAnswer(
        LIST_HEAD, stream=lambda: huge_namespace_list(60 * 10**6)
    )
    await _ask_until_stopped(scene, _namespaces)


async def large_allowed_list(scene: Scene) -> None:
    items = [
        {"metadata": {"name": f"ns-{i:06d}", "creationTimestamp": "2026-01-01T00:00:00Z"}}
        for i in range(5_000)
    ]
    standin().answers[LIST] = HostileAnswer(json.dumps({"items": items}).encode())
    await _ask_until_stopped(scene, _namespaces)


def _cycle(bodies: list[bytes]) -> Iterator[HostileAnswer]:
    while True:
        yield from (HostileAnswer(body) for body in bodies)


async def malformed_answers(scene: Scene) -> None:
    shapes = _cycle(MALFORMED)

    def next_shape(space_id: str) -> str:
        standin().answers[LIST] = next(shapes)
        return _namespaces(space_id)

    await _ask_until_stopped(scene, next_shape)


async def redirects(scene: Scene) -> None:
    standin().redirect_to = f"{canary().url}/api/v1/namespaces"
    await _ask_until_stopped(scene, _namespaces)
    assert canary().connections == 0, "a redirect was followed"


async def live_field_fan_out(scene: Scene) -> None:
    standin().delay_s = 0.2
    async with aiohttp.ClientSession() as session:
        for _ in range(49):  # with the one _ask_until_stopped registers: 50 spaces
            await _space(session, scene)
    await _ask_until_stopped(
        scene, lambda _: "{ spaces(first: 50) { nodes { namespaces { name } } } }"
    )


CLUSTER_ATTACKS: dict[str, Attack] = {
    "cluster: 60 MB namespace list": huge_list,
    "cluster: 5,000 namespaces": large_allowed_list,
    "cluster: malformed answers": malformed_answers,
    "cluster: redirect to a canary": redirects,
    "cluster: namespaces of 50 spaces": live_field_fan_out,
}
