"""Telling a database outage from a bug, and saying so once per outage.

While the database is down every request fails the same way; a traceback per request
would bury the one line an operator needs. Requests answer SERVICE_UNAVAILABLE instead,
and the log says "unavailable" when the outage starts and "reachable again" when it ends.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

log = logging.getLogger("spacedock.database")

# What a driver raises when it cannot reach the database or loses its connection
# (refused, reset, timed out, the server shutting down, the pool exhausted), on both
# asyncpg and aiosqlite ("database is locked" is an OperationalError too). asyncpg's
# connect lets the socket's ConnectionRefusedError through unwrapped.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    sa.exc.OperationalError,
    sa.exc.InterfaceError,
    sa.exc.TimeoutError,
    ConnectionError,
    TimeoutError,
)


def is_unavailable(error: BaseException) -> bool:
    """True when `error`, or an error it was raised from, means the database is unreachable."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, UNAVAILABLE):
            return True
        if isinstance(current, sa.exc.DBAPIError) and current.connection_invalidated:
            return True
        if type(current).__module__.startswith("asyncpg") and (
            "Connection" in type(current).__name__ or "CannotConnectNow" in type(current).__name__
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


class OutageWatch:
    """Logs one warning when the database becomes unreachable and one line when it is back."""

    def __init__(self) -> None:
        self.down = False

    def failed(self, error: BaseException) -> None:
        if not self.down:
            self.down = True
            log.warning(
                "database unavailable (%s); answering SERVICE_UNAVAILABLE until it is back",
                type(error).__name__,
            )

    def reached(self) -> None:
        if self.down:
            self.down = False
            log.warning("database reachable again")


# One per process: the outage is the database's, whichever request notices it.
outages = OutageWatch()
