"""Shape checks for names that end up in Kubernetes or cloud APIs, and the rule every
string a client sends must pass.

Every pattern is applied with `fullmatch`: `re.match` with `$` accepts a trailing
newline, so "prod\n" passed beside "prod" and "dev\n" went to a cluster as a namespace.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable

from core.errors import Problems, UserError

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DISPLAY_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
CLOUD_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._()-]{0,253})")

# Control characters (C0, DEL, C1) and lone surrogates: no name, id, URL or token has them,
# Postgres cannot store NUL, and a lone surrogate cannot be encoded at all. PEM bundles and
# JSON key files are text with lines, so there tab, CR and LF are allowed.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
# Input fields (by contract name) whose value is a document with lines; anything inside
# them (a service-account key file's private_key) may have lines too.
MULTILINE_FIELDS = frozenset({"caCert", "clientCertificate", "clientKey", "serviceAccountJson"})
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


def display_name_problem(value: str) -> str | None:
    if not value.strip():
        return "must not be empty"
    if not DISPLAY_NAME.fullmatch(value):
        return (
            "must be 1-63 characters of letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )
    return None


def cloud_name_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if not CLOUD_NAME.fullmatch(value):
        return "must be 1-255 characters of letters, digits, '.', '_', '-' or '()'"
    return None


async def check_new_name(
    problems: Problems, name: str, taken: Callable[[], Awaitable[object]], what: str
) -> None:
    """A display name's shape, then whether `taken()` finds it already in use (CONFLICT)."""
    if (why := display_name_problem(name)) is not None:
        problems.add(["name"], f"name {why}")
    elif await taken():
        problems.add(["name"], f"{what} named {name!r} already exists", "CONFLICT")


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
