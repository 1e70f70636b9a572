"""kubernetes-asyncio clients built from a cluster credential, and the namespace calls on them.

A client is built in memory for one call scope and closed after it: it never
comes from, or changes, the SDK's global default `Configuration`. The SDK and
`ssl` read the CA and a client certificate only from files, so they are written
to a private temporary directory (0700, files 0600; in /dev/shm where there is
one), read while the TLS context is built, and deleted before the client sends
anything.

The SDK's own aiohttp session is swapped for an `OutboundSession`: no proxy
lookups, no redirects, the deny-list resolver for every host (IP literals
included), and a bound on every response body. Answers are read and decoded
by us, inside the call's timeout: a body past a quarter MiB is decoded in a
worker thread by the pure-Python JSON scanner, which yields the interpreter to
the event loop as it goes (the C scanner holds it for the whole body: ~60 ms
for 4 MiB). Every answer is checked for the shape we use, so whatever a
cluster sends becomes a `ProviderError` whose reason uses the words of
`providers.errors`; the SDK exception is chained, never quoted, since its text
carries response headers.

Namespaces are listed in chunks (`limit` and `continue`, as kubectl lists), so a
cluster with thousands answers in bounded pieces, and reading stops past what the
caller may take. An API server shedding load answers 429 with `Retry-After`: the
call waits that long and tries again while its time allows (as client-go does), and
otherwise fails as a temporary error carrying the wait.
"""

from __future__ import annotations

import asyncio
import json
import json.decoder
import json.scanner
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, V1Namespace, V1ObjectMeta
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from providers.cluster_credentials import ClusterCredentials
from providers.errors import (
    PermanentError,
    ProviderError,
    TooManyRequests,
    UnexpectedAnswer,
    for_exception,
    for_status,
    retry_after_header,
)
from providers.network import (
    DEFAULT_MAX_BODY_BYTES,
    IPNetwork,
    OutboundSession,
    denied_address,
    private_files,
    server_message,
    tls_context,
)

DEFAULT_TIMEOUT_S = 10.0
# kubernetes-asyncio reads up to this much per chunk; kept when its session is replaced.
READ_BUFFER_BYTES = 2**21
# Bodies up to this size decode on the event loop (well under a millisecond).
DECODE_ON_LOOP_BYTES = 256 * 1024
# A namespace name is a DNS label; anything else did not come from an API server.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_TEXT_LIMIT = 317  # a label key (253 + "/" + 63) is the longest label text
# Namespaces per list request (kubectl's chunk size).
PAGE_SIZE = 500
# An API server's continue token is base64 of a short JSON key; anything longer is not one.
CONTINUE_TOKEN_LIMIT = 4096
# Tries of one request an API server answers 429, while the call's time allows.
THROTTLED_TRIES = 4

T = TypeVar("T")


class AlreadyExists(PermanentError):
    """The API server answered 409: an object of that name exists."""


@dataclass(frozen=True)
class ClusterNamespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    created_at: datetime | None = None


