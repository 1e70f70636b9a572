"""What comes in over HTTP before strawberry sees it: a body read within its limits, JSON
decoded strictly (no duplicate keys, no NaN, bounded nesting, values and integers), and
the GraphQL-shaped errors of a request that is not a GraphQL request."""

from __future__ import annotations

import asyncio
import json
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson
from cross_web import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Message, Receive
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData

from schema.engine.limits import MAX_INT_DIGITS

# JSON nested deeper than this is no GraphQL request (variables are a few levels deep);
# refusing it early keeps the decoder's recursion and our own walks short.
MAX_JSON_NESTING = 32


# Values in one request's JSON (list items and object keys, at any depth): the largest
# request an operation needs (100 ids, a cloud key file) has a few hundred. Past it the
# body is refused before graphql-core coerces anything (100,000 ids took 0.1 s of the loop).
MAX_JSON_VALUES = 2_000


BAD_REQUEST = "BAD_REQUEST"


SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"


INTERNAL_SERVER_ERROR = "INTERNAL_SERVER_ERROR"


@dataclass(frozen=True)
class TransportLimits:
    """The transport's settings (SPACEDOCK_MAX_BODY_BYTES, _REQUEST_READ_TIMEOUT_S,
    _MAX_SUBSCRIPTIONS_PER_TOKEN)."""

    max_body_bytes: int = 1024 * 1024
    read_timeout_s: float = 5.0
    max_subscriptions_per_token: int = 500


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"errors": [{"message": message, "extensions": {"code": code}}]},
        status_code=status,
        headers=headers,
    )


def unauthenticated(message: str, credential_given: bool = True) -> JSONResponse:
    """401 with the reason in the body (GraphQL's error shape, UNAUTHENTICATED) and, for a
    credential that was refused, in WWW-Authenticate too (RFC 6750's invalid_token, with
    the reason as error_description), which a browser's devtools show beside the status."""
    challenge = 'Bearer realm="spacedock"'
    if credential_given:
        plain = unicodedata.normalize("NFKC", message).replace('"', "'")  # "…" is "..."
        described = QUOTED_UNSAFE.sub("?", plain)
        challenge += f', error="invalid_token", error_description="{described}"'
    return error_response(401, "UNAUTHENTICATED", message, {"WWW-Authenticate": challenge})


# What a quoted-string of RFC 6750's error_description may not hold: `"`, `\`, anything
# not visible ASCII or a space.
QUOTED_UNSAFE = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


def database_unavailable() -> JSONResponse:
    return error_response(
        503,
        SERVICE_UNAVAILABLE,
        "The database is unreachable; try again shortly.",
        {"Retry-After": "5"},
    )


def shape_problem(value: object) -> str | None:
    """Why decoded JSON is too deep or too big to be a GraphQL request; None when it is
    not. Walked without recursion, and stopped at the first container past the limits, so
    what it costs is bounded whatever was sent."""
    values, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict | list):
            if level > MAX_JSON_NESTING:
                return f"JSON nested deeper than {MAX_JSON_NESTING} levels"
            values += len(item)
            if values > MAX_JSON_VALUES:
                return (
                    f"more than {MAX_JSON_VALUES} JSON values (variables, list items, object "
                    "keys); no operation needs that many"
                )
            pending.extend((inner, level + 1) for inner in _children(item))
    return None


def _children(container: dict[str, object] | list[object]) -> list[object]:
    return list(container.values()) if isinstance(container, dict) else container


