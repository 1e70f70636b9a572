"""The in-memory ceiling the benchmarks measure spacedock against (issue 12).

A minimal Strawberry app with the same GraphQL types, names and enums as the parts of
spacedock's schema the benchmarks ask for, serving from memory what spacedock's own
answer contained, under the same uvicorn options (`api.http_server.server_options`,
info logging with access lines) and the same graphql-transport-ws protocol. It checks the
bearer token against one it was given, in memory. What it cannot be beaten by is the
floor of Strawberry, graphql-core, Starlette and uvicorn for these shapes; spacedock's
figures divided by its figures are the ratios the README reports.

- `spaces(first)` and `viewer { role }` answer from a JSON file holding spacedock's
  answer to the full bench query (so both serve byte-identical JSON; the benches check).
- `setSpaceStatus(input)` makes a status event and hands it to every
  `spaceStatusChanged` subscriber's queue; each subscriber then runs its own selection
  set, as a plain Strawberry app does.

Run by the benches: `python bench/ceiling.py --port P --data answer.json --token T`.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import sys
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import strawberry  # noqa: E402
import uvicorn  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response  # noqa: E402
from starlette.routing import Route, WebSocketRoute  # noqa: E402
from starlette.types import Receive, Scope, Send  # noqa: E402
from starlette.websockets import WebSocket  # noqa: E402
from strawberry.asgi import GraphQL  # noqa: E402
from strawberry.exceptions import ConnectionRejectionError  # noqa: E402
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL  # noqa: E402

from api.http_server import server_options  # noqa: E402
from api.settings import Settings  # noqa: E402
from schema.common.enums import Role, SpaceStatus  # noqa: E402
from schema.common.scalars import CONFIG as SCALARS  # noqa: E402


@strawberry.type
class CloudAccount:
    name: str


@strawberry.type
class Environment:
    name: str
    namespace: str


@strawberry.type
class SpaceStatusEvent:
    space_id: strawberry.ID
    previous: SpaceStatus | None
    status: SpaceStatus
    at: datetime
    reason: str | None

    @strawberry.field
    def space(self) -> Space | None:
        return STORE.spaces_by_id.get(self.space_id)


@strawberry.type
class Space:
    id: strawberry.ID
    name: str
    status: SpaceStatus
    cloud_account: CloudAccount | None
    environments: list[Environment]
    events: strawberry.Private[list[SpaceStatusEvent]]

    @strawberry.field
    def status_events(self, first: int | None = None) -> list[SpaceStatusEvent]:
        return self.events[: first or 20]


@strawberry.type
class SpaceConnection:
    total_count: int
    nodes: list[Space]


@strawberry.type
class Viewer:
    role: Role


@strawberry.type
class UserError:
    field: list[str] | None
    message: str


@strawberry.type
class SpacePayload:
    space: Space | None
    user_errors: list[UserError]


@strawberry.input
class SetSpaceStatusInput:
    id: strawberry.ID
    status: SpaceStatus


class Store:
    """What the ceiling serves: spacedock's answer, as objects, and the live subscribers."""

    def __init__(self) -> None:
        self.spaces: list[Space] = []
        self.spaces_by_id: dict[str, Space] = {}
        self.subscribers: set[asyncio.Queue[SpaceStatusEvent]] = set()

    def load(self, answer: dict[str, Any]) -> None:
        for node in answer["data"]["spaces"]["nodes"]:
            space = Space(
                id=strawberry.ID(node["id"]),
                name=node["name"],
                status=SpaceStatus(node["status"]),
                cloud_account=(
                    CloudAccount(name=node["cloudAccount"]["name"])
                    if node["cloudAccount"]
                    else None
                ),
                environments=[Environment(**e) for e in node["environments"]],
                events=[
                    SpaceStatusEvent(
                        space_id=strawberry.ID(node["id"]),
                        previous=None if e["previous"] is None else SpaceStatus(e["previous"]),
                        status=SpaceStatus(e["status"]),
                        at=datetime.fromisoformat(e["at"]),
                        reason=e["reason"],
                    )
                    for e in node["statusEvents"]
                ],
            )
            self.spaces.append(space)
            self.spaces_by_id[space.id] = space

    def publish(self, event: SpaceStatusEvent) -> None:
        for queue in self.subscribers:
            queue.put_nowait(event)


STORE = Store()


@strawberry.type
class Query:
    @strawberry.field
    def spaces(self, first: int | None = None) -> SpaceConnection:
        return SpaceConnection(total_count=len(STORE.spaces), nodes=STORE.spaces[: first or 20])

    @strawberry.field
    def viewer(self) -> Viewer:
        return Viewer(role=Role.ADMIN)


@strawberry.type
class Mutation:
    @strawberry.mutation
    def set_space_status(self, input: SetSpaceStatusInput) -> SpacePayload:
        space = STORE.spaces_by_id[input.id]
        event = SpaceStatusEvent(
            space_id=space.id,
            previous=space.status,
            status=input.status,
            at=datetime.now(UTC),
            reason="held by an operator",
        )
        space.status = input.status
        space.events.insert(0, event)
        STORE.publish(event)
        return SpacePayload(space=space, user_errors=[])


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def space_status_changed(
        self, space_id: strawberry.ID | None = None
    ) -> AsyncGenerator[SpaceStatusEvent, None]:
        queue: asyncio.Queue[SpaceStatusEvent] = asyncio.Queue()
        STORE.subscribers.add(queue)
        try:
            while True:
                event = await queue.get()
                if space_id is None or event.space_id == space_id:
                    yield event
        finally:
            STORE.subscribers.discard(queue)


# spacedock's DateTime scalar (UTC, milliseconds, Z), so both answer the same bytes.
schema = strawberry.Schema(
    query=Query, mutation=Mutation, subscription=Subscription, config=SCALARS
)


class CeilingView(GraphQL[dict[str, Any], None]):
    """Strawberry's ASGI view with a bearer-token check held in memory."""

    def __init__(self, token: str) -> None:
        super().__init__(schema, subscription_protocols=[GRAPHQL_TRANSPORT_WS_PROTOCOL])
        self.authorization = f"Bearer {token}".encode()

    def _allowed(self, authorization: str | None) -> bool:
        return hmac.compare_digest((authorization or "").encode(), self.authorization)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(
            Request(scope).headers.get("authorization")
        ):
            await JSONResponse({"errors": [{"message": "no"}]}, 401)(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket | None = None
    ) -> dict[str, Any]:
        return {"request": request}

    async def on_ws_connect(self, context: dict[str, Any]) -> None:
        params = context.get("connection_params") or {}
        if not self._allowed(params.get("Authorization")):
            raise ConnectionRejectionError()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data", type=Path, required=True, help="spacedock's bench answer")
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    STORE.load(json.loads(args.data.read_text()))
    view = CeilingView(args.token)

    async def readyz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def subscribers(request: Request) -> Response:
        """Subscriptions running (what spacedock's spacedock_event_subscribers gauge says)."""
        return JSONResponse({"subscribers": len(STORE.subscribers)})

    app = Starlette(
        routes=[
            Route("/graphql", view, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", view),
            Route("/readyz", readyz),
            Route("/subscribers", subscribers),
        ]
    )
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="info",
        proxy_headers=False,
        **server_options(Settings()),
    )


if __name__ == "__main__":
    main()
