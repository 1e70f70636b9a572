"""A Kubernetes API server stand-in: HTTPS with its own CA, bearer-token and
client-certificate auth, `/version`, namespaces with label selectors, a
generic store for namespaced objects, and `Status` error bodies.

It runs on its own event loop in a background thread, so sync and async tests
alike can flip its fault switches: `status_code` (answer everything with a
5xx or 401/403), `delay_s` (slow answers), `hold()` / `release()` (every
answer waits until released: a cluster that is slow for exactly as long as a
test needs), `refuse()` (stop listening:
connection refused), `present_wrong_ca()` (a certificate from another CA),
`throttle(times, retry_after_s)` (the next calls answer 429 with `Retry-After`, as an
API server's priority and fairness sheds load). Namespace lists are served in chunks
when asked with `limit` (`continue` tokens, as sim/kube_paging.py serves them).
Hostile switches (issue 7) make it a cluster that attacks its client:
`redirect_to` (every call answers a 3xx to that URL) and `answers` (a call
answers exactly the given status, content type and body, which may be huge,
streamed, malformed or full of control characters).
Paths may carry a prefix (`https://host:port/c17/version`), so one stand-in
can play many clusters with distinct server URLs.

Bearer tokens: the fixed set `tokens` (clear it to accept no fixed token), and
any token a check given to `accept_tokens_when(check)` says yes to, e.g. an
EKS token for one cluster (`sim/eks.py`), or an access token issued
by the GCP or Azure stand-in. Use one stand-in per cluster when a token must
be accepted by one cluster and not another.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import ssl
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from sim import server_name
from sim.kube_paging import BadContinue, page_of
from sim.loop_calls import call_on
from sim.pki import CertificateAuthority, KeyPair
from sim.ports import HeldPort

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ROUTE = re.compile(r"^(?P<prefix>/[^/]*)*?(?P<api>/version/?|/api/v1/.*|/apis/.*)$")


def status(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return web.json_response(body, status=code, headers=headers)


def _ssl_context(pair: KeyPair, client_ca_pem: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as directory:
        cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert.write_text(pair.certificate_pem)
        key.write_text(pair.key_pem)
        context.load_cert_chain(cert, key)
    if client_ca_pem is not None:
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cadata=client_ca_pem)
    return context


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass(frozen=True)
class HostileAnswer:
    """What a hostile cluster sends instead of the real answer to one call."""

    body: bytes = b""
    status: int = 200
    content_type: str | None = "application/json"  # None: application/octet-stream
    # Sent after `body` in chunks without a Content-Length: a body larger than memory
    # would hold, produced as it is sent. A callable makes a fresh stream per request.
    stream: Iterator[bytes] | Callable[[], Iterator[bytes]] | None = None
    pause_s: float = 0.0  # between streamed chunks: a slow or dripping sender


def huge_namespace_list(total_bytes: int) -> Iterator[bytes]:
    """The rest of a NamespaceList body of about total_bytes (after a prefix that opens
    its items), as chunks of well-formed namespaces. One chunk is made and sent again
    and again, so producing 60 MB costs the sender almost nothing."""
    item = (
        b'{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns-%08d",'
        b'"creationTimestamp":"2026-01-01T00:00:00Z"},"status":{"phase":"Active"}}'
    )
    chunk = b",".join(item % i for i in range(1000)) + b","
    for _ in range(max(0, total_bytes // len(chunk))):
        yield chunk
    yield item % 1000 + b"]}"


class KubeStandIn:
    def __init__(self, token: str = "standin-token", git_version: str = "v1.31.2") -> None:
        self.ca = CertificateAuthority("standin-cluster-ca")
        self.tokens = {token}
        self.token_checks: list[Callable[[str], bool]] = []
        self.token = token
        self.git_version = git_version
        self._port = HeldPort()
        self.port = self._port.number
        self.status_code: int | None = None
        self.delay_s = 0.0
        self.requests: Counter[str] = Counter()
        # TLS handshakes of the connections requests came on: "resumed" or "full" (issue 12).
        self.handshakes: Counter[str] = Counter()
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.namespaces: dict[str, dict[str, Any]] = {}
        self._revision = 1  # the list's resourceVersion, bumped by each namespace written
        for name in ("default", "kube-system"):
            self._put_namespace(name, {})
        self._context = _ssl_context(self.ca.issue("kube-apiserver"), self.ca.pem)
        self._wrong_context = _ssl_context(
            CertificateAuthority("impostor-ca").issue("kube-apiserver"), None
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="kube-standin", daemon=True
        )
        self._runner: web.AppRunner | None = None
        self._site: web.BaseSite | None = None
        self._serving_wrong_ca = False
        self.redirect_to: str | None = None
        self.redirect_status = 302
        self._released: asyncio.Event | None = None  # set while answers are held
        # Per call ("GET /api/v1/namespaces"): being answered now, and the most at once.
        self.calls_in_flight: Counter[str] = Counter()
        self.most_calls_in_flight: Counter[str] = Counter()
        self.answers: dict[str, HostileAnswer] = {}  # "GET /api/v1/namespaces": what to send
        # The next calls answered 429 (`throttle`), the wait they ask for, and how many were.
        self._throttle_left = 0
        self._throttle_after_s = 1
        self.throttled = 0

    # -- lifecycle -------------------------------------------------------
    def start(self) -> KubeStandIn:
        self._thread.start()
        self._call(self._start_runner())
        self.listen()
        return self

    def stop(self) -> None:
        self._call(self._stop_runner())
        self._port.release()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()  # else its self-pipe sockets leak as ResourceWarnings

    def __enter__(self) -> KubeStandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def refuse(self) -> None:
        """Stop listening: clients get connection refused."""
        self._call(self._close_site())

    def listen(self) -> None:
        self._call(self._open_site())

    def hold(self) -> None:
        """Answers wait (each within its client's own timeout) until `release()`."""
        self._released = asyncio.Event()

    def release(self) -> None:
        if (released := self._released) is not None:
            self._released = None
            self._loop.call_soon_threadsafe(released.set)

    def present_wrong_ca(self, wrong: bool = True) -> None:
        self._serving_wrong_ca = wrong
        self._call(self._close_site())
        self._call(self._open_site())

    def add_namespaces(self, names: list[str]) -> None:
        """Namespaces made on the cluster by someone else."""

        async def made() -> None:
            for name in names:
                self._put_namespace(name, {})

        self._call(made())

    def throttle(self, times: int, retry_after_s: int = 1) -> None:
        """The next `times` calls answer 429 TooManyRequests with `Retry-After`, as the API
        server's priority and fairness answers when it sheds load."""
        self._throttle_left, self._throttle_after_s = times, retry_after_s

    def heal(self) -> None:
        """Back to a healthy server."""
        self._throttle_left = 0
        self.status_code = None
        self.delay_s = 0.0
        self.release()
        self.redirect_to = None
        self.redirect_status = 302
        self.answers = {}
        if self._serving_wrong_ca:
            self.present_wrong_ca(False)
        elif self._site is None:
            self.listen()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> str:
        return self.ca.pem

    def accept_tokens_when(self, check: Callable[[str], bool]) -> None:
        """Also accept any bearer token `check` says yes to."""
        self.token_checks.append(check)

    def client_certificate(self, user: str = "admin") -> KeyPair:
        return self.ca.issue(user, server=False, groups=("system:masters",))

    # -- internals -------------------------------------------------------
    def _call(self, coroutine: Any) -> Any:
        return call_on(self._loop, coroutine)

    async def _start_runner(self) -> None:
        app = server_name.named(web.Application(), type(self).__name__)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()

    async def _stop_runner(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _open_site(self) -> None:
        if self._site is not None:
            return
        assert self._runner is not None
        context = self._wrong_context if self._serving_wrong_ca else self._context
        self._site = self._port.site(self._runner, context)
        await self._site.start()

    async def _close_site(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None

    def _put_namespace(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/metadata.name": name, **labels},
                "creationTimestamp": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "uid": f"uid-{name}",
                "resourceVersion": "1",
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        self.namespaces[name] = namespace
        self._revision += 1
        return namespace

    def _authenticated(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[7:] in self.tokens:
            return True
        if header.startswith("Bearer ") and any(check(header[7:]) for check in self.token_checks):
            return True
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        return bool(peer)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        match = ROUTE.match(request.path)
        api = match.group("api") if match else request.path
        call = f"{request.method} {api.split('?')[0]}"
        self.requests[call] += 1
        tls = request.transport.get_extra_info("ssl_object") if request.transport else None
        if isinstance(tls, ssl.SSLObject):
            self.handshakes["resumed" if tls.session_reused else "full"] += 1
        self.calls_in_flight[call] += 1
        self.most_calls_in_flight[call] = max(
            self.most_calls_in_flight[call], self.calls_in_flight[call]
        )
        try:
            return await self._answer(request, api)
        finally:
            self.calls_in_flight[call] -= 1

    async def _answer(self, request: web.Request, api: str) -> web.StreamResponse:
        if (released := self._released) is not None:
            await released.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.redirect_to is not None:
            return web.Response(
                status=self.redirect_status,
                headers={"Location": self.redirect_to},
                text="moved",
            )
        if (hostile := self.answers.get(f"{request.method} {api.split('?')[0]}")) is not None:
            return await self._hostile(request, hostile)
        if self._throttle_left > 0:
            self._throttle_left -= 1
            self.throttled += 1
            wait = self._throttle_after_s
            return status(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                details={"retryAfterSeconds": wait},
                headers={"Retry-After": str(wait)},
            )
        if self.status_code is not None:
            return status(
                self.status_code,
                "InternalError" if self.status_code >= 500 else "Failure",
                "fault injected",
            )
        if not self._authenticated(request):
            return status(401, "Unauthorized", "Unauthorized")
        if api.rstrip("/") == "/version":
            return web.json_response(self._version())
        if api == "/api/v1/namespaces":
            return await (
                self._create_namespace(request)
                if request.method == "POST"
                else self._list_namespaces(request)
            )
        parts = api.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 4:
            return self._one_namespace(request, parts[3])
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 3:
            return web.json_response(
                {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": []}
            )
        return await self._generic(request, api)

    async def _hostile(self, request: web.Request, answer: HostileAnswer) -> web.StreamResponse:
        if answer.stream is None:
            response = web.Response(body=answer.body, status=answer.status)
            if answer.content_type is not None:  # else aiohttp says application/octet-stream
                response.headers["Content-Type"] = answer.content_type
            return response
        streamed = web.StreamResponse(status=answer.status)
        if answer.content_type is not None:
            streamed.content_type = answer.content_type
        streamed.enable_chunked_encoding()
        await streamed.prepare(request)
        try:
            await streamed.write(answer.body)
            for chunk in answer.stream() if callable(answer.stream) else answer.stream:
                await asyncio.sleep(0)  # a reset connection is noticed between chunks...
                if request.transport is None or request.transport.is_closing():
                    break  # ...else asyncio drops the writes without a word, as fast as it can
                await streamed.write(chunk)
                if answer.pause_s:
                    await asyncio.sleep(answer.pause_s)
        except (ConnectionResetError, ConnectionError):
            pass  # the client stopped reading: what a bounded client does
        return streamed

    def _version(self) -> dict[str, str]:
        return {
            "major": "1",
            "minor": self.git_version.split(".")[1],
            "gitVersion": self.git_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.23.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    async def _list_namespaces(self, request: web.Request) -> web.Response:
        selector = request.query.get("labelSelector", "")
        items = [
            ns for ns in self.namespaces.values() if _matches(ns["metadata"]["labels"], selector)
        ]
        try:
            page, paging = page_of(items, request.query, self._revision, filtered=bool(selector))
        except BadContinue as error:
            return status(400, "BadRequest", str(error))
        return web.json_response(
            {
                "kind": "NamespaceList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._revision), **paging},
                "items": page,
            }
        )

    async def _create_namespace(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            name = body["metadata"]["name"]
        except (ValueError, KeyError, TypeError):
            return status(400, "BadRequest", "the body is not a Namespace")
        if not isinstance(name, str) or len(name) > 63 or not DNS_LABEL.match(name):
            return status(
                422, "Invalid", f'Namespace "{name}" is invalid: metadata.name: Invalid value'
            )
        if name in self.namespaces:
            return status(409, "AlreadyExists", f'namespaces "{name}" already exists')
        return web.json_response(
            self._put_namespace(name, body["metadata"].get("labels") or {}), status=201
        )

    def _one_namespace(self, request: web.Request, name: str) -> web.Response:
        if name not in self.namespaces:
            return status(404, "NotFound", f'namespaces "{name}" not found')
        if request.method == "DELETE":
            return web.json_response(self.namespaces.pop(name))
        return web.json_response(self.namespaces[name])

    async def _generic(self, request: web.Request, api: str) -> web.Response:
        """Namespaced objects: .../namespaces/{ns}/{resource}[/{name}]."""
        parts = api.strip("/").split("/")
        try:
            at = parts.index("namespaces")
            namespace, resource = parts[at + 1], parts[at + 2]
        except (ValueError, IndexError):
            return status(
                404, "NotFound", f"the server could not find the requested resource {api}"
            )
        if namespace not in self.namespaces:
            return status(404, "NotFound", f'namespaces "{namespace}" not found')
        collection = self.objects.setdefault("/".join([*parts[:at], namespace, resource]), {})
        name = parts[at + 3] if len(parts) > at + 3 else None
        if name is None and request.method == "GET":
            return web.json_response(
                {
                    "kind": "List",
                    "apiVersion": "v1",
                    "metadata": {},
                    "items": list(collection.values()),
                }
            )
        if name is None and request.method == "POST":
            body = json.loads(await request.text())
            name = body["metadata"]["name"]
            if name in collection:
                return status(409, "AlreadyExists", f'{resource} "{name}" already exists')
            collection[name] = body
            return web.json_response(body, status=201)
        if name not in collection:
            return status(404, "NotFound", f'{resource} "{name}" not found')
        if request.method == "DELETE":
            return web.json_response(collection.pop(name))
        if request.method in ("PUT", "PATCH"):
            collection[name] = json.loads(await request.text())
        return web.json_response(collection[name])
