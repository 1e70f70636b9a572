"""What the cloud stand-ins share: an aiohttp app served over HTTPS on
127.0.0.1 from its own event loop in a background thread, with a certificate
from a test CA.

Running on its own loop means sync tests, async tests and a spacedock server
in another process can all call it while a test flips its switches. Clients
trust it through `ca_file` (a PEM file holding the CA): `trust_env` sets it as
`SSL_CERT_FILE` / `REQUESTS_CA_BUNDLE` for a server process, and
`client_ssl_context()` serves in-process clients. Stand-ins that one process
must trust together share one `CertificateAuthority` (the `ca` argument:
`ca = CertificateAuthority(); GcpStandIn(ca=ca); AzureStandIn(ca=ca)`), since
`SSL_CERT_FILE` names one file.
"""

from __future__ import annotations

import asyncio
import ssl
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Self

from aiohttp import web

from sim import server_name
from sim.loop_calls import call_on
from sim.pki import CertificateAuthority
from sim.ports import HeldPort


def server_ssl_context(ca: CertificateAuthority, common_name: str) -> ssl.SSLContext:
    pair = ca.issue(common_name)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as directory:
        cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert.write_text(pair.certificate_pem)
        key.write_text(pair.key_pem)
        context.load_cert_chain(cert, key)
    return context


class HttpsStandIn:
    """Subclasses add their routes in `routes()`; `requests` counts
    `"METHOD /path"` for every request that reached the app."""

    name = "https-standin"

    def __init__(self, ca: CertificateAuthority | None = None) -> None:
        self.ca = ca or CertificateAuthority(f"{self.name}-ca")
        self._port = HeldPort()
        self.port = self._port.number
        self.requests: Counter[str] = Counter()
        self._directory = tempfile.TemporaryDirectory(prefix=f"{self.name}-")
        self.ca_file = Path(self._directory.name, "ca.pem")
        self.ca_file.write_text(self.ca.pem)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
        self._runner: web.AppRunner | None = None

    def routes(self) -> list[web.RouteDef]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> str:
        return self.ca.pem

    @property
    def trust_env(self) -> dict[str, str]:
        """What makes a fresh process trust this stand-in (and only its CA):
        `SSL_CERT_FILE` for ssl/aiohttp, `REQUESTS_CA_BUNDLE` for requests."""
        return {"SSL_CERT_FILE": str(self.ca_file), "REQUESTS_CA_BUNDLE": str(self.ca_file)}

    def client_ssl_context(self) -> ssl.SSLContext:
        """For in-process clients (aiohttp connectors, requests adapters)."""
        return ssl.create_default_context(cadata=self.ca.pem)

    def start(self) -> Self:
        self._thread.start()
        self._call(self._start())
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
        self._directory.cleanup()

    def _call(self, coroutine: Any) -> Any:
        return call_on(self._loop, coroutine)

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests[f"{request.method} {request.path}"] += 1
        response: web.StreamResponse = await handler(request)
        return response

    async def _start(self) -> None:
        app = server_name.named(web.Application(middlewares=[self._count]), type(self).__name__)
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        context = server_ssl_context(self.ca, self.name)
        await self._port.site(self._runner, context).start()

    async def _stop(self) -> None:
        self._port.release()
        if self._runner is not None:
            await self._runner.cleanup()
