"""The SQL statements a test server has sent (its /metrics counter), and waiting until it
sends none, for tests that count what one action costs."""

from __future__ import annotations

import asyncio

from tests.support.server import Server

STATEMENTS = "spacedock_sql_statements_total"
QUIET_FOR_S = 0.6  # no statement for this long: the background loops are between rounds
WAIT_S = 15.0  # a bound on a wait, not a speed requirement


async def statements(server: Server) -> float:
    return await asyncio.to_thread(server.metric, STATEMENTS)


async def quiet(server: Server) -> None:
    """Until nothing in the server sends SQL (a new space's first probe, the loops)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    last = await statements(server)
    while True:
        await asyncio.sleep(QUIET_FOR_S)
        now = await statements(server)
        if now == last:
            return
        assert asyncio.get_running_loop().time() < deadline, "the server never went quiet"
        last = now
