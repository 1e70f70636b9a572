"""Responses are encoded by orjson (issue 12): the same compact JSON Strawberry writes with
json.dumps, and for what orjson refuses, json.dumps itself."""

from __future__ import annotations

import json

from api.http_requests import encoded_json

ANSWER = {
    "data": {
        "spaces": {
            "totalCount": 2,
            "nodes": [
                {"id": "spc_1", "status": "ACTIVE", "latencyMs": 12.5, "held": False},
                {"id": "spc_2", "status": "UNKNOWN", "latencyMs": None, "held": True},
            ],
        }
    },
    "errors": [{"message": "x", "path": ["a", 0], "extensions": {"code": "FORBIDDEN"}}],
}


def test_an_answer_encodes_as_strawberry_would() -> None:
    assert encoded_json(ANSWER) == json.dumps(ANSWER, separators=(",", ":"))


def test_text_beyond_ascii_round_trips() -> None:
    value = {"name": "café ☕ \u2028 \ud7ff", "quote": '"\\'}
    assert json.loads(encoded_json(value)) == value


def test_what_orjson_refuses_is_still_json() -> None:
    value = {"big": 2**70, 1: "integer key"}
    assert json.loads(encoded_json(value)) == {"big": 2**70, "1": "integer key"}
