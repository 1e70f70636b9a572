"""An HTTPS front for spacedock servers, as an ingress or a load balancer with TLS is in
production: it terminates TLS with a certificate of its own CA (for 127.0.0.1 and
localhost) and hands each connection to the next backend in turn, so the webhook calls
of one vCluster reach every replica. `ca_bundle` is what a webhook configuration trusts
(SPACEDOCK_ADMISSION_CA_FILE names `ca_file`)."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections import Counter
from pathlib import Path

from sim.https_standin import server_ssl_context
from sim.pki import CertificateAuthority
from tests.support.tcp_proxy import TcpProxy


class TlsIngress(TcpProxy):
    def __init__(self) -> None:
        super().__init__("127.0.0.1", 0)
        self.ca = CertificateAuthority("ingress-ca")
        self._context = server_ssl_context(self.ca, "ingress")
        self._directory = tempfile.TemporaryDirectory(prefix="ingress-")
        self.ca_file = Path(self._directory.name, "ca.pem")
        self.ca_file.write_text(self.ca.pem)
        self._backends: itertools.cycle[int] = itertools.cycle(())
        self.connections: Counter[int] = Counter()  # per backend port

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def route_to(self, *ports: int) -> None:
        """Each new connection goes to the next of these local ports."""
        self._backends = itertools.cycle(ports)

    def stop(self) -> None:
        super().stop()
        self._directory.cleanup()

    async def _listen(self) -> None:
        held = self._port.take()
        if held is not None:
            self.listener = await asyncio.start_server(self._forward, sock=held, ssl=self._context)
        else:
            self.listener = await asyncio.start_server(
                self._forward, "127.0.0.1", self.port, reuse_address=True, ssl=self._context
            )

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = next(self._backends)
        self.connections[port] += 1
        self.target = ("127.0.0.1", port)
        await super()._forward(reader, writer)
