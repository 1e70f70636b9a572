"""What every operator command (`spacedock token …`, `space import-kubeconfig`, `secrets
reseal`) shares: the server's services on a migrated database, and who is running it."""

from __future__ import annotations

import getpass
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from api.settings import Settings
    from core.common.services import Services


@asynccontextmanager
async def operator_services(settings: Settings) -> AsyncIterator[Services]:
    """The server's services for a one-off command, on a migrated database."""
    from api.app import build_services

    services = build_services(settings, serving=False)
    try:
        await services.database.migrate()
        yield services
    finally:
        await services.database.dispose()


def os_user() -> str:
    """Who runs the command, as its audit events name them (actor, actorKind OS_USER)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return f"uid {os.getuid()}"
