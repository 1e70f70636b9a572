"""What an attack costs everyone else: another client's /healthz latency during each attack,
against an idle baseline measured in the same run.

A real `spacedock serve` process on SQLite. A bystander asks /healthz over one keep-alive
connection, back to back, for a fixed window. First with nothing else going on (the
idle baseline), then during each attack in turn, the attacker sending as fast as the
server answers. For each window the table shows how many attack requests went out and
how the server answered them, and the bystander's median, p99 and worst latency, with
the worst as a multiple of the idle worst.

Attacks on requests, frames and inputs are below in `ATTACKS`; attacks by hostile
clusters (redirects, huge and malformed answers, live-field fan-out) are
`bench/abuse_clusters.py`'s `CLUSTER_ATTACKS`, run after them.

The server trusts the repo's OIDC stand-in (sim/oidc_standin.py) as its
issuer, so the random-`kid` JWT flood makes it go to the issuer for keys; the row says
how many JWKS fetches the window cost. The audit flood's row says how many audit rows the
window wrote.

Run: `.venv/bin/python bench/abuse.py` (about a minute; `--window` sets seconds per attack).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import jwt  # noqa: E402
import websockets  # noqa: E402
from aiohttp import web  # noqa: E402

from bench.abuse_clusters import CLUSTER_ATTACKS  # noqa: E402
from sim.oidc_standin import AUDIENCE, OidcStandIn  # noqa: E402
from tests.support import factories as make  # noqa: E402
from tests.support.attack import PROTOCOL  # noqa: E402
from tests.support.server import Backend, Server, mint_token  # noqa: E402


@dataclass
class Scene:
    """What every attack may use: the server, a viewer and an admin token, and a tally
    of how the server answered the attacker."""

    server: Server
    viewer: str
    admin: str
    oidc: CountingIssuer
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    answers: Counter[str] = field(default_factory=Counter)
    # What else the window cost (JWKS fetches, audit rows), shown beside the answers.
    costs: Counter[str] = field(default_factory=Counter)

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.viewer}"}


Attack = Callable[[Scene], Coroutine[Any, Any, None]]


class CountingIssuer(OidcStandIn):
    """The OIDC stand-in, counting how often the server fetches its keys."""

    def __init__(self) -> None:
        super().__init__()
        self.key_fetches = 0

    def routes(self) -> list[web.RouteDef]:
        async def counted(request: web.Request) -> web.StreamResponse:
            self.key_fetches += 1
            return await keys(request)

        found = super().routes()
        (keys,) = [route.handler for route in found if route.path == "/keys"]
        return [route for route in found if route.path != "/keys"] + [web.get("/keys", counted)]


def fragment_bomb(levels: int) -> str:
    fragments = " ".join(
        f"fragment F{i} on Viewer {{ ...F{i + 1} ...F{i + 1} }}" for i in range(levels)
    )
    return f"query {{ viewer {{ ...F0 }} }} {fragments} fragment F{levels} on Viewer {{ role }}"


async def _post_loop(scene: Scene, bodies: list[bytes], token: str | None = None) -> None:
    headers = {**scene.headers(token), "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        while not scene.stop.is_set():
            for body in bodies:
                async with session.post(scene.server.url, data=body, headers=headers) as reply:
                    await reply.read()
                    scene.answers[str(reply.status)] += 1


async def fragment_bombs(scene: Scene) -> None:
    await _post_loop(scene, [json.dumps({"query": fragment_bomb(30)}).encode()])


async def malformed_bodies(scene: Scene) -> None:
    bodies = [b"5", b'"x"', b"null", b"[1]", b'{"query": "\xff"}', b"[" * 50_000, b"{"]
    await _post_loop(scene, bodies)


async def oversized_bodies(scene: Scene) -> None:
    await _post_loop(scene, [b'{"query": "' + b" " * (2 * 1024 * 1024) + b'"}'])


async def nul_ids(scene: Scene) -> None:
    body = json.dumps(
        {"query": make.DEREGISTER_SPACE, "variables": {"input": {"id": "spc_\x00" + "0" * 29}}}
    ).encode()
    await _post_loop(scene, [body], scene.admin)


async def one_megabyte_bodies(scene: Scene) -> None:
    """Bodies just under the 1 MiB limit: one unused variable of a million characters
    (answered), and half a million numbers (refused once decoded: over 2,000 values)."""
    unused = json.dumps({"query": "{ viewer { role } }", "variables": {"v": "x" * 1_040_000}})
    numbers = json.dumps({"query": "{ viewer { role } }", "variables": {"v": [0] * 340_000}})
    await _post_loop(scene, [unused.encode(), numbers.encode()])


async def random_kid_jwts(scene: Scene) -> None:
    """Unauthenticated: JWTs signed by a key the issuer never published, each naming a new
    `kid`, so the server cannot know it and may go to the issuer for keys."""
    issuer, forger = scene.oidc, scene.oidc.rsa.private
    fetches = issuer.key_fetches
    async with aiohttp.ClientSession() as session:
        while not scene.stop.is_set():
            claims = {"iss": issuer.issuer, "aud": AUDIENCE, "sub": "x", "exp": time.time() + 60}
            token = jwt.encode(claims, forger, "RS256", headers={"kid": secrets.token_hex(8)})
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            async with session.post(scene.server.url, data=b"{}", headers=headers) as reply:
                await reply.read()
                scene.answers[str(reply.status)] += 1
    scene.costs["JWKS fetches"] = issuer.key_fetches - fetches


async def audit_flood(scene: Scene) -> None:
    """A viewer's 15 aliased mutations per request, each refused (FORBIDDEN) and audited."""
    mutation = 'createRole(input: {name: "flood", policies: []}) { userErrors { code } }'
    aliased = "mutation { " + " ".join(f"a{i}: {mutation}" for i in range(15)) + " }"
    before = await audit_rows(scene)
    await _post_loop(scene, [json.dumps({"query": aliased}).encode()])
    scene.costs["audit rows"] = await audit_rows(scene) - before


