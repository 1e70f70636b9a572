"""Debian's headless Chromium, driven over the DevTools protocol, for the GraphiQL test.

Playwright cannot download its browsers here, and the test needs only a handful of
DevTools calls (open a page, evaluate, click, type, screenshot) plus the page's network
log, so a small client over `websockets` is less machinery than a browser framework.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web
from websockets.asyncio.client import ClientConnection, connect

from sim.ports import HeldPort

CHROMIUM = "/usr/bin/chromium"
STARTUP_S = 30.0

# Headless, and quiet: no update checks, sync, field trials or QUIC probes, so any
# request the network log shows came from the page itself.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--remote-debugging-port=0",
    "--window-size=1400,900",
]


def chromium_available() -> bool:
    return shutil.which(CHROMIUM) is not None


class PageError(AssertionError):
    """A DevTools call failed, or the page did not reach a state in time."""


class Chromium:
    """One browser with one page; `async with Chromium(profile) as page:`.

    `requests` lists the URL of every request the page made (documents, scripts,
    styles, fetches and WebSockets; a data: URL as its media type only),
    `frames_sent` the WebSocket messages it sent, `errors` its uncaught exceptions,
    `responses` what the network panel shows of each answer (CORS preflights included:
    url, type, status, headers) and `failures` each request that failed (with its CORS
    error, as the console reports it).
    """

    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.requests: list[str] = []
        self.frames_sent: list[str] = []
        self.errors: list[str] = []
        self.responses: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self._urls: dict[str, str] = {}  # request id → URL, for failures
        self._process: asyncio.subprocess.Process | None = None
        self._connection: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._session: str | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}

    async def __aenter__(self) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        with (self.profile / "chromium.log").open("ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                "about:blank",
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # so that closing ends its renderers and helpers too
            )
        self._connection = await connect(await self._devtools_url(), max_size=None)
        self._reader = asyncio.create_task(self._read())
        target = await self.call("Target.createTarget", {"url": "about:blank"}, page=False)
        attached = await self.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, page=False
        )
        self._session = attached["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            await self.call(f"{domain}.enable")
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._connection is not None:
            await self._connection.close()
        if self._reader is not None:
            self._reader.cancel()
        if self._process is not None and self._process.returncode is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except TimeoutError:
                os.killpg(self._process.pid, signal.SIGKILL)
                await self._process.wait()

    async def _devtools_url(self) -> str:
        """Chromium writes its DevTools port and browser path to this file once it listens."""
        active_port = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.returncode is not None:
                raise PageError(f"chromium exited: {self.log()}")
            lines = active_port.read_text().splitlines() if active_port.exists() else []
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            await asyncio.sleep(0.05)
        raise PageError(f"chromium did not open DevTools in {STARTUP_S}s: {self.log()}")

    def log(self) -> str:
        return (self.profile / "chromium.log").read_text(errors="replace")[-4000:]

    async def _read(self) -> None:
        assert self._connection is not None
        async for raw in self._connection:
            message = json.loads(raw)
            if "id" in message:
                future = self._pending.pop(message["id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
            else:
                self._record(message["method"], message.get("params", {}))

    def _record(self, method: str, params: dict[str, Any]) -> None:
        if method == "Network.requestWillBeSent":
            url: str = params["request"]["url"]
            self._urls[params["requestId"]] = url
            self.requests.append(url.split(",", 1)[0] if url.startswith("data:") else url)
        elif method == "Network.responseReceived":
            response = params["response"]
            self.responses.append(
                {
                    "url": response["url"],
                    "type": params.get("type"),
                    "status": response["status"],
                    "headers": {k.lower(): v for k, v in response["headers"].items()},
                }
            )
        elif method == "Network.loadingFailed":
            self.failures.append(
                {
                    "url": self._urls.get(params["requestId"]),
                    "type": params.get("type"),
                    "error": params.get("errorText"),
                    "cors": (params.get("corsErrorStatus") or {}).get("corsError"),
                }
            )
        elif method == "Network.webSocketCreated":
            self.requests.append(params["url"])
        elif method == "Network.webSocketFrameSent":
            self.frames_sent.append(params["response"]["payloadData"])
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details["text"])

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, page: bool = True
    ) -> dict[str, Any]:
        """Send one DevTools command (to the page, or to the browser) and return its result."""
        assert self._connection is not None
        message: dict[str, Any] = {"id": next(self._ids), "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self._session
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message["id"]] = answer
        await self._connection.send(json.dumps(message))
        reply = await asyncio.wait_for(answer, timeout=30)
        if "error" in reply:
            raise PageError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply["result"]
        return result

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", {"url": url})

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (promises are awaited)."""
        result = await self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise PageError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, seconds: float = 20.0) -> Any:
        """The first truthy value of `expression`, polled for up to `seconds`."""
        try:
            async with asyncio.timeout(seconds):
                while True:
                    value = await self.evaluate(expression)
                    if value:
                        return value
                    await asyncio.sleep(0.1)
        except TimeoutError:
            raise PageError(f"no {expression} in {seconds}s; page errors: {self.errors}") from None

    async def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element, as a user makes it."""
        box = await self.wait_for(
            f"""(() => {{
                const element = document.querySelector({json.dumps(selector)});
                if (!element) return null;
                const r = element.getBoundingClientRect();
                return {{x: r.x + r.width / 2, y: r.y + r.height / 2}};
            }})()"""
        )
        for event in ("mousePressed", "mouseReleased"):
            await self.call(
                "Input.dispatchMouseEvent",
                {"type": event, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1},
            )

    async def type_text(self, text: str) -> None:
        """Text typed into whatever has the focus."""
        await self.call("Input.insertText", {"text": text})

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", {"format": "png"})
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))


async def serve_page(port: HeldPort, html: str) -> web.AppRunner:
    """`html` served at / on 127.0.0.1:port: an origin other than the API's."""
    app = web.Application()

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app.router.add_get("/", index)
    runner = web.AppRunner(app)
    await runner.setup()
    await port.site(runner).start()
    return runner
