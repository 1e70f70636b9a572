"""The `spacedock` command: serve, mint API tokens, export the schema."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from api.settings import Settings, SettingsError


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from api.app import create_app

    app = create_app(settings)
    uvicorn.run(
        app,
        host=args.host or settings.host,
        port=args.port if args.port is not None else settings.port,
        log_level="info",
        ws="websockets-sansio",
        proxy_headers=False,
    )
    return 0


async def _create_token(settings: Settings, org: str, role: str) -> str:
    from api.app import build_services
    from core.rbac import Role
    from core.tokens import create_token

    services = build_services(settings)
    try:
        await services.database.migrate()
        async with services.unit() as unit:
            _, token = await create_token(unit, org, Role(role.upper()))
        return token
    finally:
        await services.database.dispose()


def _token(args: argparse.Namespace, settings: Settings) -> int:
    token = asyncio.run(_create_token(settings, args.org, args.role))
    print(f"Created a {args.role} token for org {args.org!r}. It is shown once; store it now.")
    print(token)
    return 0


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
    create.add_argument("--role", required=True, choices=["admin", "editor", "viewer"])
    create.set_defaults(run=_token)

    export = commands.add_parser("export-schema", help="write schema.graphql from the code")
    export.add_argument("--check", action="store_true", help="fail if schema.graphql differs")
    export.set_defaults(run=_export_schema)
    return root


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        return int(args.run(args, settings))
    except SettingsError as error:
        print(f"spacedock: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
