"""Our own error hierarchy at the provider boundary, with reasons people can tell apart.

Every failure to reach a cloud or a cluster becomes a `ProviderError` whose
`reason` starts with one of the reason words of the probe semantics (`DNS`,
`connection refused`, `TLS`, `401 unauthorized`, `403 forbidden`, `timeout`,
`HTTP 5xx`, `cluster access revoked`). `TemporaryError` marks failures that may
pass by themselves, with the soonest a retry is worth it when the failure says so (a
throttled cloud); `PermanentError` the others. The SDK error is chained as `__cause__`
and never put in the reason, so that no token or key can leak through a message.

`backoff_s` is the one retry formula: the loop kit, the reconciler and the cloud calls
each give it their first and longest waits.
"""

from __future__ import annotations

import asyncio
import math
import socket
import ssl
from collections.abc import Mapping

import aiohttp


class ProviderError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def backoff_s(attempt: int, first_s: float, longest_s: float) -> float:
    """The wait before retry number `attempt` (1: the first): `first_s`, doubling with each
    attempt, at most `longest_s`."""
    return float(min(longest_s, first_s * 2 ** max(0, attempt - 1)))


class TemporaryError(ProviderError):
    """A failure that may pass by itself (timeouts, refused connections, 5xx, throttling).
    `retry_after_s`: the soonest a retry is worth it, when the failure says (a cloud that
    throttled every attempt); None: the caller's own backoff decides (the loop kit's, the
    reconciler's, the next probe)."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


def retry_after_s(error: BaseException) -> float | None:
    """How long `error` says to wait before a retry; None when it does not say."""
    return error.retry_after_s if isinstance(error, TemporaryError) else None


class PermanentError(ProviderError):
    pass


class TooManyRequests(TemporaryError):
    """HTTP 429: the server is shedding load (an API server's priority and fairness) and
    says when to come back (`Retry-After`); the request itself was fine."""


# The longest `Retry-After` believed: a server that asks for more is retried after this.
LONGEST_RETRY_AFTER_S = 300.0


def retry_after_header(headers: Mapping[str, str] | None) -> float | None:
    """The wait a `Retry-After` header asks for, in seconds (at most LONGEST_RETRY_AFTER_S);
    None when there is none or it is not a number of seconds (the HTTP-date form is
    never sent by an API server)."""
    given = (headers or {}).get("Retry-After")
    if given is None:
        return None
    try:
        seconds = float(given.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds):
        return None
    return min(LONGEST_RETRY_AFTER_S, max(0.0, seconds))


class AccessRevoked(PermanentError):
    """The space's cloud account may no longer mint credentials for its cluster."""


UNEXPECTED_ANSWER = "unexpected answer from the API server"


class UnexpectedAnswer(PermanentError):
    """The API server answered something the API never sends: a malformed shape, a body
    that is not JSON, or one larger than we read."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{UNEXPECTED_ANSWER}: {what}")


def for_status(
    status: int, server_message: str = "", retry_after_s: float | None = None
) -> ProviderError:
    """The error for an HTTP status the API server answered with; `retry_after_s` is
    what its `Retry-After` asked for (a 429's)."""
    detail = f": {server_message}" if server_message else ""
    if status == 429:
        after = "" if retry_after_s is None else f", retry after {retry_after_s:g}s"
        return TooManyRequests(
            f"HTTP 429 from the API server (too many requests{after}){detail}", retry_after_s
        )
    if status == 401:
        return PermanentError(f"401 unauthorized: the cluster rejected the credential{detail}")
    if status == 403:
        return PermanentError(f"403 forbidden: the credential lacks permission{detail}")
    if status >= 500:
        return TemporaryError(f"HTTP {status} from the API server{detail}")
    if 300 <= status < 400:  # a redirect is an answer here, never a way elsewhere
        return PermanentError(
            f"HTTP {status} from the API server: redirects are not followed; "
            "register the server URL the cluster answers on"
        )
    return PermanentError(f"HTTP {status} from the API server{detail}")


def for_exception(error: BaseException, timeout_s: float | None = None) -> ProviderError:
    """Names a transport failure; the original is chained by the caller (`raise ... from`)."""
    if isinstance(error, ProviderError):
        return error
    if isinstance(error, (TimeoutError, asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        after = f" after {timeout_s:g}s" if timeout_s else ""
        return TemporaryError(f"timeout: no answer from the API server{after}")
    if isinstance(error, (aiohttp.ClientConnectorCertificateError, ssl.SSLError)):
        return PermanentError(
            "TLS: the API server's certificate is not signed by the configured CA "
            "(or the handshake failed); check caCert"
        )
    if isinstance(error, (aiohttp.ClientConnectorDNSError, socket.gaierror)):
        return TemporaryError("DNS: the API server's host name does not resolve")
    if isinstance(error, aiohttp.ClientConnectorError):
        if isinstance(error.os_error, ConnectionRefusedError):
            return TemporaryError("connection refused: nothing listens at the API server address")
        if isinstance(error.os_error, ssl.SSLError):
            return PermanentError("TLS: the handshake with the API server failed; check caCert")
        return TemporaryError(f"connection failed: {error.os_error.strerror or 'unreachable'}")
    if isinstance(error, ConnectionRefusedError):
        return TemporaryError("connection refused: nothing listens at the API server address")
    if isinstance(error, OSError) and error.strerror:  # the system's own words, no secrets
        return TemporaryError(f"connection failed: {error.strerror}")
    if isinstance(error, (aiohttp.ClientError, OSError)):
        return TemporaryError(f"connection failed: {type(error).__name__}")
    return PermanentError(f"unexpected failure: {type(error).__name__}")
