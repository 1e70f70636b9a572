"""Turning a kubeconfig people already have into GENERIC space registrations.

Most clusters someone can reach today are in a kubeconfig, so importing one is
the quickest real start. A context becomes a `RegisterSpaceRequest` that goes
through the same `core.spaces.lifecycle.register` as the GraphQL mutation, or a refusal
that says why in kubeconfig terms. Nothing here touches the database or the
network; referenced files are read through the caller's `Reader`, which resolves
paths the way kubectl does (relative to the kubeconfig's directory).
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from core.common.names import CLOUD_NAME, DISPLAY_NAME
from core.spaces.lifecycle import RegisterSpaceRequest

Reader = Callable[[str], str]
DISPLAY_NAME_MAX = 63
CLOUD_NAME_MAX = 255
NOT_DISPLAY_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9._-]+")
NOT_CLOUD_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9._()-]+")
NON_ALPHANUMERIC_EDGES = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


class KubeconfigError(Exception):
    """The kubeconfig as a whole cannot be used (unreadable, not a kubeconfig, no such context)."""


class Refused(Exception):
    """One context cannot become a space; the message explains why and what to do."""


@dataclass(frozen=True)
class ContextImport:
    """What one context turns into: a registration request, or the reason it cannot."""

    context: str
    request: RegisterSpaceRequest | None
    refusal: str | None = None


@dataclass(frozen=True)
class Source:
    """Where a kubeconfig came from and where it goes: its path (for messages and the kubectl
    advice), how to read the files it names, and the org that will own the spaces."""

    path: str
    read: Reader
    org: str


def parse(text: str, source: str) -> dict[str, Any]:
    """The kubeconfig in `text`; errors name the place, never quote the content (it holds secrets)."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise KubeconfigError(f"{source} is not valid YAML{where}") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("contexts"), list):
        raise KubeconfigError(f"{source} is not a kubeconfig: it has no list of contexts")
    return loaded


