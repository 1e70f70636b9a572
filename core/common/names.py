"""Shape checks for names that end up in Kubernetes or cloud APIs, and the rule every
string a client sends must pass.

Every pattern is applied with `fullmatch`: `re.match` with `$` accepts a trailing
newline, so "prod\n" passed beside "prod" and "dev\n" went to a cluster as a namespace.

One canonical form per name (issue 18): a name a person reads (a space, environment,
cloud account or custom role) is stored NFKC-normalised (`canonical`: a fullwidth ADMIN,
U+FF21..., is ADMIN) and told apart from the org's others by its `name_key`, the
canonical form case-folded, so `DEV` beside `dev` is a CONFLICT. What remains after NFKC
must be plain ASCII letters, digits and a few separators, so letters of other alphabets
that look alike (a dotted capital I, U+0130; a Cyrillic A) and invisible characters (a
zero-width space, U+200B) are INVALID. CloudSpace names and namespaces are DNS labels,
lowercase already.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from core.common.errors import Problems, UserError

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DISPLAY_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
CLOUD_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._()-]{0,253})")
# Custom roles are named after teams and after what an SSO issuer puts in its role claim
# (Keycloak client roles, Dex groups such as `acme:platform`).
ROLE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9 ._:/@-]{0,62}[A-Za-z0-9])?")

# Control characters (C0, DEL, C1) and lone surrogates: no name, id, URL or token has them,
# Postgres cannot store NUL, and a lone surrogate cannot be encoded at all. PEM bundles and
# JSON key files are text with lines, so there tab, CR and LF are allowed.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
# Input fields (by contract name) whose value is a document with lines; anything inside
# them (a service-account key file's private_key) may have lines too.
MULTILINE_FIELDS = frozenset(
    {
        "caCert",
        "clientCertificate",
        "clientKey",
        "serviceAccountJson",
        # An app's Helm values (YAML) and its Git SSH key and known_hosts.
        "values",
        "sshPrivateKey",
        "knownHosts",
    }
)
# No string a client sends is longer: PEM bundles, key files and tokens fit many times over.
MAX_TEXT_BYTES = 64 * 1024


def dns_label_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if len(value) > 63:
        return "must be at most 63 characters"
    if not DNS_LABEL.fullmatch(value):
        return (
            "must be a DNS-1123 label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def dns_1035_label_problem(value: str, max_length: int = 63) -> str | None:
    """A name that becomes a Service's (a DNS-1035 label: it starts with a letter), at most
    `max_length` characters so the names derived from it stay within their limits."""
    if not value:
        return "must not be empty"
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    if not DNS_1035_LABEL.fullmatch(value):
        return (
            "must be a DNS-1035 label: lowercase letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return None


def display_name_problem(value: str) -> str | None:
    if not value.strip():
        return "must not be empty"
    if not DISPLAY_NAME.fullmatch(value):
        return (
            "must be 1-63 characters of letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )
    return None


def role_name_problem(value: str) -> str | None:
    if not ROLE_NAME.fullmatch(value) or "  " in value:
        return (
            "must be 1-64 characters of letters A-Z, digits, single spaces and . _ : / @ -, "
            "starting and ending with a letter or digit (look-alike letters of other "
            "alphabets and invisible characters are refused)"
        )
    return None


def canonical(name: str) -> str:
    """The one form a name is stored in: NFKC (compatibility forms such as fullwidth
    letters become the plain ones), otherwise as typed."""
    return unicodedata.normalize("NFKC", name)


def name_key(name: str) -> str:
    """What two names of one kind must differ in to be told apart: their canonical forms,
    case-folded (`TOKMGR` and `tokmgr` are one name)."""
    return canonical(name).casefold()


class Named(Protocol):
    @property
    def name(self) -> str: ...


def cloud_name_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if not CLOUD_NAME.fullmatch(value):
        return "must be 1-255 characters of letters, digits, '.', '_', '-' or '()'"
    return None


async def check_new_name(
    problems: Problems,
    name: str,
    taken: Callable[[str], Awaitable[Named | None]],
    what: str,
    problem: Callable[[str], str | None] = display_name_problem,
) -> str:
    """A new name in its canonical form, which is what to store: its shape (`problem`),
    then whether `taken(name_key)` finds one the org already uses (CONFLICT)."""
    name = canonical(name)
    if (why := problem(name)) is not None:
        problems.add(["name"], f"name {why}")
    elif (existing := await taken(name_key(name))) is not None:
        told = "" if existing.name == name else " (names that differ only in case are one)"
        problems.add(["name"], f"{what} named {existing.name!r} already exists{told}", "CONFLICT")
    return name


def text_problem(value: str, multiline: bool = False) -> str | None:
    """Why `value` cannot be input text, as words to follow the field's name; None if it can."""
    if len(value) > MAX_TEXT_BYTES or len(value.encode("utf-8", "replace")) > MAX_TEXT_BYTES:
        return f"must be at most {MAX_TEXT_BYTES // 1024} KiB"
    if (CONTROL_BUT_LINES if multiline else CONTROL).search(value):
        allowed = " other than tab and line breaks" if multiline else ""
        return f"must not contain control characters{allowed}"
    return None


def text_errors(strings: Iterable[tuple[tuple[str, ...], str]]) -> list[UserError]:
    """INVALID for each (input path, string) that breaks the text rule; a string inside a
    multi-line field may have lines. The message names the field, never the value."""
    errors: list[UserError] = []
    for path, value in strings:
        named = [part for part in path if not part.isdigit()]
        multiline = any(part in MULTILINE_FIELDS for part in path)
        if (why := text_problem(value, multiline)) is not None:
            errors.append(UserError(path, f"{named[-1] if named else 'input'} {why}"))
    return errors
