"""What an app delivers: a Git source (URL, ref, path) or a Helm source (repository or OCI
registry, chart, version, values), each checked the way Flux's CRDs and controllers would
refuse it, so a bad input is a userError naming its field rather than a FAILED revision.

A source is stored on each revision as JSON (`to_json` / `from_json`); the optional Git
credential is not part of it: it is sealed on the app (core.common.secrets) and only ever
leaves as the data of a Secret in the target.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

import yaml

from core.common.errors import Problems


class SourceKind(StrEnum):
    GIT = "GIT"
    HELM = "HELM"


DEFAULT_BRANCH = "main"
DEFAULT_PATH = "./"
DEFAULT_INTERVAL = "5m"
DEFAULT_VERSION = "*"
MAX_URL = 2048
# Flux's duration pattern (metav1.Duration as its CRDs constrain it).
DURATION = re.compile(r"([0-9]+(\.[0-9]+)?(ms|s|m|h))+")
# Git ref names (git check-ref-format, kept to what people use): no spaces, no "..".
REF_NAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._/+-]{0,254}")
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
SEMVER_RANGE = re.compile(r"[0-9A-Za-z.*xX^~<>=!|, +-]{1,255}")
PATH = re.compile(r"[A-Za-z0-9._/-]{1,1024}")
CHART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# Values are walked before anything expands them: YAML aliases can make a few bytes of text
# stand for billions of nodes.
MAX_VALUE_NODES = 20_000
MAX_DEPTH = 64


@dataclass(frozen=True)
class GitSource:
    url: str
    branch: str | None = None
    tag: str | None = None
    semver: str | None = None
    commit: str | None = None
    path: str = DEFAULT_PATH
    interval: str = DEFAULT_INTERVAL

    kind = SourceKind.GIT

    @property
    def ref(self) -> dict[str, str]:
        """GitRepository `spec.ref`; the default branch when none is named."""
        named = {
            key: value
            for key, value in (
                ("branch", self.branch),
                ("tag", self.tag),
                ("semver", self.semver),
                ("commit", self.commit),
            )
            if value is not None
        }
        return named or {"branch": DEFAULT_BRANCH}


@dataclass(frozen=True)
class HelmSource:
    repository_url: str
    chart: str
    version: str = DEFAULT_VERSION
    values: str | None = None
    interval: str = DEFAULT_INTERVAL

    kind = SourceKind.HELM

    @property
    def oci(self) -> bool:
        return self.repository_url.startswith("oci://")

    def values_object(self) -> dict[str, Any]:
        """The values as HelmRelease `spec.values` (checked when the source was made)."""
        loaded = yaml.safe_load(self.values) if self.values else None
        return loaded if isinstance(loaded, dict) else {}


Source = GitSource | HelmSource


@dataclass(frozen=True)
class GitCredential:
    """A Git credential as its Secret's data: a token, a user and password, or an SSH key."""

    data: Mapping[str, str]


def to_json(source: Source) -> str:
    return json.dumps({"kind": source.kind.value, **asdict(source)}, sort_keys=True)


def from_json(text: str) -> Source:
    fields = json.loads(text)
    kind = fields.pop("kind")
    return GitSource(**fields) if kind == SourceKind.GIT else HelmSource(**fields)


def _url_problem(url: str, schemes: tuple[str, ...]) -> str | None:
    if len(url) > MAX_URL:
        return f"must be at most {MAX_URL} characters"
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.hostname:
        return f"must be a {' or '.join(s + '://' for s in schemes)} URL with a host"
    if parts.password is not None or (parts.username and parts.scheme != "ssh"):
        return "must not carry credentials; give them in credential"
    if any(c.isspace() for c in url):
        return "must not contain spaces"
    return None


def _check_interval(problems: Problems, field: str, interval: str) -> None:
    if not DURATION.fullmatch(interval):
        problems.add([field], f"{field} must be a duration such as 30s, 5m or 1h")


def check_git(problems: Problems, source: GitSource) -> None:
    """Every problem of a Git source, on the fields of GitSourceInput under `problems`."""
    if (why := _url_problem(source.url, ("https", "http", "ssh"))) is not None:
        problems.add(["url"], f"url {why}")
    refs = [
        name for name in ("branch", "tag", "semver", "commit") if getattr(source, name) is not None
    ]
    if len(refs) > 1 and set(refs) != {"branch", "commit"}:
        problems.add(
            [refs[1]],
            f"give one of branch, tag, semver or commit (or a branch and a commit), not {' and '.join(refs)}",
        )
    for name in ("branch", "tag"):
        value = getattr(source, name)
        if value is not None and (
            not REF_NAME.fullmatch(value) or ".." in value or value.endswith((".lock", "/"))
        ):
            problems.add(
                [name],
                f"{name} must be a Git ref name (letters, digits, '.', '_', '/', '+', '-'; no '..')",
            )
    if source.semver is not None and not SEMVER_RANGE.fullmatch(source.semver):
        problems.add(["semver"], "semver must be a semver range such as >=1.0.0 <2.0.0 or 1.x")
    if source.commit is not None and not COMMIT.fullmatch(source.commit):
        problems.add(["commit"], "commit must be a full commit SHA (40 or 64 lowercase hex digits)")
    if (
        not PATH.fullmatch(source.path)
        or ".." in source.path.split("/")
        or source.path.startswith("/")
    ):
        problems.add(
            ["path"], "path must be a relative path in the repository, such as ./deploy (no '..')"
        )
    _check_interval(problems, "interval", source.interval)


