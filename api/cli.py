"""The `spacedock` command: serve, create, list and revoke API tokens, import kubeconfigs,
re-seal secrets, export the schema, and the kubeconfig exec plugin (`kubeconfig-token`,
which kubectl runs often: it loads neither the settings nor the server's modules)."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from api import kubeconfig_token
from api.operator import operator_services, os_user

if TYPE_CHECKING:
    from api.settings import Settings
    from core.common.errors import UserError
    from core.spaces.kubeconfigs import ContextImport


# glibc's M_MMAP_THRESHOLD (mallopt), and the size it is fixed at.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def _map_large_buffers() -> None:
    """Every TLS connection (each probe, each reply to a client) gets a 256 KiB read buffer
    from uvloop. glibc serves a block that size by mmap, until the first is freed: then its
    threshold rises past it, and from there on the buffers come from the heap, where a storm
    of probes leaves freed but resident memory that only looks like growth. Fixed at 128 KiB,
    each buffer is mapped and unmapped (issue 19: 3,600 probes given up at once left a
    198 MiB heap and 147 MiB RSS by default, 46 MiB and 134 MiB with this, for 3% more CPU).
    Elsewhere than glibc this does nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    if hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from api.app import create_app
    from api.http_server import serve

    _map_large_buffers()
    app = create_app(settings)
    serve(
        app,
        settings,
        host=args.host or settings.host,
        port=args.port if args.port is not None else settings.port,
    )
    return 0


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


@dataclass(frozen=True)
class _ImportOutcome:
    plan: ContextImport
    space_id: str | None = None
    server: str | None = None
    errors: tuple[UserError, ...] = ()


async def _register_imports(
    settings: Settings, org_name: str, planned: list[ContextImport]
) -> list[_ImportOutcome] | None:
    """Registers each planned space in its own unit, as an admin of the org, each audited
    as registerSpace by the OS user (a refusal too, as the API records one); None: no such org."""
    from core.access import audit
    from core.access.tokens import org_admin
    from core.common.errors import UserErrors
    from core.spaces import lifecycle as spaces

    outcomes: list[_ImportOutcome] = []
    async with operator_services(settings) as services:
        async with services.unit() as unit:
            operator = await org_admin(unit, org_name, os_user())
        if operator is None:
            return None
        for plan in planned:
            if plan.request is None:
                outcomes.append(_ImportOutcome(plan))
                continue
            recorded = _recorded_registration(plan)
            try:
                async with services.unit() as unit:
                    space = await spaces.register(
                        unit, operator, services.secrets, plan.request, services.deny_networks
                    )
                    server = spaces.public_config(space)["server"]
                    await audit.record_operator_call(
                        unit, operator, "registerSpace", recorded, [space.id]
                    )
                outcomes.append(_ImportOutcome(plan, space.id, server))
            except UserErrors as refused:
                outcomes.append(_ImportOutcome(plan, errors=tuple(refused.errors)))
                outcome = audit.outcome_of([error.code for error in refused.errors])
                async with services.unit() as unit:
                    await audit.record_operator_call(
                        unit, operator, "registerSpace", recorded, [], outcome
                    )
    return outcomes


def _recorded_registration(plan: ContextImport) -> dict[str, object]:
    """What the audit log keeps of one import: registerSpace's input, secrets redacted."""
    from core.access.audit import REDACTED, without_userinfo
    from core.spaces.clouds import GENERIC_SECRETS

    request = plan.request
    assert request is not None
    return {
        "name": request.name,
        "provider": request.provider,
        "config": {
            key: REDACTED if key in GENERIC_SECRETS else without_userinfo(value)
            for key, value in request.config.items()
        },
        "kubeconfigContext": plan.context,
    }


def _import_kubeconfig(args: argparse.Namespace, settings: Settings) -> int:
    from core.spaces.kubeconfigs import KubeconfigError, Source, choose_contexts, imports, parse

    path = Path(args.path).expanduser()
    if args.name is not None and args.all_contexts:
        print(
            "spacedock: --name names one space; it cannot go with --all-contexts", file=sys.stderr
        )
        return 2
    try:
        kubeconfig = parse(path.read_text(), str(path))
        contexts = choose_contexts(kubeconfig, str(path), args.context, args.all_contexts)
    except OSError as error:
        print(f"spacedock: cannot read {path}: {error.strerror or error}", file=sys.stderr)
        return 2
    except KubeconfigError as error:
        print(f"spacedock: {error}", file=sys.stderr)
        return 2

    def beside_kubeconfig(referenced: str) -> str:
        # kubectl resolves relative certificate and token paths against the kubeconfig's folder.
        return (path.parent / Path(referenced).expanduser()).read_text()

    source = Source(str(path), beside_kubeconfig, args.org)
    planned = imports(kubeconfig, contexts, source, args.name)
    outcomes = asyncio.run(_register_imports(settings, args.org, planned))
    if outcomes is None:
        print(
            f"spacedock: there is no org {args.org!r}. Create it with its first admin token, "
            f"then import again:\n  spacedock token create --org {args.org} --role admin",
            file=sys.stderr,
        )
        return 2
    for outcome in outcomes:
        plan = outcome.plan
        if outcome.space_id is not None and plan.request is not None:
            print(
                f"imported space={plan.request.name} id={outcome.space_id} "
                f"server={outcome.server} context={plan.context}"
            )
            continue
        name = f" space={plan.request.name}" if plan.request is not None else ""
        print(f"refused  context={plan.context}{name}", file=sys.stderr)
        reasons = [plan.refusal] if plan.refusal else []
        reasons += [
            f"{'.'.join(e.field) if e.field else 'input'}: {e.message} ({e.code})"
            for e in outcome.errors
        ]
        for reason in reasons:
            print("\n".join(f"  {line}" for line in reason.splitlines()), file=sys.stderr)
    return 0 if all(outcome.space_id is not None for outcome in outcomes) else 1


