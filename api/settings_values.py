"""How a setting's value is read and refused: a field read from the variable it names,
comma-separated lists, origins, base URLs and CA files checked, and pydantic's errors in
the words of the variable they are about. Each group of settings (api.settings and the
settings_* modules beside it) reads its values through these."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError
from strawberry.http.websocket_origin import normalize_origin


class SettingsError(ValueError):
    """A setting has a value spacedock cannot use; the message names it."""


def setting(default: Any, name: str, greater_than: float | None = None) -> Any:
    """A field read from the variable `name`; numbers must be above `greater_than`."""
    return Field(default, validation_alias=name, gt=greater_than)


def listed(raw: Any) -> Any:
    """A comma-separated value's parts, blanks dropped (values given in code pass as they are)."""
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


def origin(given: str) -> str:
    """A browser origin, written as browsers send it (lowercase, no default port)."""
    parts = urlsplit(given)
    written = normalize_origin(given)
    if (
        written is None
        or parts.scheme not in ("http", "https")
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username
    ):
        raise ValueError(
            "must be comma-separated origins such as http://localhost:5173 "
            f"(scheme://host[:port], no path), got {given!r}"
        )
    return written


def address(url: str | None, schemes: tuple[str, ...]) -> str | None:
    """A base URL, without its trailing slash; ValueError saying what is wrong with it."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.hostname:
        raise ValueError(f"must be a {' or '.join(f'{s}://' for s in schemes)} URL, got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"must have no query, fragment or user information, got {url!r}")
    return url.rstrip("/")


def pem_of(path: str) -> str:
    """The PEM certificates in a file; ValueError saying why it cannot be used."""
    try:
        text = Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(
            f"cannot be read ({path}): {getattr(error, 'strerror', None) or error}"
        ) from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError(f"must name a PEM file of CA certificates; {path} holds none")
    return text


# Pydantic's error kinds, in the words the variables' errors use.
_WORDS = {
    "float_parsing": "must be a number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "greater_than": "must be greater than {gt:g}",
}


def refusal(error: ValidationError) -> SettingsError:
    """The first problem, naming its variable."""
    problem = error.errors()[0]
    name = ".".join(str(part) for part in problem["loc"])
    if problem["type"] == "value_error":
        said = str(problem["ctx"]["error"])
        return SettingsError(f"{name} {said}" if name else said)
    words = _WORDS.get(problem["type"], problem["msg"]).format(**problem.get("ctx", {}))
    return SettingsError(f"{name} {words}, got {problem['input']!r}")
