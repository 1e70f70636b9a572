"""`spacedock space import-kubeconfig`: kubeconfig contexts registered as GENERIC spaces
of an existing org, with registerSpace's validation, each audited with the OS user."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from api.operator import operator_services, os_user

if TYPE_CHECKING:
    from api.settings import Settings
    from core.common.errors import UserError
    from core.spaces.kubeconfigs import ContextImport


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`space import-kubeconfig`, on the root parser's subcommands."""
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