def _reseal(args: argparse.Namespace, settings: Settings) -> int:
    from api.cli_secrets import reseal_command

    return reseal_command(args, settings)


def _export_schema(args: argparse.Namespace, settings: Settings) -> int:
    from schema.build import SDL_PATH, sdl

    if args.check:
        if SDL_PATH.read_text() != sdl():
            print(
                f"{SDL_PATH} differs from the code; run `spacedock export-schema`", file=sys.stderr
            )
            return 1
        return 0
    SDL_PATH.write_text(sdl())
    print(f"wrote {SDL_PATH}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    # The simulators need the test tools (moto, jsonschema), which serving does not.
    try:
        from sim import demo
    except ImportError as missing:
        print(
            f"spacedock: the demo needs the test tools ({missing.name} is missing): run `make demo`"
            " in a checkout of the repository",
            file=sys.stderr,
        )
        return 2
    return demo.run(args.port, args.folder, args.flap_period)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="spacedock", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve GraphQL and GraphiQL at /graphql")
    serve.add_argument("--host", help="bind address (default SPACEDOCK_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default SPACEDOCK_PORT or 8000)")
    serve.set_defaults(run=_serve)

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

    space = commands.add_parser("space", help="spaces")
    space_commands = space.add_subparsers(dest="space_command", required=True)
    kubeconfig = space_commands.add_parser(
        "import-kubeconfig",
        help="register GENERIC spaces from a kubeconfig (token or client-certificate users)",
        description="Registers kubeconfig contexts as GENERIC spaces of an existing org, with the "
        "same validation as registerSpace. Uses the SPACEDOCK_* database settings of `serve`.",
    )
    kubeconfig.add_argument("path", help="the kubeconfig file, e.g. ~/.kube/config")
    kubeconfig.add_argument("--org", required=True, help="the org (create it with `token create`)")
    which = kubeconfig.add_mutually_exclusive_group()
    which.add_argument("--context", help="the context to import (default: current-context)")
    which.add_argument("--all-contexts", action="store_true", help="import every context")
    kubeconfig.add_argument("--name", help="the space name (default: the context name, sanitized)")
    kubeconfig.set_defaults(run=_import_kubeconfig)

    secrets = commands.add_parser("secrets", help="the secrets sealed at rest")
    secrets_commands = secrets.add_subparsers(dest="secrets_command", required=True)
    reseal = secrets_commands.add_parser(
        "reseal",
        help="re-seal every stored secret under the first key of SPACEDOCK_SECRET_KEY",
        description="Re-seals every stored secret (cloud account credentials, space secrets, "
        "app credentials, admission webhook secrets) under the first key of "
        "SPACEDOCK_SECRET_KEY, in batches, safe while the server runs; run it again to resume. "
        "Exit code 0: no secret needs any other key.",
    )
    reseal.add_argument(
        "--batch-size", type=int, default=100, help="rows per transaction (default 100)"
    )
    reseal.set_defaults(run=_reseal)

    export = commands.add_parser("export-schema", help="write schema.graphql from the code")
    export.add_argument("--check", action="store_true", help="fail if schema.graphql differs")
    export.set_defaults(run=_export_schema)

    demo = commands.add_parser(
        "demo",
        help="serve on SQLite beside a simulated fleet, seeded; prints the GraphiQL URL and a token",
        description="Runs the server beside simulated clusters, clouds and a host for CloudSpaces, "
        "all on 127.0.0.1, from a checkout with the test tools installed (`make demo`).",
    )
    demo.add_argument("--port", type=int, default=8000, help="the server's port (default 8000)")
    demo.add_argument(
        "--flap-period", type=float, default=45.0, help="seconds between the flaky cluster's flips"
    )
    demo.add_argument(
        "--folder", type=Path, help="keep the database and log here (default: a temporary folder)"
    )

    kubeconfig_token.add_command(commands)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "kubeconfig-token":
        return kubeconfig_token.run(args)
    if args.command == "demo":
        return _demo(args)
    from api import logs
    from api.settings import Settings, SettingsError
    from core.common import request_scope

    try:
        settings = Settings.from_env()
        logs.configure(settings.log_format, settings.log_level, settings.sdk_log_level)
        if args.command == "serve":  # each request begins its own scope
            return int(args.run(args, settings))
        # A command is one request: its log lines and audit events carry one id.
        with request_scope.begin():
            return int(args.run(args, settings))
    except SettingsError as error:
        print(f"spacedock: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