def _no_constant(name: str) -> object:
    """NaN and Infinity are Python's extension of JSON, not JSON."""
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def _bounded_int(digits: str) -> int:
    """A JSON integer, refused before conversion past 64 bits (Python's own limit is 4,300
    digits, and converting costs time quadratic in them)."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise json.JSONDecodeError(f"an integer of more than {MAX_INT_DIGITS} digits", digits, 0)
    return int(digits)


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise json.JSONDecodeError("a number too large to represent", text, 0)
    return number


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object, refused when a key repeats: which of two values counts is no client's
    guess to make (json.loads keeps the last one)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        counted = Counter(key for key, _ in pairs)
        twice = next(key for key, times in counted.items() if times > 1)
        raise json.JSONDecodeError(f"the key {json.dumps(twice)[:80]} appears twice", "", 0)
    return found


def decoded_json(data: str | bytes) -> object:
    """JSON text as Python, or JSONDecodeError for anything else, so both transports answer
    it as a client fault: bytes that are not UTF-8 (UTF-16 included; JSON between systems
    is UTF-8, RFC 8259), nesting deeper than MAX_JSON_NESTING or more than MAX_JSON_VALUES
    values, a key given twice in one object, an integer past 64 bits, a number past a float.

    The text is decoded twice: at C speed first, so that its shape is bounded before any
    Python runs per value (a hook per value cost 40 ms on a 1 MB body), then with the hooks
    that check keys and numbers, on what is now at most MAX_JSON_VALUES values."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text, parse_constant=_no_constant)
        if (problem := shape_problem(value)) is not None:
            raise json.JSONDecodeError(problem, "", 0)
        return json.loads(
            text,
            parse_constant=_no_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError:
        raise json.JSONDecodeError("the body is not UTF-8", "", 0) from None
    except ValueError:  # int() refuses an integer of more than 4,300 digits
        raise json.JSONDecodeError("an integer too long to read", "", 0) from None
    except RecursionError:  # nesting past the stack
        raise json.JSONDecodeError(
            f"JSON nested deeper than {MAX_JSON_NESTING} levels", "", 0
        ) from None


def encoded_json(data: object) -> str:
    """The compact JSON Strawberry writes with json.dumps, by orjson: several times faster
    on a page (issue 12). A str, as WebSocket text frames need; json.dumps for what orjson
    refuses (integers beyond 64 bits, non-string keys)."""
    try:
        return orjson.dumps(data).decode()
    except TypeError:
        return json.dumps(data, separators=(",", ":"))


def request_data(data: object, protocol: Any) -> GraphQLRequestData:
    """One GraphQL request from a decoded body; HTTPException 400 naming what is wrong."""
    if isinstance(data, list):
        raise HTTPException(400, "Batching is not supported: send one operation per request.")
    if not isinstance(data, dict):
        raise HTTPException(
            400, 'The request body must be a JSON object such as {"query": "{ viewer { role } }"}.'
        )
    expected = {
        "query": (str, "a string"),
        "variables": (dict, "an object"),
        "operationName": (str, "a string"),
        "extensions": (dict, "an object"),
    }
    for key, (kind, what) in expected.items():
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise HTTPException(400, f"`{key}` must be {what} or null.")
    return GraphQLRequestData(
        query=data.get("query"),
        variables=data.get("variables"),
        operation_name=data.get("operationName"),
        extensions=data.get("extensions"),
        protocol=protocol,
    )


async def read_body(request: Request, limits: TransportLimits) -> bytes:
    """The whole body, refused past `max_body_bytes` or when it arrives too slowly."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise HTTPException(413, too_large(limits))
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.read_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise HTTPException(413, too_large(limits))
                chunks.append(chunk)
    except TimeoutError:
        raise HTTPException(
            408, f"The request body did not arrive within {limits.read_timeout_s:g} s."
        ) from None
    return b"".join(chunks)


def too_large(limits: TransportLimits) -> str:
    return (
        f"The request body exceeds {limits.max_body_bytes} bytes "
        "(the server's SPACEDOCK_MAX_BODY_BYTES)."
    )


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands over the body already read, then listens for a disconnect."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def only_unavailable(answer: GraphQLHTTPResponse) -> bool:
    """No data, and every error says the database is unreachable."""
    errors: list[Any] = list(answer.get("errors") or [])
    codes = {(error.get("extensions") or {}).get("code") for error in errors}
    return answer.get("data") is None and codes == {SERVICE_UNAVAILABLE}
