"""The `spacedock` command: serve, create, list and revoke API tokens, import kubeconfigs,
re-seal secrets, export the schema, and the kubeconfig exec plugin (`kubeconfig-token`,
which kubectl runs often: it loads neither the settings nor the server's modules)."""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# A command group's own module (cli_tokens, cli_kubeconfigs, cli_secrets) imports the
# settings and the server's modules only once its command runs, as this one does.
from api import cli_kubeconfigs, cli_tokens, kubeconfig_token

if TYPE_CHECKING:
    from api.settings import Settings


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
    cli_tokens.add_command(commands)
    cli_kubeconfigs.add_command(commands)

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
    from api.settings import Settings
    from api.settings_values import SettingsError
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
