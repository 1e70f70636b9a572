"""What a graphql-transport-ws client must send and may hold: the token in its
`connection_init` payload, messages shaped as the protocol says (else 4400), and at most
MAX_SUBSCRIPTIONS_PER_CONNECTION subscriptions at once."""

from __future__ import annotations

from collections import Counter
from typing import Any

MAX_SUBSCRIPTIONS_PER_CONNECTION = 100


# WebSocket close codes (RFC 6455) besides graphql-transport-ws's 4400: "try again later" and
# "internal error".
WS_TRY_AGAIN_LATER = 1013


WS_INTERNAL_ERROR = 1011


def authorization_of(params: dict[str, Any]) -> str | None:
    """The Authorization entry of a connection_init payload, its key in any case, at the
    top (`{"Authorization": …}`) or under `headers` (Apollo's GraphQLWsLink habit)."""
    headers = params.get("headers")
    for found in (params, headers if isinstance(headers, dict) else {}):
        for key, value in found.items():
            if key.lower() == "authorization" and isinstance(value, str):
                return value
    return None


WS_FORBIDDEN = 4403


SEND_A_TOKEN = 'Send {"Authorization": "Bearer <token>"} in the connection_init payload.'


class Refused(Exception):
    """connection_init refused; `reason` (at most 123 bytes) tells the client what to send."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SubscriptionCounts:
    """Operations open per credential across every connection of this process, counted by
    the credential authenticated (`Viewer.credential`: the API token's id, the JWT's
    subject), never by how its header was spelled."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()

    def take(self, key: str) -> bool:
        if self.open[key] >= self.limit:
            return False
        self.open[key] += 1
        return True

    def give_back(self, key: str) -> None:
        self.open[key] -= 1
        if self.open[key] <= 0:
            del self.open[key]


def message_problem(message: object) -> str | None:
    """Why a decoded frame is no graphql-transport-ws message; None when it may be handled."""
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return "Each message must be a JSON object with a string `type`."
    kind = message["type"]
    if kind in ("connection_init", "ping", "pong"):
        payload = message.get("payload")
        if payload is not None and not isinstance(payload, dict):
            return f"The `payload` of {kind} must be an object."
        return None
    if kind in ("subscribe", "complete") and (
        not isinstance(message.get("id"), str) or not message["id"]
    ):
        return f"A {kind} message needs a non-empty string `id`."
    if kind == "subscribe":
        payload = message.get("payload")
        if not isinstance(payload, dict):
            return "The `payload` of subscribe must be an object with a `query`."
        if not isinstance(payload.get("query"), str):
            return "The subscribe payload's `query` must be a string."
        for key, kind_, what in (
            ("variables", dict, "an object"),
            ("operationName", str, "a string"),
            ("extensions", dict, "an object"),
        ):
            if payload.get(key) is not None and not isinstance(payload[key], kind_):
                return f"The subscribe payload's `{key}` must be {what} or null."
    return None
