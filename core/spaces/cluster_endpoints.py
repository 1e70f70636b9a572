"""How a GENERIC cluster is reached: one spelling per API server, and a client key that
belongs to its certificate.

A server URL is canonicalised before anything else looks at it, so that the
uniqueness check, the deny list and the connection all see the same address:
one API server cannot be registered twice under spellings that reach it alike
(host case, IDNA, a trailing dot, the default port, legacy IPv4 and IPv4-mapped
IPv6 forms, dot segments, percent-encoding, empty path segments, `localhost` for
127.0.0.1). Paths stay case-sensitive. Spaces and control characters (escaped or
not), path parameters and escaped slashes are refused outright, since parsers
disagree on what they mean. The deny check is `providers.network.denied_address`,
the very one every connection makes.
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

from core.common.errors import Problems
from providers.network import denied_address, literal_address

MAX_SERVER_LENGTH = 2048
UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# What a path segment carries unescaped (RFC 3986 pchar, but for `;`, refused).
PATH_PLAIN = UNRESERVED | frozenset("!$&'()*+,=:@")
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
    """One spelling per path: every escape decoded and every character written the one way
    (plain when a path may carry it so, else %XX of its UTF-8 bytes, upper case), dot
    segments resolved, empty segments and a trailing slash dropped. Paths stay
    case-sensitive. What servers and proxies read in different ways is refused: path
    parameters (`;`, which Java servers strip), an escaped `/` and escaped spaces or
    control characters."""
    segments: list[str] = []
    for raw_segment in raw_path.split("/"):
        segment = "".join(_path_character(byte) for byte in _unescaped(raw_segment))
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    return "".join(f"/{segment}" for segment in segments)


def _unescaped(segment: str) -> bytes:
    """The bytes a path segment stands for, its %XX escapes decoded."""
    decoded = bytearray()
    position = 0
    for match in PERCENT_ESCAPE.finditer(segment):
        pair = match.group(1)
        if pair is None or not all(c in "0123456789abcdefABCDEF" for c in pair):
            raise ServerProblem("server has a broken percent-escape in its path")
        decoded += segment[position : match.start()].encode()
        decoded.append(int(pair, 16))
        position = match.end()
    decoded += segment[position:].encode()
    return bytes(decoded)


def _path_character(byte: int) -> str:
    character = chr(byte)
    if character in PATH_PLAIN:
        return character
    if character == ";":
        raise ServerProblem("server must not have path parameters (;) in its path")
    if character == "/":
        raise ServerProblem("server must not have an escaped slash (%2F) in its path")
    if byte <= 0x20 or byte == 0x7F:
        raise ServerProblem("server must not contain spaces or control characters")
    return f"%{byte:02X}"


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


def server_identity(server: str) -> str:
    """Who a canonical server URL reaches, for "one API server is one space": the URL
    itself (paths are case-sensitive), with `localhost` as the loopback address
    127.0.0.1 it names (RFC 6761; kind and k3s answer on it). Other names are told apart
    by spelling: what they resolve to can change."""
    prefix = "https://localhost"
    if server == prefix or server.startswith((f"{prefix}:", f"{prefix}/")):
        return "https://127.0.0.1" + server[len(prefix) :]
    return server


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
