"""How a GENERIC cluster is reached: one spelling per API server, and a client key that
belongs to its certificate.

A server URL is canonicalised before anything else looks at it, so that the
uniqueness check, the deny list and the connection all see the same address:
one API server cannot be registered twice under spellings that reach it alike
(host case, IDNA, a trailing dot, the default port, legacy IPv4 and IPv4-mapped
IPv6 forms, dot segments, percent-encoding, empty path segments). Spaces and
control characters are refused outright, since parsers disagree on where they
end a URL. The deny check is `providers.network.denied_address`, the very one
every connection makes.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Any
from urllib.parse import unquote, urlsplit

import idna
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from core.errors import Problems
from providers.network import denied_address, literal_address

MAX_SERVER_LENGTH = 2048
UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
PERCENT_ESCAPE = re.compile(r"%(..)?")
HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")


class ServerProblem(ValueError):
    """Why a server URL cannot be registered, in words for the user."""


def _has_control_or_space(text: str) -> bool:
    return any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text)


def _host(raw_host: str, bracketed: bool) -> str:
    """The host as connections will use it: an IPv4 address in dotted form, a bracketed
    compressed IPv6 address, or a lowercase ASCII (IDNA) name without a trailing dot."""
    if bracketed:
        address, _, zone = raw_host.partition("%")
        if zone:
            raise ServerProblem("server must not name a network interface (an IPv6 zone)")
        try:
            ipv6 = ipaddress.IPv6Address(address)
        except ValueError:
            raise ServerProblem("server has a malformed IPv6 address") from None
        return str(ipv6.ipv4_mapped) if ipv6.ipv4_mapped is not None else f"[{ipv6.compressed}]"
    host = unquote(raw_host, errors="strict") if "%" in raw_host else raw_host
    if _has_control_or_space(host):
        raise ServerProblem("server must not contain spaces or control characters")
    literal = literal_address(host)
    if isinstance(literal, ipaddress.IPv4Address):
        return str(literal)
    name = host[:-1] if host.endswith(".") else host
    try:
        labels = [
            label.lower() if label.isascii() else idna.encode(label, uts46=True).decode()
            for label in name.split(".")
        ]
    except idna.IDNAError:
        raise ServerProblem("server has a host name that is not valid IDNA") from None
    if not all(HOST_NAME.fullmatch(label) for label in labels) or len(name) > 253:
        raise ServerProblem("server has a malformed host name")
    return ".".join(labels)


def _path(raw_path: str) -> str:
    """RFC 3986 normalisation: unreserved characters unescaped, escapes in upper case,
    dot segments resolved, empty segments and a trailing slash dropped."""

    def unescape(match: re.Match[str]) -> str:
        pair = match.group(1)
        if pair is None or not all(c in "0123456789abcdefABCDEF" for c in pair):
            raise ServerProblem("server has a broken percent-escape in its path")
        character = chr(int(pair, 16))
        return character if character in UNRESERVED else f"%{pair.upper()}"

    segments: list[str] = []
    for segment in PERCENT_ESCAPE.sub(unescape, raw_path).split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    return "".join(f"/{segment}" for segment in segments)


def canonical_server(server: str, deny: tuple[Any, ...]) -> str:
    """The one spelling of an API server URL; ServerProblem says why there is none."""
    if len(server) > MAX_SERVER_LENGTH:
        raise ServerProblem(f"server is longer than {MAX_SERVER_LENGTH} characters")
    if _has_control_or_space(server):
        raise ServerProblem("server must not contain spaces or control characters")
    parts = urlsplit(server)
    if parts.scheme != "https" or not parts.hostname:
        raise ServerProblem("server must be an https:// URL of the API server")
    if "@" in parts.netloc or "?" in server or "#" in server:
        raise ServerProblem("server must not carry credentials, a query or a fragment")
    try:
        port = parts.port
    except ValueError:  # urlsplit checks the port only when it is read
        port = 0
    if port == 0:
        raise ServerProblem("server has a port outside 1-65535")
    bracketed = parts.netloc.startswith("[")
    raw_host = parts.netloc[1 : parts.netloc.index("]")] if bracketed else parts.hostname
    if (why := denied_address(raw_host, deny)) is not None:
        raise ServerProblem(f"server is not allowed, {why}")
    host = _host(raw_host, bracketed)
    if (why := denied_address(host, deny)) is not None:  # a spelling only decoding revealed
        raise ServerProblem(f"server is not allowed, {why}")
    netloc = host if port in (None, 443) else f"{host}:{port}"
    return f"https://{netloc}{_path(parts.path)}"


def check_server(problems: Problems, server: str, deny: tuple[Any, ...]) -> str | None:
    """The canonical server URL, or None with the reason added to `problems`."""
    try:
        return canonical_server(server, deny)
    except ServerProblem as problem:
        problems.add(["config", "server"], str(problem))
        return None


def check_client_pair(problems: Problems, certificate_pem: str, key_pem: str) -> None:
    """Adds a problem on clientKey when it is not the private half of the certificate's
    public key. Either one that cannot be read is reported where it is parsed."""
    try:
        certificate = x509.load_pem_x509_certificate(certificate_pem.encode())
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError):
        return
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if certificate.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        problems.add(
            ["config", "clientKey"],
            "clientKey does not belong to clientCertificate (their public keys differ)",
        )