async def build_client(
    credentials: ClusterCredentials,
    deny: tuple[IPNetwork, ...] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> ApiClient:
    """An ApiClient for the credential's cluster; no file of it remains once this returns.

    The caller closes it (or uses `cluster_api`, which does). Raises PermanentError
    (TLS) for a CA or client certificate that cannot be loaded."""
    configuration = Configuration(host=credentials.server.rstrip("/"))
    if credentials.token is not None:
        configuration.api_key = {"BearerToken": credentials.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    try:
        tls = tls_context(credentials)
        with private_files(ca=credentials.ca_pem) as paths:
            # ApiClient.__init__ builds a context of its own from the CA file (without
            # one, from the whole system store: 17 ms); its session is replaced below.
            configuration.ssl_ca_cert = paths["ca"]
            client = ApiClient(configuration)
    except (ssl.SSLError, ValueError) as unusable:
        raise PermanentError(
            "TLS: the cluster's CA or client certificate cannot be loaded; check caCert"
        ) from unusable
    configuration.ssl_ca_cert = None
    await client.rest_client.pool_manager.close()  # it never sent a byte
    # The SDK calls only `request` and `close` on it, which an OutboundSession has.
    client.rest_client.pool_manager = OutboundSession(  # type: ignore[assignment]
        deny,
        max_body_bytes=max_body_bytes,
        ssl_context=tls,
        connection_limit=configuration.connection_pool_maxsize,
        read_bufsize=READ_BUFFER_BYTES,
    )
    return client


def translate(error: BaseException, timeout_s: float) -> ProviderError:
    """Our error for whatever a cluster call raised."""
    if isinstance(error, ApiException) and isinstance(error.status, int) and error.status > 0:
        return for_answer(error.status, error.body, error.headers)
    if isinstance(error, (ApiException, aiohttp.ClientError, OSError, TimeoutError)):
        return for_exception(error, timeout_s)
    # The SDK's models refuse shapes the API never sends (a null name, a string for a
    # list): the cluster broke the API's promise, and nothing of ours is at fault.
    return UnexpectedAnswer(f"the answer does not fit the API ({type(error).__name__})")


def for_answer(
    status: int, body: bytes | str | None, headers: Mapping[str, str] | None = None
) -> ProviderError:
    """The error for a non-2xx answer, with the server's Status message, cleaned, and the
    wait its `Retry-After` asks for (a 429: TooManyRequests, temporary)."""
    message = server_message(body)
    if status == 409:
        return AlreadyExists(f"409 conflict: {message or 'the object already exists'}")
    return for_status(status, message, retry_after_header(headers))


@asynccontextmanager
async def cluster_api(
    credentials: ClusterCredentials,
    *,
    deny: tuple[IPNetwork, ...] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> AsyncIterator[CoreV1Api]:
    """CoreV1Api on a fresh client. The block (reading and decoding included) must finish
    within timeout_s; any failure in it leaves as a ProviderError. An API server in a
    denied network is never contacted."""
    host = URL(credentials.server).host
    if host is not None and (why := denied_address(host, deny)) is not None:
        raise PermanentError(why)  # before a client (and its key files) is even built
    client = await build_client(credentials, deny, max_body_bytes)
    try:
        async with asyncio.timeout(timeout_s):
            yield CoreV1Api(client)
    except ProviderError:
        raise
    except Exception as failed:
        raise translate(failed, timeout_s) from failed
    finally:
        await client.close()


class _PythonJsonDecoder(json.JSONDecoder):
    """The pure-Python scanner: slower, but it lets the event loop run between its steps."""

    def __init__(self) -> None:
        super().__init__()
        self.parse_string = json.decoder.py_scanstring  # type: ignore[attr-defined]
        self.scan_once = json.scanner.py_make_scanner(self)  # type: ignore[attr-defined]


def _decode(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
        if len(body) <= DECODE_ON_LOOP_BYTES:
            return json.loads(text)
        return _PythonJsonDecoder().decode(text)
    except (ValueError, RecursionError) as bad:  # UnicodeDecodeError is a ValueError
        raise UnexpectedAnswer("the body is not JSON") from bad


async def json_answer(response: Any, decode: Any = None) -> Any:
    """The decoded JSON of a raw (`_preload_content=False`) SDK answer, after checking
    its status and content type; `decode(value)` may then turn it into what the caller
    wants in the same step (off the event loop for large bodies)."""
    body: bytes = await response.read()
    if not 200 <= response.status <= 299:
        raise for_answer(response.status, body, response.headers)
    content_type = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    if content_type != "application/json":
        raise UnexpectedAnswer(f"HTTP {response.status} without a JSON body")

    def parse() -> Any:
        value = _decode(body)
        return decode(value) if decode is not None else value

    if len(body) <= DECODE_ON_LOOP_BYTES:
        return parse()
    return await asyncio.to_thread(parse)


def _text(value: Any, what: str, limit: int = LABEL_TEXT_LIMIT) -> str:
    if not isinstance(value, str) or len(value) > limit or not value.isprintable():
        raise UnexpectedAnswer(f"{what} is not text")
    return value


def _namespace(item: Any) -> ClusterNamespace:
    """A Namespace object, checked field by field for what we use."""
    metadata = item.get("metadata") if isinstance(item, dict) else None
    if not isinstance(metadata, dict):
        raise UnexpectedAnswer("a namespace without metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not DNS_LABEL.fullmatch(name):
        raise UnexpectedAnswer("a namespace whose name is not a DNS label")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict):
        raise UnexpectedAnswer(f"namespace {name}: labels are not a map")
    checked = {
        _text(key, f"namespace {name}: a label key"): _text(
            value, f"namespace {name}: a label value"
        )
        for key, value in labels.items()
    }
    created = metadata.get("creationTimestamp")
    created_at = None
    if created is not None:
        try:
            created_at = datetime.fromisoformat(_text(created, "creationTimestamp", 64))
        except ValueError as bad:
            raise UnexpectedAnswer(f"namespace {name}: creationTimestamp is not a time") from bad
        if created_at.tzinfo is None:
            raise UnexpectedAnswer(f"namespace {name}: creationTimestamp has no time zone")
    return ClusterNamespace(
        name=name,
        labels=checked,
        created_at=None if created_at is None else created_at.astimezone(UTC),
    )


def _namespace_chunk(value: Any) -> tuple[list[ClusterNamespace], str | None]:
    """One chunk of a namespace list: its namespaces and the token of the next, if any."""
    items = value.get("items") if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise UnexpectedAnswer("a namespace list without a list of items")
    token = (value.get("metadata") or {}).get("continue") or None
    if token is not None and (
        not isinstance(token, str) or len(token) > CONTINUE_TOKEN_LIMIT or not token.isprintable()
    ):
        raise UnexpectedAnswer("a continue token that is not a short text")
    return [_namespace(item) for item in items], token


async def retrying_throttled(call: Callable[[], Awaitable[T]], deadline: float) -> T:
    """`call`'s answer; a 429 is tried again after the wait it asks for (1 s when it
    names none), up to THROTTLED_TRIES times, while the loop's clock stays before
    `deadline`; past that the TooManyRequests goes to the caller, with its wait."""
    loop = asyncio.get_running_loop()
    attempt = 1
    while True:
        try:
            return await call()
        except TooManyRequests as throttled:
            wait = 1.0 if throttled.retry_after_s is None else throttled.retry_after_s
            if attempt >= THROTTLED_TRIES or loop.time() + wait >= deadline:
                raise
        await asyncio.sleep(wait)
        attempt += 1


async def list_namespaces(
    credentials: ClusterCredentials,
    *,
    deny: tuple[IPNetwork, ...] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_items: int | None = None,
) -> list[ClusterNamespace]:
    """Every namespace, read in chunks of PAGE_SIZE; reading stops once more than
    `max_items` are read (the caller refuses that many). A continue token the server
    expired (410) makes the list start over, once."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    found: list[ClusterNamespace] = []
    token: str | None = None
    restarted = False
    async with cluster_api(
        credentials, deny=deny, timeout_s=timeout_s, max_body_bytes=max_body_bytes
    ) as api:

        async def chunk() -> tuple[list[ClusterNamespace], str | None]:
            paging: dict[str, Any] = {"limit": PAGE_SIZE}
            if token is not None:
                paging["_continue"] = token
            answer = await api.list_namespace(_preload_content=False, **paging)
            read: tuple[list[ClusterNamespace], str | None] = await json_answer(
                answer, _namespace_chunk
            )
            return read

        while True:
            try:
                namespaces, token = await retrying_throttled(chunk, deadline)
            except ProviderError as expired:
                if token is None or restarted or not expired.reason.startswith("HTTP 410"):
                    raise
                found, token, restarted = [], None, True
                continue
            found += namespaces
            if token is None or (max_items is not None and len(found) > max_items):
                return found


async def create_namespace(
    credentials: ClusterCredentials,
    name: str,
    labels: Mapping[str, str],
    *,
    deny: tuple[IPNetwork, ...] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> ClusterNamespace:
    """Creates the namespace; AlreadyExists when one of that name is there."""
    body = V1Namespace(metadata=V1ObjectMeta(name=name, labels=dict(labels)))
    async with cluster_api(
        credentials, deny=deny, timeout_s=timeout_s, max_body_bytes=max_body_bytes
    ) as api:
        answer = await api.create_namespace(body, _preload_content=False)
        created: ClusterNamespace = await json_answer(answer, _namespace)
    if created.name != name:
        raise UnexpectedAnswer(f"asked to create {name}, the API server created another name")
    return created
