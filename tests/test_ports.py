"""The test servers' ports: a held port is the stand-in's alone from the moment it is
picked, refuses connections until served, and can be served again after a close."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from sim.ports import HeldPort


def connects(port: int) -> bool:
    with socket.socket() as client:
        return client.connect_ex(("127.0.0.1", port)) == 0


def fetch_closing(port: int) -> bytes:
    """One request the server answers and then closes first, so its side of the
    connection stays behind in TIME_WAIT on the port."""
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    return answer


async def test_a_held_port_is_refused_until_served_and_nobody_else_can_bind_it() -> None:
    port = HeldPort()
    try:
        assert not connects(port.number)
        for reuse in (False, True):  # as free_port() and as aiohttp/uvicorn would bind it
            with socket.socket() as other, pytest.raises(OSError):
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
                other.bind(("127.0.0.1", port.number))
    finally:
        port.release()


async def test_a_served_port_serves_again_on_the_same_number_after_a_close() -> None:
    async def here(request: web.Request) -> web.Response:
        return web.Response(text="here")

    app = web.Application()
    app.router.add_get("/", here)
    runner = web.AppRunner(app)
    await runner.setup()
    port = HeldPort()
    try:
        for _ in range(2):
            site = port.site(runner)
            await site.start()
            assert (await asyncio.to_thread(fetch_closing, port.number)).endswith(b"here")
            await site.stop()
            assert not connects(port.number)
    finally:
        await runner.cleanup()
