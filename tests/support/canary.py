"""A canary listener: counts every TCP connection it is offered and answers any HTTP
request with a secret body, so a test can prove that nothing reached an address (and
that its body never came back). Tests put canaries on 127.0.0.2 and up, and deny them
with SPACEDOCK_CLUSTER_DENY_CIDRS: never a real metadata address."""

from __future__ import annotations

import socket
import threading

BODY = b"CANARY-BODY-THAT-MUST-NEVER-BE-SEEN"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(BODY) + 2).encode()
    + b'\r\nConnection: close\r\n\r\n"'
    + BODY
    + b'"'
)


class Canary:
    def __init__(self, host: str = "127.0.0.2") -> None:
        self.host = host
        self.connections = 0
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, 0))
        self._socket.listen(64)
        self.port: int = self._socket.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name=f"canary-{host}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> Canary:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._socket.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed: the test is over
                return
            self.connections += 1
            with connection:
                connection.settimeout(1)
                try:
                    connection.recv(65536)
                    connection.sendall(RESPONSE)
                except OSError:
                    pass
