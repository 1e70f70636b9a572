"""`spacedock token create|list|revoke`: an org's API tokens from the operator's shell,
each call audited with the OS user (api.operator)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from typing import TYPE_CHECKING

from api.operator import operator_services, os_user

if TYPE_CHECKING:
    from api.settings import Settings


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`token` and its subcommands, on the root parser's subcommands."""
    token = commands.add_parser("token", help="API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser("create", help="create an org's API token; printed last")
    create.add_argument("--org", required=True, help="org name; created if it does not exist")
    create.add_argument(
        "--role", required=True, help="admin, editor, viewer, or a custom role's name or id"
    )
    create.add_argument("--name", help="what the token is for (default: the role and the time)")
    create.add_argument(
        "--expires-in-days", type=int, help="lifetime in days, 1 to 3650 (default: no expiry)"
    )
    create.set_defaults(run=_token)
    listing = token_commands.add_parser("list", help="list an org's tokens, revoked ones too")
    listing.add_argument("--org", required=True, help="org name")
    listing.set_defaults(run=_token_list)
    revoke = token_commands.add_parser("revoke", help="revoke a token: refused from now on")
    revoke.add_argument("--org", required=True, help="org name")
    revoke.add_argument("id", help="the token's id, as `token list` shows it")
    revoke.set_defaults(run=_token_revoke)


async def _create_token(
    settings: Settings, org: str, role: str, name: str | None, expires_in_days: int | None
) -> str:
    from core.orgs.bootstrap import create_token

    async with operator_services(settings) as services, services.unit() as unit:
        _, token = await create_token(
            unit, org, role, services, name, expires_in_days, os_user=os_user()
        )
    return token


def _token(args: argparse.Namespace, settings: Settings) -> int:
    from core.common.errors import UserErrors

    role = args.role.upper() if args.role.lower() in ("admin", "editor", "viewer") else args.role
    try:
        token = asyncio.run(
            _create_token(settings, args.org, role, args.name, args.expires_in_days)
        )
    except UserErrors as refused:
        for error in refused.errors:
            print(f"spacedock: {error.message}", file=sys.stderr)
        return 2
    lifetime = f", expiring in {args.expires_in_days} days" if args.expires_in_days else ""
    print(
        f"Created a {args.role} token for org {args.org!r}{lifetime}. "
        "It is shown once; store it now."
    )
    print(token)
    return 0


async def _list_tokens(settings: Settings, org: str) -> list[tuple[str, ...]] | None:
    from core.access.roles import custom_of
    from core.access.tokens import list_tokens
    from db.orgs import roles_of

    async with operator_services(settings) as services, services.unit() as unit:
        found = await list_tokens(unit, org)
        if found is None:
            return None
        found_org, rows = found
        names = {r.id: custom_of(r).name for r in await roles_of(unit.session, found_org.id)}

    def when(moment: datetime | None) -> str:
        return "-" if moment is None else f"{moment:%Y-%m-%dT%H:%M:%SZ}"

    return [
        (
            row.id,
            row.name,
            names.get(row.custom_role_id or "", row.role),
            when(row.created_at),
            when(row.expires_at),
            when(row.last_used_at),
            when(row.revoked_at),
        )
        for row in rows
    ]


def _token_list(args: argparse.Namespace, settings: Settings) -> int:
    rows = asyncio.run(_list_tokens(settings, args.org))
    if rows is None:
        print(f"spacedock: there is no org {args.org!r}", file=sys.stderr)
        return 2
    header = ("ID", "NAME", "ROLE", "CREATED", "EXPIRES", "LAST USED", "REVOKED")
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


async def _revoke_token(settings: Settings, org: str, token_id: str) -> bool:
    from core.access.tokens import revoke_by_operator

    async with operator_services(settings) as services, services.unit() as unit:
        return await revoke_by_operator(unit, org, token_id, os_user()) is not None


def _token_revoke(args: argparse.Namespace, settings: Settings) -> int:
    if not asyncio.run(_revoke_token(settings, args.org, args.id)):
        print(f"spacedock: org {args.org!r} has no token {args.id}", file=sys.stderr)
        return 2
    print(f"Revoked token {args.id}; it is refused from now on.")
    return 0