def check_helm(problems: Problems, source: HelmSource) -> None:
    """Every problem of a Helm source, on the fields of HelmSourceInput under `problems`."""
    if (why := _url_problem(source.repository_url, ("https", "http", "oci"))) is not None:
        problems.add(["repositoryUrl"], f"repositoryUrl {why}")
    if not CHART.fullmatch(source.chart):
        problems.add(["chart"], "chart must be a chart name: letters, digits, '.', '_' and '-'")
    if not SEMVER_RANGE.fullmatch(source.version):
        problems.add(["version"], "version must be a chart version or a semver range such as 1.2.x")
    if source.values is not None and (why := values_problem(source.values)) is not None:
        problems.add(["values"], f"values {why}")
    _check_interval(problems, "interval", source.interval)


def values_problem(text: str) -> str | None:
    """Why Helm values given as YAML cannot be used; None when they can."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return f"are not YAML{where}"
    except RecursionError:  # "[[[[…" deeper than the parser goes
        return f"are nested deeper than {MAX_DEPTH} levels"
    if loaded is None:
        return None
    if not isinstance(loaded, dict):
        return "must be a YAML mapping (key: value), as a values.yaml file is"
    return _plain(loaded, [0], 0)


def _plain(value: Any, seen: list[int], depth: int) -> str | None:
    """Whether a loaded value is JSON's kind of data, walked without expanding aliases
    beyond MAX_VALUE_NODES."""
    seen[0] += 1
    if seen[0] > MAX_VALUE_NODES:
        return f"have more than {MAX_VALUE_NODES} entries (counting what YAML aliases repeat)"
    if depth > MAX_DEPTH:
        return f"are nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str):
                return f"must have text keys (found {key!r}); quote it"
            if (why := _plain(inner, seen, depth + 1)) is not None:
                return why
    elif isinstance(value, list):
        for inner in value:
            if (why := _plain(inner, seen, depth + 1)) is not None:
                return why
    elif not (value is None or isinstance(value, (str, int, float, bool))):
        return f"must hold only text, numbers, booleans, lists and maps (found a {type(value).__name__}); quote it"
    return None


def git_credential(
    problems: Problems,
    url: str,
    *,
    token: str | None,
    username: str | None,
    password: str | None,
    ssh_private_key: str | None,
    known_hosts: str | None,
) -> GitCredential | None:
    """The credential given for a Git URL as its Secret's data (Flux's key names), or the
    problems with it, on the fields of GitCredentialInput under `problems`."""
    ssh = url.startswith("ssh://")
    given = [
        kind
        for kind, present in (
            ("token", token is not None),
            ("password", username is not None or password is not None),
            ("sshPrivateKey", ssh_private_key is not None),
        )
        if present
    ]
    if len(given) != 1:
        problems.add([], "give one of token, username and password, or sshPrivateKey")
        return None
    if ssh and given != ["sshPrivateKey"]:
        problems.add([given[0]], "an ssh:// URL takes sshPrivateKey (with knownHosts)")
        return None
    if not ssh and given == ["sshPrivateKey"]:
        problems.add(["sshPrivateKey"], "sshPrivateKey goes with an ssh:// URL")
        return None
    if token is not None:
        if not token:
            problems.add(["token"], "token must not be empty")
        return GitCredential({"bearerToken": token})
    if ssh_private_key is not None:
        if "PRIVATE KEY" not in ssh_private_key:
            problems.add(
                ["sshPrivateKey"], "sshPrivateKey must be a private key in PEM or OpenSSH form"
            )
        if not known_hosts:
            problems.add(
                ["knownHosts"], "knownHosts is required with an SSH key (ssh-keyscan gives it)"
            )
        return GitCredential({"identity": ssh_private_key, "known_hosts": known_hosts or ""})
    if not username or not password:
        problems.add(
            ["username" if not username else "password"], "give both username and password"
        )
    return GitCredential({"username": username or "", "password": password or ""})
