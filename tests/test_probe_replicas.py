"""Two `spacedock serve` processes share one Postgres database and its fleet of spaces;
one is killed with SIGKILL while probes are in flight. The claim (db.claims) must keep
every space probed by someone, and none probed by both at once.

The cluster stand-in notes, in order, when each probe of each space starts and ends
(spaces differ by their server URL's path prefix), so the assertions are about order
and counts: at most one probe of a space in flight at any point, every space probed
again after the kill (bounded by the staleness limit, never a speed target), and no
space probed more often than once per interval.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from core.common.secrets import SecretBox
from sim.kube_standin import KubeStandIn
from tests.conftest import new_org
from tests.support.factories import register_generic_space
from tests.support.server import Backend, Server

SPACES = 10
INTERVAL_S = 2.0
JITTER = 0.1  # core.probing.loop.ProbeSettings.jitter
STALE_AFTER_INTERVALS = 3
SPACE_STATUS = "query($id: ID!) { space(id: $id) { status statusReason } }"


class RecordingStandIn(KubeStandIn):
    """Notes ("start" | "end", path prefix) for every request, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        super().__init__()

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        prefix = request.path.split("/")[1]
        self.log.append(("start", prefix))
        try:
            return await super()._dispatch(request)
        finally:
            self.log.append(("end", prefix))

    def starts(self, since: int = 0) -> Counter[str]:
        return Counter(prefix for what, prefix in self.log[since:] if what == "start")

    def in_flight(self) -> bool:
        running: Counter[str] = Counter()
        for what, prefix in list(self.log):
            running[prefix] += 1 if what == "start" else -1
        return any(count > 0 for count in running.values())


@pytest.fixture
def cluster() -> Iterator[RecordingStandIn]:
    standin = RecordingStandIn()
    with standin:
        standin.delay_s = 0.3  # probes take a while, so a kill lands mid-probe
        yield standin


async def until(condition: Any, what: str, within_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.01)


async def test_a_killed_replica_leaves_no_space_unprobed_and_none_probed_twice_at_once(
    empty_backend: Backend, cluster: RecordingStandIn, tmp_path: Path
) -> None:
    if empty_backend.name != "postgres":
        pytest.skip("replicas share a fleet on Postgres; SQLite is one process")
    env = {
        "SPACEDOCK_SECRET_KEY": SecretBox.generate_key(),
        "SPACEDOCK_PROBE_INTERVAL_S": str(INTERVAL_S),
        "SPACEDOCK_PROBE_TIMEOUT_S": "0.8",
    }
    survivor = Server(empty_backend, tmp_path / "survivor.log", dict(env)).start()
    doomed = Server(empty_backend, tmp_path / "doomed.log", dict(env)).start()
    try:
        org = await new_org(survivor, "fleet")
        started = asyncio.get_running_loop().time()
        prefixes = [f"s{n}" for n in range(SPACES)]
        spaces = {
            prefix: await register_generic_space(
                org.editor,
                server=f"{cluster.url}/{prefix}",
                ca=cluster.ca_pem,
                token=cluster.token,
            )
            for prefix in prefixes
        }
        await until(
            lambda: set(cluster.starts()) == set(prefixes) and cluster.in_flight(),
            "every space probed, and a probe in flight",
            within_s=STALE_AFTER_INTERVALS * INTERVAL_S,
        )
        assert doomed.process is not None
        doomed.process.kill()  # SIGKILL: no stop(), no last write
        doomed.process.wait()
        killed_at = len(cluster.log)

        # Every space is probed again by the survivor before any could read "probe stale".
        await until(
            lambda: set(cluster.starts(killed_at)) == set(prefixes),
            "every space probed again after the kill",
            within_s=STALE_AFTER_INTERVALS * INTERVAL_S,
        )
        elapsed = asyncio.get_running_loop().time() - started
        probed = cluster.starts()  # counted at the same moment as elapsed
        shown = [
            (await org.viewer.data(SPACE_STATUS, {"id": space["id"]}))["space"]
            for space in spaces.values()
        ]
    finally:
        doomed.stop()
        survivor.stop()

    assert all(space == {"status": "ACTIVE", "statusReason": None} for space in shown), shown
    running: Counter[str] = Counter()
    for what, prefix in cluster.log:
        running[prefix] += 1 if what == "start" else -1
        assert running[prefix] <= 1, f"space {prefix} probed twice at once"
    # A space claimed twice per interval would be probed more often than this (a busy
    # machine only makes fewer probes, never more).
    most = elapsed / (INTERVAL_S * (1 - JITTER)) + 1
    assert max(probed.values()) <= most, (probed, elapsed)
    assert "Traceback" not in survivor.log()
