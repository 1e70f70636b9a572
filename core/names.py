"""Shape checks for names that end up in Kubernetes or cloud APIs."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from core.errors import Problems

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DISPLAY_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
CLOUD_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._()-]{0,253})$")


def dns_label_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if len(value) > 63:
        return "must be at most 63 characters"
    if not DNS_LABEL.match(value):
        return (
            "must be a DNS-1123 label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def display_name_problem(value: str) -> str | None:
    if not value.strip():
        return "must not be empty"
    if not DISPLAY_NAME.match(value):
        return (
            "must be 1-63 characters of letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )
    return None


def cloud_name_problem(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if not CLOUD_NAME.match(value):
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
