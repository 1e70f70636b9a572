"""An OpenAI-compatible chat-completions API (what OpenAI, vLLM, llama.cpp and Ollama
serve at `/v1/chat/completions`), that records every request it receives, so a test can
read exactly what spacedock sent a model.

It refuses what the real API refuses, in its words: a missing or wrong bearer key (401
`invalid_api_key`), an unknown model (404 `model_not_found`), a body without `model` or
`messages` (400). It answers with one choice whose content explains the finding using
the placeholders the prompt holds (`<object-1>`, `<namespace-1>`, …), so a test sees
spacedock put the real names back. Switches: `down()` stops listening (connection
refused) until `up()`; `hang()` takes requests and never answers; `fail(status, times)`
answers an error `times` times (429 with `Retry-After: 1`). `tls=False` serves plain HTTP,
as a model server on the same machine often does.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from aiohttp import web

from sim import server_name
from sim.https_standin import HttpsStandIn, server_ssl_context

PLACEHOLDER = re.compile(r"<(?:namespace|object|image|app|name)-\d+>")


class ChatStandIn(HttpsStandIn):
    name = "chat-standin"

    def __init__(
        self, *, model: str = "advisor-small", api_key: str = "sk-standin", tls: bool = True
    ) -> None:
        super().__init__()
        self.model, self.api_key, self.tls = model, api_key, tls
        self.received: list[str] = []  # every request body, as sent
        self._hanging: asyncio.Event | None = None  # set: hung requests go on
        self._failures: list[int] = []

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def _context(self) -> Any:
        return server_ssl_context(self.ca, self.name) if self.tls else None

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/chat/completions", self._complete)]

    # -- switches ------------------------------------------------------------------
    def down(self) -> None:
        self._call(self._close())

    def up(self) -> None:
        self._call(self._open())

    def hang(self, hanging: bool = True) -> None:
        """Requests from now on wait unanswered; `hang(False)` lets every waiting one go on."""

        async def switch() -> None:
            if hanging and self._hanging is None:
                self._hanging = asyncio.Event()
            elif not hanging and self._hanging is not None:
                self._hanging.set()
                self._hanging = None

        self._call(switch())

    def fail(self, status: int, times: int = 1) -> None:
        self._failures += [status] * times

    async def _close(self) -> None:
        if self._runner is not None:
            for site in list(self._runner.sites):
                await site.stop()

    async def _open(self) -> None:
        if self._runner is not None and not self._runner.sites:
            await self._port.site(self._runner, self._context()).start()

    async def _start(self) -> None:
        app = server_name.named(web.Application(middlewares=[self._count]), type(self).__name__)
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await self._port.site(self._runner, self._context()).start()

    # -- the API ---------------------------------------------------------------------
    @staticmethod
    def _error(status: int, message: str, kind: str, code: str | None) -> web.Response:
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return web.json_response(body, status=status)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        text = (await request.read()).decode("utf-8", errors="replace")
        self.received.append(text)
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(
                401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
            )
        try:
            body = json.loads(text)
        except ValueError:
            return self._error(
                400,
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
                None,
            )
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("messages"), list)
            or "model" not in body
        ):
            return self._error(
                400, "you must provide a model parameter", "invalid_request_error", None
            )
        if body["model"] != self.model:
            return self._error(
                404,
                f"The model `{body['model']}` does not exist or you do not have access to it.",
                "invalid_request_error",
                "model_not_found",
            )
        if self._hanging is not None:
            await self._hanging.wait()
        if self._failures:
            status = self._failures.pop(0)
            headers = {"Retry-After": "1"} if status == 429 else {}
            return web.json_response(
                {"error": {"message": "Rate limit reached", "type": "requests", "code": None}},
                status=status,
                headers=headers,
            )
        prompt = " ".join(
            str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict)
        )
        shown = sorted(set(PLACEHOLDER.findall(prompt)))
        content = (
            "What is wrong: the workload keeps failing. It concerns "
            + (", ".join(shown) if shown else "your workload")
            + ". Fix the cause named in the evidence, then watch the rollout."
        )
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.received)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt) // 4,
                    "completion_tokens": 40,
                    "total_tokens": 0,
                },
            }
        )

    def requests_json(self) -> list[Any]:
        return [json.loads(text) for text in self.received]
