"""`spacedock kubeconfig-token`: the exec credential plugin of a kubeconfig downloaded with
`?credential=exec`. kubectl runs it whenever it needs a token for the vCluster (none yet,
the last one expired, or refused); it asks spacedock for one with the person's own API
token and prints a client.authentication.k8s.io/v1 ExecCredential with its
`expirationTimestamp`.

The API token is read, in this order, from `--token-file`, SPACEDOCK_TOKEN, or the file
SPACEDOCK_TOKEN_FILE names (default ~/.config/spacedock/token): never from the kubeconfig
unless the person put the file's path there. Only the standard library runs here, so
kubectl does not wait on imports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

TOKEN_ENV = "SPACEDOCK_TOKEN"
TOKEN_FILE_ENV = "SPACEDOCK_TOKEN_FILE"
DEFAULT_TOKEN_FILE = "~/.config/spacedock/token"
TIMEOUT_S = 30.0


class NoCredential(Exception):
    """Why no token can be had; the message says what to do."""


def api_token(token_file: str | None) -> str:
    """The person's spacedock API token, from where they keep it."""
    if token_file is None and os.environ.get(TOKEN_ENV, "").strip():
        return os.environ[TOKEN_ENV].strip()
    path = Path(token_file or os.environ.get(TOKEN_FILE_ENV) or DEFAULT_TOKEN_FILE).expanduser()
    try:
        token = path.read_text().strip()
    except OSError as error:
        raise NoCredential(
            f"no spacedock API token: cannot read {path} ({error.strerror or error}); set "
            f"{TOKEN_ENV}, or put the token in {DEFAULT_TOKEN_FILE} (or the file "
            f"{TOKEN_FILE_ENV} names)"
        ) from None
    if not token:
        raise NoCredential(f"no spacedock API token: {path} is empty")
    return token


def _refusal(status: int, body: bytes) -> str:
    """What spacedock said when it refused (its GraphQL-shaped error), or the status."""
    try:
        said = json.loads(body)["errors"][0]["message"]
    except (ValueError, LookupError, TypeError):
        return f"HTTP {status}"
    return f"HTTP {status}: {said}"


def exec_credential(server: str, cloud_space: str, vcluster: str, token: str) -> str:
    """The ExecCredential JSON spacedock gives for this vCluster."""
    url = (
        f"{server.rstrip('/')}/api/v1/cloudspaces/{quote(cloud_space, safe='')}"
        f"/vclusters/{quote(vcluster, safe='')}/credential"
    )
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            body = answer.read()
    except urllib.error.HTTPError as refused:
        raise NoCredential(f"spacedock refused: {_refusal(refused.code, refused.read())}") from None
    except (urllib.error.URLError, OSError) as failed:
        reason = getattr(failed, "reason", failed)
        raise NoCredential(f"cannot reach spacedock at {server}: {reason}") from None
    try:
        credential = json.loads(body)
        ok = credential["kind"] == "ExecCredential" and bool(credential["status"]["token"])
    except (ValueError, LookupError, TypeError):
        ok = False
    if not ok:
        raise NoCredential(f"{server} answered something that is no ExecCredential")
    return json.dumps(credential)


def run(args: argparse.Namespace) -> int:
    try:
        token = api_token(args.token_file)
        print(exec_credential(args.server, args.cloud_space, args.vcluster, token))
    except NoCredential as missing:
        print(f"spacedock kubeconfig-token: {missing}", file=sys.stderr)
        return 1
    return 0


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser(
        "kubeconfig-token",
        help="print an ExecCredential for a vCluster (kubectl's exec plugin)",
        description="Run by kubectl for kubeconfigs downloaded with ?credential=exec: prints a "
        "client.authentication.k8s.io/v1 ExecCredential with a fresh token of the vCluster, "
        f"asked of spacedock with your API token ({TOKEN_ENV}, --token-file, or "
        f"{DEFAULT_TOKEN_FILE}).",
    )
    command.add_argument("--server", required=True, help="spacedock's address, https://…")
    command.add_argument("--cloud-space", required=True, help="the CloudSpace's id (cs_…)")
    command.add_argument("--vcluster", required=True, help="the vCluster's name")
    command.add_argument("--token-file", help="the file holding your spacedock API token")