async def audit_rows(scene: Scene) -> int:
    query = json.dumps({"query": "{ auditEvents { totalCount } }"}).encode()
    headers = {**scene.headers(scene.admin), "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(scene.server.url, data=query, headers=headers) as reply,
    ):
        return int((await reply.json())["data"]["auditEvents"]["totalCount"])


async def huge_headers(scene: Scene) -> None:
    """Unauthenticated: one header that never ends, until the server cuts it off."""
    chunk = b"a" * 65536
    while not scene.stop.is_set():
        reader, writer = await asyncio.open_connection("127.0.0.1", scene.server.port)
        answer = asyncio.ensure_future(reader.readline())
        writer.write(b"GET /graphql HTTP/1.1\r\nHost: x\r\nX-Padding: ")
        try:
            while not answer.done() and not scene.stop.is_set():
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        try:
            line = await asyncio.wait_for(answer, 10)
            scene.answers[line.split(b" ")[1].decode() if line else "closed"] += 1
        except (TimeoutError, ConnectionError):
            scene.answers["closed"] += 1
        writer.close()


async def slowloris(scene: Scene) -> None:
    """Hundreds of connections, each sending half a request head and then nothing."""
    while not scene.stop.is_set():
        pairs = [await asyncio.open_connection("127.0.0.1", scene.server.port) for _ in range(300)]
        for _, writer in pairs:
            writer.write(b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Le")
        for reader, writer in pairs:
            try:
                line = await asyncio.wait_for(reader.readline(), 30)
                scene.answers[line.split(b" ")[1].decode() if line else "closed"] += 1
            except (TimeoutError, ConnectionError):
                scene.answers["closed"] += 1
            writer.close()


async def bad_frames(scene: Scene) -> None:
    frames = ["[1]", "null", "1", '"x"', "true", '{"type":"subscribe","id":"1","payload":"x"}']
    init = json.dumps({"type": "connection_init", "payload": scene.headers()})
    while not scene.stop.is_set():
        for frame in frames:
            async with websockets.connect(scene.server.ws_url, subprotocols=[PROTOCOL]) as ws:
                await ws.send(init)
                await ws.recv()
                await ws.send(frame)
                try:
                    await ws.recv()
                except websockets.ConnectionClosed as closed:
                    scene.answers[f"close {closed.rcvd.code if closed.rcvd else 'none'}"] += 1


async def subscription_flood(scene: Scene) -> None:
    """One viewer token asks for 1,000 subscriptions over 10 connections (the cap is 500)."""
    init = json.dumps({"type": "connection_init", "payload": scene.headers()})
    query = "subscription { spaceStatusChanged { status } }"
    sockets = []
    for _ in range(10):
        ws = await websockets.connect(scene.server.ws_url, subprotocols=[PROTOCOL])
        await ws.send(init)
        await ws.recv()
        for index in range(100):
            subscribe = {"id": str(index), "type": "subscribe", "payload": {"query": query}}
            await ws.send(json.dumps(subscribe))
        sockets.append(ws)

    async def drain(ws: websockets.ClientConnection) -> None:
        async for message in ws:
            scene.answers[json.loads(message)["type"]] += 1

    readers = [asyncio.create_task(drain(ws)) for ws in sockets]
    await scene.stop.wait()
    for ws in sockets:
        await ws.close()
    await asyncio.gather(*readers, return_exceptions=True)


ATTACKS: dict[str, Attack] = {
    "fragment bomb, K=30": fragment_bombs,
    "malformed bodies": malformed_bodies,
    "2 MiB bodies": oversized_bodies,
    "1 MB bodies": one_megabyte_bodies,
    "NUL ids (mutation)": nul_ids,
    "endless header, no token": huge_headers,
    "300 half-sent heads": slowloris,
    "bad WebSocket frames": bad_frames,
    "1,000 subscriptions, one token": subscription_flood,
    "random-kid JWTs, no token": random_kid_jwts,
    "audit flood (aliased refusals)": audit_flood,
}


@dataclass
class Window:
    latencies_ms: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def p99(self) -> float:
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[98]

    @property
    def worst(self) -> float:
        return max(self.latencies_ms)


async def bystander(server: Server, seconds: float) -> Window:
    latencies: list[float] = []
    async with aiohttp.ClientSession() as session:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            async with session.get(f"{server.base}/healthz") as reply:
                await reply.read()
                assert reply.status == 200
            latencies.append((time.perf_counter() - started) * 1000)
    return Window(latencies)


async def under_attack(scene: Scene, attack: Attack, seconds: float) -> Window:
    scene.stop.clear()
    scene.answers.clear()
    scene.costs.clear()
    running = asyncio.create_task(attack(scene))
    await asyncio.sleep(0.2)  # the attack is under way before the bystander starts
    window = await bystander(scene.server, seconds)
    scene.stop.set()
    try:
        await asyncio.wait_for(running, 60)
    except TimeoutError:
        running.cancel()
    return window


async def main(seconds: float, only: str | None) -> None:
    with tempfile.TemporaryDirectory() as directory, CountingIssuer() as issuer:
        server = Server(
            backend=Backend.sqlite(Path(directory)),
            log_path=Path(directory) / "server.log",
            env={"SPACEDOCK_PROBE_INTERVAL_S": "3600", **issuer.server_env()},
        ).start()
        try:
            scene = Scene(
                server,
                viewer=await mint_token(server.backend.url, "bench", "viewer"),
                admin=await mint_token(server.backend.url, "bench", "admin"),
                oidc=issuer,
            )
            idle = await bystander(server, seconds)
            rows = [("idle (baseline)", "", "", idle)]
            for name, attack in {**ATTACKS, **CLUSTER_ATTACKS}.items():
                if only is not None and only.lower() not in name.lower():
                    continue
                window = await under_attack(scene, attack, seconds)
                answered = ", ".join(
                    [f"{k} x{v}" for k, v in sorted(scene.answers.items())]
                    + [f"{k}: {v}" for k, v in scene.costs.items()]
                )
                rows.append((name, str(sum(scene.answers.values())), answered, window))
        finally:
            server.stop()
    print(f"/healthz latency of another client, {seconds:g} s per window, SQLite, loopback\n")
    print(
        f"| {'attack':32} | {'sent':>6} | {'answered':48} | {'median ms':>9} | "
        f"{'p99 ms':>7} | {'worst ms':>8} | {'worst ÷ idle worst':>18} |"
    )
    print(f"|{'-' * 34}|{'-' * 8}|{'-' * 50}|{'-' * 11}|{'-' * 9}|{'-' * 10}|{'-' * 20}|")
    for name, sent, answered, window in rows:
        print(
            f"| {name:32} | {sent:>6} | {answered[:48]:48} | {window.median:9.2f} | "
            f"{window.p99:7.1f} | {window.worst:8.1f} | {window.worst / idle.worst:18.1f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=5.0, help="seconds per attack")
    parser.add_argument("--only", help="run the attacks whose name contains this text")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.window, arguments.only))
