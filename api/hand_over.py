"""A replica that is told to stop (SIGTERM, as Kubernetes sends it) hands its work over
before it goes (issue 25).

In order, within SPACEDOCK_SHUTDOWN_GRACE_S: `/readyz` answers 503 "draining" at once, so
no new traffic is routed here; the probe loop and the CloudSpace reconciler claim nothing
more, let the work in flight finish (a probe writes its result, a reconciler or app delivery step persists
its outcome) and hand back what did not finish in time (spaces due again now, leases
released), so another replica takes it over at once rather than when a claim or lease runs
out. Then uvicorn's own shutdown closes every WebSocket with 1012 ("service restart"), so
clients reconnect, to another replica, and resume with `after:`; then the database goes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger("spacedock")

# Of the grace period, the loops get this share to finish and hand back their work; open
# connections get most of the rest (uvicorn's timeout_graceful_shutdown), the lifespan the end.
LOOPS_SHARE = 0.6
CONNECTIONS_SHARE = 0.3


class Stoppable(Protocol):
    async def stop(self, grace_s: float) -> None: ...


class HandOver:
    def __init__(self, loops: Sequence[Stoppable], grace_s: float) -> None:
        self.loops = loops
        self.grace_s = grace_s
        self.draining = False
        self._handing_over: asyncio.Task[None] | None = None

    @property
    def connections_grace_s(self) -> float:
        return self.grace_s * CONNECTIONS_SHARE

    async def run(self) -> None:
        """Drains and hands the loops' work over; a second call waits for the first."""
        if self._handing_over is None:
            self._handing_over = asyncio.create_task(self._hand_over(), name="spacedock-hand-over")
        await asyncio.shield(self._handing_over)

    async def _hand_over(self) -> None:
        self.draining = True
        started = asyncio.get_running_loop().time()
        log.info("stopping: not ready, handing work over (at most %gs)", self.grace_s)
        loops_grace_s = self.grace_s * LOOPS_SHARE
        await asyncio.gather(*(loop.stop(loops_grace_s) for loop in self.loops))
        took = asyncio.get_running_loop().time() - started
        log.info("work handed over in %.1fs; closing connections", took)
