"""The probe reads its one answer itself (providers/probe.py): these are the answers an
API server, or something posing as one, can give it, each sent byte for byte by a TLS
server on 127.0.0.1, and what the probe makes of them. It never follows, never reads past
64 KiB, never writes a token that could split its request, and connects only to
addresses the deny list allows."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import AsyncIterator

import pytest

from providers.cluster_credentials import ClusterCredentials
from providers.probe import VersionProber
from sim.https_standin import server_ssl_context
from sim.kube_standin import KubeStandIn
from sim.pki import CertificateAuthority

VERSION = json.dumps({"major": "1", "minor": "31", "gitVersion": "v1.31.2"}).encode()


class RawServer:
    """A TLS server that answers every connection with the same bytes, then closes,
    and keeps what each request said."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.ca = CertificateAuthority("raw-server-ca")
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        context = server_ssl_context(self.ca, "kube-apiserver")
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0, ssl=context)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.requests.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(self.answer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def prober() -> AsyncIterator[VersionProber]:
    prober = VersionProber(timeout_s=5.0)
    yield prober
    await prober.close()


async def probe(prober: VersionProber, answer: bytes, token: str = "t0ken") -> tuple[str, str]:
    """(what the probe concluded, the request it sent)."""
    async with RawServer(answer) as server:
        outcome = await prober.probe(
            ClusterCredentials(server=server.url, ca_pem=server.ca.pem, token=token)
        )
    verdict = f"ok {outcome.version}" if outcome.ok else f"failed: {outcome.error}"
    return verdict, b"".join(server.requests).decode()


def http(head: str, body: bytes = b"") -> bytes:
    return head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + body


@pytest.mark.parametrize(
    "answer",
    [
        http(f"HTTP/1.1 200 OK\nContent-Length: {len(VERSION)}", VERSION),
        http(
            "HTTP/1.1 200 OK\nTransfer-Encoding: chunked",
            b"%x\r\n" % len(VERSION) + VERSION + b"\r\n0\r\n\r\n",
        ),
        http("HTTP/1.1 200 OK\nConnection: close", VERSION),  # the body runs to the close
    ],
    ids=["length", "chunked", "until-close"],
)
async def test_each_way_of_sending_a_version_is_read(prober: VersionProber, answer: bytes) -> None:
    verdict, request = await probe(prober, answer)
    assert verdict == "ok v1.31.2"
    lines = request.split("\r\n")
    assert lines[0] == "GET /version HTTP/1.1"
    assert "Authorization: Bearer t0ken" in lines
    assert "Connection: close" in lines
    assert lines[1].startswith("Host: 127.0.0.1:")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "unexpected answer from the API server: not an HTTP answer"),
        (b"", "connection failed: the API server closed the connection before it answered"),
        (
            http("HTTP/1.1 302 Found\nLocation: https://169.254.169.254/\nContent-Length: 0"),
            "HTTP 302 from the API server: redirects are not followed",
        ),
        (
            http(f"HTTP/1.1 200 OK\nContent-Length: {2**20}"),  # announced: nothing is read
            "unexpected answer from the API server: too large, more than 65,536 bytes",
        ),
        (
            http("HTTP/1.1 200 OK\nConnection: close", b" " * 2**17),
            "unexpected answer from the API server: too large, more than 65,536 bytes",
        ),
        (
            http(f"HTTP/1.1 200 OK\nContent-Length: {len(VERSION)}", VERSION[:-5]),
            "connection failed: the API server closed the connection before the answer was "
            "complete",
        ),
        (
            b"HTTP/1.1 200 OK\r\n" + b"X-Padding: yes\r\n" * 2000,  # and no end
            "unexpected answer from the API server: headers longer than 16,384 bytes",
        ),
        (
            http("HTTP/1.1 200 OK\nContent-Length: 2", b"{}"),
            "HTTP 200 from the API server without a gitVersion in /version",
        ),
        (
            http("HTTP/1.1 401 Unauthorized\nContent-Length: 0"),
            "401 unauthorized: the cluster rejected the credential",
        ),
    ],
    ids=[
        "not-http",
        "closed",
        "redirect",
        "announced-huge",
        "huge",
        "cut-short",
        "endless-headers",
        "no-version",
        "401",
    ],
)
async def test_an_answer_that_is_not_a_version_fails_the_probe_with_its_reason(
    prober: VersionProber, answer: bytes, reason: str
) -> None:
    verdict, _ = await probe(prober, answer)
    assert verdict.startswith(f"failed: {reason}"), verdict


@pytest.mark.parametrize("token", ["a\r\nX-Injected: 1", "a\nb", "tøken"])
async def test_a_token_that_could_split_the_request_is_refused_unsent(
    prober: VersionProber, token: str
) -> None:
    verdict, request = await probe(prober, http("HTTP/1.1 200 OK\nContent-Length: 0"), token)
    assert verdict == (
        "failed: the credential's token holds characters an HTTP header cannot carry"
    )
    assert request == "", "nothing was sent"
    assert token not in verdict


async def test_a_host_name_that_resolves_into_a_denied_network_is_never_contacted() -> None:
    with KubeStandIn() as cluster:
        prober = VersionProber(timeout_s=5.0, deny=(ipaddress.ip_network("127.0.0.0/8"),))
        try:
            outcome = await prober.probe(
                ClusterCredentials(
                    server=f"https://localhost:{cluster.port}",
                    ca_pem=cluster.ca_pem,
                    token=cluster.token,
                )
            )
        finally:
            await prober.close()
        assert not outcome.ok
        assert outcome.error is not None and outcome.error.startswith("denied:"), outcome
        assert sum(cluster.requests.values()) == 0
        assert not cluster.handshakes
