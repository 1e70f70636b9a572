"""Loopback ports for test servers, picked so that parallel test processes (pytest-xdist
workers, other checkouts on the machine) never serve on the same one.

Ports come from below Linux's ephemeral range (32768-60999), so an outgoing connection's
local port never lands on one, and at random, so processes rarely pick alike. An in-process
server holds its port from the moment it is picked (`HeldPort`): picking and binding are one
step, with no window in which another process can bind it first. A server in another process
can only be handed a number (`free_port`), and retries on a clash.
"""

from __future__ import annotations

import random
import socket
import ssl

from aiohttp import web

FREE_PORTS = range(20000, 32000)
_pick = random.SystemRandom()


def free_port() -> int:
    """A loopback TCP port nothing listens on right now (for another process, or for an
    address nothing should answer on)."""
    while True:
        port = _pick.choice(FREE_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


class HeldPort:
    """A loopback port bound at once and kept until a server serves it.

    The socket is bound without SO_REUSEADDR and not yet listening: no other process can
    bind the port, and a connection before the server starts is refused, as it would be
    with nothing there. The first server takes the socket itself; a server opened again
    after a close (a stand-in switched off and on) binds the same number.
    """

    def __init__(self) -> None:
        while True:
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", _pick.choice(FREE_PORTS)))
            except OSError:
                sock.close()
                continue
            break
        self._socket: socket.socket | None = sock
        self.number: int = sock.getsockname()[1]

    def take(self) -> socket.socket | None:
        """The held socket, once, for a server to listen on; None when it was taken before.

        It gets SO_REUSEADDR only now: the connections it accepts inherit the flag, and
        their TIME_WAIT leftovers would otherwise keep the server from binding the port
        again after a close. Set at the bind, it would let another process's SO_REUSEADDR
        bind share the port until the server listens.
        """
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return sock

    def site(
        self, runner: web.BaseRunner, ssl_context: ssl.SSLContext | None = None
    ) -> web.BaseSite:
        """An aiohttp site serving this port: the held socket first, the same number after."""
        held = self.take()
        if held is not None:
            return web.SockSite(runner, held, ssl_context=ssl_context)
        return web.TCPSite(
            runner, "127.0.0.1", self.number, ssl_context=ssl_context, reuse_address=True
        )

    def release(self) -> None:
        """Closes the held socket if no server took it."""
        held = self.take()
        if held is not None:
            held.close()
