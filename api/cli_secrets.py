"""`spacedock secrets reseal`: every stored secret re-sealed under the first key of
SPACEDOCK_SECRET_KEY (core.common.reseal), with progress, a verdict that says whether the
old keys may go, and one audit event per org whose secrets it re-sealed."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from api.operator import operator_services, os_user
from api.settings import Settings

if TYPE_CHECKING:
    from core.common.reseal import Progress, Report
    from core.common.services import Services

SHOWN_IDS = 20


def _progress(progress: Progress) -> None:
    print(
        f"{progress.what}: {progress.checked}/{progress.total} checked, "
        f"{progress.resealed} re-sealed",
        flush=True,
    )


async def _record(services: Services, report: Report) -> None:
    """resealSecrets by the OS user, in each org whose secrets were re-sealed."""
    from core.access import audit
    from core.access.tokens import operator_of
    from db import owned
    from db.tables import Org

    user = os_user()
    async with services.unit() as unit:
        orgs = await owned.by_ids(unit.session, Org, None, list(report.resealed_by_org))
        for org in orgs:
            ids = report.resealed_by_org[org.id]
            await audit.record_operator_call(
                unit, operator_of(org, user), "resealSecrets", {"resealed": len(ids)}, ids
            )


async def _reseal(settings: Settings, batch_size: int) -> Report:
    from core.common.reseal import reseal

    async with operator_services(settings) as services:
        report = await reseal(services, batch_size, _progress)
        if report.resealed_by_org:
            await _record(services, report)
    return report


def _ids(ids: list[str]) -> str:
    more = f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    return ", ".join(ids[:SHOWN_IDS]) + more


def reseal_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.batch_size < 1:
        print("spacedock: --batch-size must be at least 1", file=sys.stderr)
        return 2
    keys = settings.secret_box().key_count
    report = asyncio.run(_reseal(settings, args.batch_size))
    print(
        f"{report.checked} secrets checked, {report.resealed} re-sealed under the first of "
        f"{keys} key(s) in SPACEDOCK_SECRET_KEY."
    )
    if report.unreadable:
        print(
            f"spacedock: {len(report.unreadable)} secret(s) open with none of the keys: "
            f"{_ids(report.unreadable)}. Add the key they were sealed with to "
            "SPACEDOCK_SECRET_KEY (after the first) and run this again.",
            file=sys.stderr,
        )
    if report.busy:
        print(
            f"spacedock: {len(report.busy)} secret(s) kept changing while this ran: "
            f"{_ids(report.busy)}. Run this again.",
            file=sys.stderr,
        )
    if not report.complete:
        return 1
    print(
        "Every secret is sealed under the first key. Once every replica runs with that key "
        "first, the others may be removed from SPACEDOCK_SECRET_KEY."
    )
    return 0
