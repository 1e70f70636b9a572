"""TLS session resumption for the probe: the last session of each server, offered at the
next probe's handshake, so a probe every interval skips the full handshake."""

from __future__ import annotations

import ssl
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass

from providers.kept import Kept

# Servers whose last TLS session is kept (a session is a few hundred bytes and keeps its
# context alive: as many as the TLS contexts cached).
TLS_SESSIONS_KEPT = 8192
# A server not probed for this long (its space deregistered, or probed by another replica)
# loses its session; the next probe makes a full handshake.
TLS_SESSION_IDLE_S = 3600.0


@dataclass
class Handshake:
    """The TLS handshake a probe is about to make: the session it may offer, and the TLS
    object that made it (to read whether it resumed, and the session it got)."""

    offer: ssl.SSLSession | None
    ssl_object: ssl.SSLObject | None = None


# The event loop wraps the connection in the probe's own task (asyncio and uvloop alike),
# so the context finds the probe's handshake here.
probe_handshake: ContextVar[Handshake | None] = ContextVar(
    "spacedock_probe_handshake", default=None
)


class ResumingContext(ssl.SSLContext):
    """A cluster's TLS context that offers the session the probe's Handshake carries."""

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        handshake = probe_handshake.get()
        if handshake is not None and session is None:
            session = handshake.offer
        ssl_object = super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        if handshake is not None:
            handshake.ssl_object = ssl_object
        return ssl_object


class TlsSessions:
    """The last TLS session per server, with the context whose verification it passed;
    least recently used dropped first, and none unused for TLS_SESSION_IDLE_S."""

    def __init__(self, kept: int = TLS_SESSIONS_KEPT, idle_s: float = TLS_SESSION_IDLE_S) -> None:
        self._sessions: Kept[tuple[str, int], tuple[ssl.SSLContext, ssl.SSLSession]] = Kept(
            kept, idle_s
        )
        self.handshakes: Counter[str] = Counter()  # "resumed" and "full", after successes

    def __len__(self) -> int:
        return len(self._sessions)

    def offer(self, server: tuple[str, int], context: ssl.SSLContext) -> Handshake:
        kept = self._sessions.get(server)
        if kept is None:
            return Handshake(None)
        verified_by, session = kept
        if verified_by is not context:  # what verification trusts has changed
            self._sessions.pop(server)
            return Handshake(None)
        return Handshake(session)

    def succeeded(
        self, server: tuple[str, int], context: ssl.SSLContext, handshake: Handshake
    ) -> None:
        if handshake.ssl_object is None:
            return
        resumed = handshake.ssl_object.session_reused
        self.handshakes["resumed" if resumed else "full"] += 1
        if resumed and handshake.offer is not None:
            # The offered session resumed, so its ticket still works: keep it. Reading the
            # new one would cost about a tenth of a millisecond, as much again as offering
            # it (Python's ssl copies a session through DER, peer certificate included).
            # A ticket the server stops taking (expired, keys rotated) gives a full
            # handshake, whose session is kept then.
            session: ssl.SSLSession | None = handshake.offer
        else:
            session = handshake.ssl_object.session
        if session is None:
            self._sessions.pop(server)
            return
        self._sessions.put(server, (context, session))

    def failed(self, server: tuple[str, int]) -> None:
        self._sessions.pop(server)