def _named(kubeconfig: Mapping[str, Any], section: str, item: str) -> dict[str, dict[str, Any]]:
    """A kubeconfig list such as `clusters` as {name: body}, e.g. {"kind-kind": {"server": ...}}."""
    entries = kubeconfig.get(section) or []
    named: dict[str, dict[str, Any]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            body = entry.get(item)
            named[entry["name"]] = body if isinstance(body, dict) else {}
    return named


def choose_contexts(
    kubeconfig: Mapping[str, Any], source: str, context: str | None, all_contexts: bool
) -> list[str]:
    """The contexts to import: all of them, the one asked for, or current-context."""
    names = list(_named(kubeconfig, "contexts", "context"))
    listing = ", ".join(names) if names else "none"
    if all_contexts:
        if not names:
            raise KubeconfigError(f"{source} has no contexts")
        return names
    if context is not None:
        if context not in names:
            raise KubeconfigError(
                f"{source} has no context {context!r}; its contexts are: {listing}"
            )
        return [context]
    current = kubeconfig.get("current-context")
    if not current:
        raise KubeconfigError(
            f"{source} has no current-context; pass --context NAME (one of: {listing}) "
            "or --all-contexts"
        )
    if current not in names:
        raise KubeconfigError(
            f"{source} names current-context {current!r}, which it does not define"
        )
    return [str(current)]


def _sanitized(value: str, invalid: re.Pattern[str], limit: int) -> str:
    cleaned = re.sub(r"-{2,}", "-", invalid.sub("-", value))
    cleaned = NON_ALPHANUMERIC_EDGES.sub("", cleaned)[:limit]
    return NON_ALPHANUMERIC_EDGES.sub("", cleaned)


def space_name(context: str) -> str:
    """A display name from a context name: `arn:aws:eks:…:cluster/prod` -> `arn-aws-eks-…-cluster-prod`."""
    name = _sanitized(context, NOT_DISPLAY_NAME_CHARACTER, DISPLAY_NAME_MAX)
    if not DISPLAY_NAME.fullmatch(name):
        raise Refused(
            f"the context name {context!r} has no letters or digits to name a space; pass --name"
        )
    return name


def _cluster_name(cluster: str) -> str:
    name = _sanitized(cluster, NOT_CLOUD_NAME_CHARACTER, CLOUD_NAME_MAX)
    return name if CLOUD_NAME.fullmatch(name) else "kubernetes"


def _decoded(value: Any, what: str) -> str:
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (binascii.Error, ValueError):
        raise Refused(f"{what} is not base64-encoded PEM") from None


def _file(read: Reader, path: Any, what: str) -> str:
    try:
        return read(str(path))
    except OSError as error:
        raise Refused(f"cannot read the {what} file {path}: {error.strerror or error}") from None


def _inline_or_file(body: Mapping[str, Any], key: str, read: Reader, owner: str) -> str | None:
    """`key-data` (base64) or `key` (a file path), as kubectl reads them; e.g. client-key-data."""
    if body.get(f"{key}-data"):
        return _decoded(body[f"{key}-data"], f"{owner}'s {key}-data")
    if body.get(key):
        return _file(read, body[key], f"{owner}'s {key}")
    return None


def service_account_recipe(source: Source, context: str, cluster: str) -> str:
    """kubectl commands that give spacedock a credential it can keep: a ServiceAccount token."""
    suffix = _sanitized(context, NOT_DISPLAY_NAME_CHARACTER, DISPLAY_NAME_MAX - len("spacedock-"))
    user = f"spacedock-{suffix}" if suffix else "spacedock"
    path = shlex.quote(source.path)
    kubectl = f"kubectl --kubeconfig {path}"
    on_cluster = f"{kubectl} --context {shlex.quote(context)}"
    return "\n".join(
        [
            "Create a ServiceAccount token for spacedock and import a context that uses it:",
            f"  {on_cluster} -n kube-system create serviceaccount spacedock",
            f"  {on_cluster} create clusterrolebinding spacedock --clusterrole=cluster-admin "
            "--serviceaccount=kube-system:spacedock",
            f"  TOKEN=$({on_cluster} -n kube-system create token spacedock --duration=8760h)",
            f'  {kubectl} config set-credentials {user} --token="$TOKEN"',
            f"  {kubectl} config set-context {user} --cluster={shlex.quote(cluster)} --user={user}",
            f"  spacedock space import-kubeconfig {path} --context {user} "
            f"--org {shlex.quote(source.org)}",
        ]
    )


def _credential(
    source: Source, user_name: str, user: Mapping[str, Any], context: str, cluster: str
) -> dict[str, str]:
    owner = f"user {user_name!r}"
    if user.get("exec") or user.get("auth-provider"):
        if user.get("exec"):
            command = user["exec"].get("command", "?") if isinstance(user["exec"], dict) else "?"
            plugin = f"an exec plugin ({command})"
        else:
            provider = user["auth-provider"]
            name = provider.get("name", "?") if isinstance(provider, dict) else "?"
            plugin = f"an auth-provider ({name})"
        raise Refused(
            f"{owner} gets its credential from {plugin}, which runs on your machine with your "
            "login. spacedock needs a credential it can store and use unattended, so it never "
            "runs plugins.\n" + service_account_recipe(source, context, cluster)
        )
    credential: dict[str, str] = {}
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = _file(source.read, user["tokenFile"], f"{owner}'s tokenFile")
    if token:
        credential["serviceAccountToken"] = str(token).strip()
    certificate = _inline_or_file(user, "client-certificate", source.read, owner)
    key = _inline_or_file(user, "client-key", source.read, owner)
    if certificate is not None:
        credential["clientCertificate"] = certificate
    if key is not None:
        credential["clientKey"] = key
    if not credential:
        basic = " (basic auth is not supported)" if user.get("username") else ""
        raise Refused(
            f"{owner} has no token, tokenFile or client certificate{basic}.\n"
            + service_account_recipe(source, context, cluster)
        )
    return credential


def _cluster(cluster_name: str, cluster: Mapping[str, Any], read: Reader) -> dict[str, str]:
    owner = f"cluster {cluster_name!r}"
    if not cluster.get("server"):
        raise Refused(f"{owner} has no server URL")
    if cluster.get("insecure-skip-tls-verify"):
        raise Refused(
            f"{owner} sets insecure-skip-tls-verify. spacedock verifies every API server against "
            "its CA; put the cluster's CA in certificate-authority-data and remove "
            "insecure-skip-tls-verify"
        )
    for unsupported, why in (
        ("proxy-url", "spacedock connects to the server URL directly"),
        ("tls-server-name", "the API server's certificate must match the server URL"),
    ):
        if cluster.get(unsupported):
            raise Refused(f"{owner} sets {unsupported}, which spacedock does not support: {why}")
    ca = _inline_or_file(cluster, "certificate-authority", read, owner)
    if ca is None:
        raise Refused(
            f"{owner} has no certificate-authority-data or certificate-authority; spacedock needs "
            "the cluster's CA to verify the API server"
        )
    return {"server": str(cluster["server"]), "caCert": ca}


def request_for(
    kubeconfig: Mapping[str, Any], context: str, source: Source, name: str | None = None
) -> RegisterSpaceRequest:
    """The registration for one context, or `Refused` with the reason in kubeconfig terms."""
    body = _named(kubeconfig, "contexts", "context")[context]
    cluster_name, user_name = body.get("cluster"), body.get("user")
    clusters, users = _named(kubeconfig, "clusters", "cluster"), _named(kubeconfig, "users", "user")
    if not isinstance(cluster_name, str) or cluster_name not in clusters:
        raise Refused(
            f"the context names cluster {cluster_name!r}, which the kubeconfig does not define"
        )
    if not isinstance(user_name, str) or user_name not in users:
        raise Refused(f"the context names user {user_name!r}, which the kubeconfig does not define")
    config = _cluster(cluster_name, clusters[cluster_name], source.read)
    config.update(_credential(source, user_name, users[user_name], context, cluster_name))
    return RegisterSpaceRequest(
        name=name if name is not None else space_name(context),
        provider="GENERIC",
        space_type="KUBERNETES",
        cloud_account_id=None,
        config={"clusterName": _cluster_name(cluster_name), **config},
        synthetic=False,
    )


def imports(
    kubeconfig: Mapping[str, Any], contexts: list[str], source: Source, name: str | None = None
) -> list[ContextImport]:
    """Every chosen context as a request or a refusal; `name` overrides a single context's name."""
    planned = []
    for context in contexts:
        try:
            planned.append(ContextImport(context, request_for(kubeconfig, context, source, name)))
        except Refused as refused:
            planned.append(ContextImport(context, None, str(refused)))
    return planned
