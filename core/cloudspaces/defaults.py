"""Every org's default CloudSpace, made by the server whatever created the org.

The rule lives here and the server enforces it: the reconciler's `default-cloudspaces`
task (core.cloudspaces.reconciler) gives each org that has none yet its CloudSpace
`default` on SPACEDOCK_DEFAULT_HOST_SPACE, so an org made by a `spacedock token create`
run without that setting, one first used through SSO, and every org made before the host
was configured get theirs once a server runs with it. `spacedock token create` run with
the setting calls the same `ensure` at once, so its org has it before the token is used.

An org gets one default CloudSpace, ever: `orgs.default_cloud_space_at` is set by a
conditional UPDATE in the transaction that makes it (`db.orgs.mark_default_cloud_space`),
so two replicas, or the CLI and a replica, never both make it, and one its admins deleted
is not made again; a unique index on the default CloudSpaces of an org backs this up.
The platform's own org, which owns the host, gets none: it is not a tenant.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import IntegrityError

from core.cloudspaces import lifecycle
from core.common.services import Services, Unit
from db import cloudspaces as cloudspace_rows
from db import orgs as org_rows
from db import owned
from db.cloudspace_tables import CloudSpace
from db.tables import Org, Space

log = logging.getLogger("spacedock.reconciler")

# Orgs looked at per pass; the rest wait for the next pass.
BATCH = 100


async def _default_host(unit: Unit, services: Services) -> Space | None:
    """The configured host space while it is usable, else None (the orgs wait for it)."""
    host_id = services.cloudspaces.default_host_space
    if host_id is None:
        return None
    host = await cloudspace_rows.host_space(unit.session, host_id)
    if host is None or host.deregistered_at is not None:
        return None
    return host


async def ensure(unit: Unit, services: Services, org: Org) -> CloudSpace | None:
    """Gives `org` its default CloudSpace if it never had one and the host is configured;
    the new row, else None. Its quota is the platform's default; the reconciler's capacity
    step checks it against the host before anything is provisioned."""
    host = await _default_host(unit, services)
    if host is None or host.org_id == org.id:
        return None
    if not await org_rows.mark_default_cloud_space(unit.session, org.id, unit.now):
        return None  # given already, here or by another replica
    if await owned.by_name(unit.session, CloudSpace, org.id, lifecycle.DEFAULT_NAME):
        log.info("org %s already has a CloudSpace named default; none made", org.id)
        return None
    settings = services.cloudspaces
    quota = lifecycle.CreateRequest(
        lifecycle.DEFAULT_NAME, host.id, settings.default_cpu, settings.default_memory_mib
    )
    return await lifecycle.insert(
        unit, org.id, lifecycle.DEFAULT_NAME, host.id, quota, is_default=True
    )


async def ensure_all(services: Services) -> int:
    """One pass: every org still without its default CloudSpace gets it, each in its own
    transaction; how many were made."""
    if services.cloudspaces.default_host_space is None:
        return 0
    async with services.unit(read_only=True) as unit:
        host = await _default_host(unit, services)
        if host is None:
            return 0
        waiting = await org_rows.orgs_without_default_cloud_space(unit.session, host.org_id, BATCH)
    made = 0
    for org in waiting:
        try:
            async with services.unit() as unit:
                if await ensure(unit, services, org) is not None:
                    made += 1
                    log.info("org %s given its default CloudSpace", org.id)
        except IntegrityError:
            # A CloudSpace named default made by the org at this very moment: the whole
            # transaction was undone, and the next pass finds it and marks the org.
            continue
    return made
