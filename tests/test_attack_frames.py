"""Issue 7, defect 7: WebSocket frames that are no graphql-transport-ws message close the
socket with 4400 and a reason, before and after connection_init; never a dropped socket
or a traceback in the log.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import Org
from tests.support.attack import converse, subscribe, while_healthz_answers
from tests.support.server import Server

NOT_MESSAGES = {
    "list": "[1]",
    "null": "null",
    "number": "1",
    "string": '"x"',
    "true": "true",
    "type-number": '{"type": 5}',
    "no-type": '{"id": "1"}',
    "unknown-type": '{"type": "launch"}',
    "not-json": "{",
    "deep": "[" * 20_000,
    "deep-but-valid": "[" * 200 + "]" * 200,
}
BAD_SUBSCRIBES = {
    "payload-string": json.dumps({"id": "1", "type": "subscribe", "payload": "x"}),
    "payload-missing": json.dumps({"id": "1", "type": "subscribe"}),
    "query-number": json.dumps({"id": "1", "type": "subscribe", "payload": {"query": 5}}),
    "operation-name-number": subscribe("{ viewer { role } }", operationName=5),
    "variables-list": subscribe("{ viewer { role } }", variables=[1]),
    "id-number": json.dumps(
        {"id": 1, "type": "subscribe", "payload": {"query": "{ viewer { role } }"}}
    ),
    "complete-without-id": json.dumps({"type": "complete"}),
}


def assert_quiet_log(server: Server) -> None:
    log = server.log()
    assert "Traceback" not in log
    assert "Exception in ASGI application" not in log


@pytest.mark.parametrize("frame", NOT_MESSAGES.values(), ids=NOT_MESSAGES.keys())
async def test_a_non_message_before_init_closes_4400(server: Server, frame: str) -> None:
    talk = await converse(server, [frame])
    assert talk.close_code == 4400
    assert talk.close_reason
    assert_quiet_log(server)


@pytest.mark.parametrize("frame", NOT_MESSAGES.values(), ids=NOT_MESSAGES.keys())
async def test_a_non_message_after_init_closes_4400(server: Server, org: Org, frame: str) -> None:
    talk = await converse(server, [frame], org.tokens["viewer"])
    assert talk.close_code == 4400
    assert_quiet_log(server)


@pytest.mark.parametrize("frame", BAD_SUBSCRIBES.values(), ids=BAD_SUBSCRIBES.keys())
async def test_a_malformed_subscribe_closes_4400(server: Server, org: Org, frame: str) -> None:
    talk = await converse(server, [frame], org.tokens["viewer"])
    assert talk.close_code == 4400
    assert talk.close_reason
    assert_quiet_log(server)


async def test_a_connection_init_with_a_string_payload_closes_4400(server: Server) -> None:
    talk = await converse(server, [json.dumps({"type": "connection_init", "payload": "x"})])
    assert talk.close_code == 4400


async def test_each_refusal_costs_at_most_one_log_line(server: Server, org: Org) -> None:
    before = len(server.log().splitlines())
    for frame in NOT_MESSAGES.values():
        await converse(server, [frame], org.tokens["viewer"])
    added = server.log().splitlines()[before:]
    # uvicorn logs the handshake ("accepted", "connection open") and the close; nothing else.
    ours = [line for line in added if "WebSocket /graphql" not in line and "connection" not in line]
    assert len(ours) <= len(NOT_MESSAGES), ours


async def test_a_flood_of_bad_frames_leaves_others_served(server: Server, org: Org) -> None:
    async def flood() -> list[int | None]:
        codes = []
        for frame in [*NOT_MESSAGES.values(), *BAD_SUBSCRIBES.values()] * 3:
            codes.append((await converse(server, [frame], org.tokens["viewer"])).close_code)
        return codes

    codes, _ = await while_healthz_answers(server, flood())
    assert set(codes) == {4400}
    # The same connection shape, well-formed, still works.
    talk = await converse(server, [subscribe("query { viewer { role } }")], org.tokens["viewer"])
    assert talk.messages[0] == {
        "id": "1",
        "type": "next",
        "payload": {"data": {"viewer": {"role": "VIEWER"}}},
    }


async def test_a_frame_with_a_key_given_twice_closes_4400(server: Server, org: Org) -> None:
    """Issue 18: the last of two `query` keys used to run, over WebSocket as over HTTP."""
    frame = (
        '{"id": "1", "type": "subscribe", "payload": {"query": "subscription { spaceStatusChanged '
        '{ status } }", "query": "{ viewer { role } }"}}'
    )
    talk = await converse(server, [frame], org.tokens["viewer"])
    assert talk.close_code == 4400, talk
