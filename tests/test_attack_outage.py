"""Issue 7: a database outage answers SERVICE_UNAVAILABLE, not a traceback per request.

The server reaches Postgres through a TCP forwarder the test cuts. Meanwhile every
GraphQL request is a JSON 503 with `extensions.code: SERVICE_UNAVAILABLE`, a WebSocket
`connection_init` is closed with 1013 ("try again later") rather than dropped, the log
says "unavailable" once for the whole outage, and service resumes when the database is
back. Postgres only: an embedded SQLite file has no network to lose.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import POSTGRES_URL
from tests.support.attack import HANG, Answer, converse, send
from tests.support.server import Backend, Server, mint_token
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.skipif(
    POSTGRES_URL is None, reason="needs SPACEDOCK_TEST_DATABASE_URL (a database to lose)"
)
VIEWER = {"query": "{ viewer { role } }"}
# Needs the database whoever asks (a verified token is held in memory for a while, so
# `viewer` alone may answer without it).
SPACE_COUNT = {"query": "{ spaces(first: 1) { totalCount } }"}


@pytest.fixture(scope="module")
def outage_server(
    postgres_database: Backend, postgres_proxy: TcpProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    through_proxy = postgres_proxy.backend_of(postgres_database)
    log_path = Path(tmp_path_factory.mktemp("outage")) / "server.log"
    running = Server(backend=through_proxy, log_path=log_path).start()
    yield running
    running.stop()


async def test_an_outage_is_503_service_unavailable_then_service_resumes(
    outage_server: Server, postgres_proxy: TcpProxy, postgres_database: Backend
) -> None:
    token = await mint_token(postgres_database.url, "outage", "viewer")
    unused = await mint_token(postgres_database.url, "outage", "viewer")  # never seen by the server
    assert (await send(outage_server, json_body=VIEWER, token=token)).body == {
        "data": {"viewer": {"role": "VIEWER"}}
    }
    postgres_proxy.cut()
    try:
        answers = [
            await send(outage_server, json_body=body, token=credential)
            for body, credential in [(SPACE_COUNT, token), (VIEWER, unused)] * 5
        ]
        for answer in answers:
            assert (answer.status, answer.content_type) == (503, "application/json"), answer
            assert answer.codes == ["SERVICE_UNAVAILABLE"]
        # What needs no database still answers: the held token and who it names.
        held = await send(outage_server, json_body=VIEWER, token=token)
        assert (held.status, held.body) == (200, {"data": {"viewer": {"role": "VIEWER"}}})
        talk = await converse(
            outage_server,
            [
                json.dumps(
                    {"type": "connection_init", "payload": {"Authorization": f"Bearer {unused}"}}
                )
            ],
        )
        assert talk.close_code == 1013
    finally:
        postgres_proxy.restore()

    deadline = asyncio.get_running_loop().time() + HANG
    while (answer := await send(outage_server, json_body=SPACE_COUNT, token=token)).status != 200:
        assert answer.codes == ["SERVICE_UNAVAILABLE"]
        assert asyncio.get_running_loop().time() < deadline, "service did not resume"
        await asyncio.sleep(0.1)
    assert answer.body == {"data": {"spaces": {"totalCount": 0}}}

    log = outage_server.log()
    assert log.count("database unavailable") == 1, log
    assert "database reachable again" in log
    assert "Exception in ASGI application" not in log
    assert "unexpected error" not in log


async def test_every_other_route_answers_an_outage_with_503_too(
    outage_server: Server, postgres_proxy: TcpProxy, postgres_database: Backend
) -> None:
    """Issue 18, defect 6: the kubeconfig download answered 500 with a traceback."""
    token = await mint_token(postgres_database.url, "outage", "admin")
    unused = await mint_token(postgres_database.url, "outage", "admin")
    route = f"{outage_server.base}/api/v1/cloudspaces/cs_{'0' * 30}/vclusters/dev/kubeconfig"
    assert (await get(route, token)).status == 404  # the token is now held by the server
    before = outage_server.log()
    postgres_proxy.cut()
    try:
        for credential in (token, unused):  # the route's own read, then the token check
            answer = await get(route, credential)
            assert (answer.status, answer.content_type) == (503, "application/json"), answer
            assert answer.codes == ["SERVICE_UNAVAILABLE"]
        ready = await get(f"{outage_server.base}/readyz", None)
        assert ready.status == 503
    finally:
        postgres_proxy.restore()
    deadline = asyncio.get_running_loop().time() + HANG
    while (await get(route, token)).status != 404:
        assert asyncio.get_running_loop().time() < deadline, "service did not resume"
        await asyncio.sleep(0.1)
    during = outage_server.log()[len(before) :]
    assert "Traceback" not in during, during
    assert "Exception in ASGI application" not in during


async def get(url: str, token: str | None) -> Answer:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG)) as session,
        session.get(url, headers=headers) as reply,
    ):
        return Answer(reply.status, reply.content_type, await reply.text())
