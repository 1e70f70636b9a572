"""One call to an OpenAI-compatible chat-completions endpoint (OpenAI, a vLLM, llama.cpp or
Ollama server, …), through the outbound gate like every connection the server makes.

The API key goes in the `Authorization` header and nowhere else: no reason, log line or
error carries it, nor the endpoint's answer to a failed call (it might echo the
request). A failure that may pass (a refused connection, a timeout, 429, 5xx) is a
`TemporaryError`, with the wait the endpoint asked for in `Retry-After`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from providers.errors import (
    PermanentError,
    ProviderError,
    TemporaryError,
    UnexpectedAnswer,
    retry_after_header,
)
from providers.network import IPNetwork, fetch

MAX_ANSWER_BYTES = 256 * 1024
MAX_TOKENS = 700


@dataclass(frozen=True)
class ChatEndpoint:
    url: str  # the API's base (…/v1); /chat/completions is added
    model: str
    api_key: str = field(repr=False)

    @property
    def completions_url(self) -> str:
        return self.url.rstrip("/") + "/chat/completions"

    @property
    def headers(self) -> dict[str, str]:
        sent = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:  # a local model server may need none
            sent["Authorization"] = f"Bearer {self.api_key}"
        return sent

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc.rpartition("@")[2]


async def complete(
    endpoint: ChatEndpoint,
    messages: Sequence[Mapping[str, str]],
    *,
    deny: tuple[IPNetwork, ...],
    timeout_s: float,
) -> str:
    """The model's answer to `messages`; ProviderError saying why there is none."""
    body = {
        "model": endpoint.model,
        "messages": [dict(m) for m in messages],
        "temperature": 0.2,
        "max_tokens": MAX_TOKENS,
    }
    where = f"the model endpoint {endpoint.host}"
    try:
        answer = await fetch(
            deny,
            "POST",
            endpoint.completions_url,
            max_body_bytes=MAX_ANSWER_BYTES,
            timeout_s=timeout_s,
            headers=endpoint.headers,
            data=json.dumps(body).encode(),
        )
    except ProviderError as refused:
        raise PermanentError(f"{where} is refused: {refused.reason}") from None
    except TimeoutError:
        raise TemporaryError(f"timeout: no answer from {where} after {timeout_s:g}s") from None
    except (aiohttp.ClientError, OSError) as failed:
        raise TemporaryError(f"{where} cannot be reached ({type(failed).__name__})") from None
    if answer.status == 429 or answer.status >= 500:
        raise TemporaryError(
            f"HTTP {answer.status} from {where}", retry_after_header(answer.headers)
        )
    if answer.status != 200:
        raise PermanentError(f"HTTP {answer.status} from {where}")
    try:
        content = json.loads(answer.body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise UnexpectedAnswer(f"{where} answered without choices[0].message.content") from None
    if not isinstance(content, str) or not content.strip():
        raise UnexpectedAnswer(f"{where} answered an empty message")
    return content
