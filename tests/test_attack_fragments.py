"""Issue 7, defect 1: a fragment fan-out no longer freezes the server.

Each fragment spreads the next one twice, so K levels expand to 2^K fields. strawberry's
depth and alias limiters expanded them anew and froze the server for minutes at K=30;
our limits cost each fragment once, so the bomb is refused at once while another client's
/healthz keeps answering.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import Org
from tests.support.attack import converse, send, subscribe, while_healthz_answers
from tests.support.server import Server


def fragment_bomb(levels: int, leaf: str = "role") -> str:
    fragments = " ".join(
        f"fragment F{i} on Viewer {{ ...F{i + 1} ...F{i + 1} }}" for i in range(levels)
    )
    return f"query {{ viewer {{ ...F0 }} }} {fragments} fragment F{levels} on Viewer {{ {leaf} }}"


async def test_the_fragment_bomb_that_froze_the_server_is_refused_at_once(
    server: Server, org: Org
) -> None:
    bomb = fragment_bomb(30)
    assert len(bomb) < 1500  # a small document: the token limit alone does not stop it

    answer, bystander = await while_healthz_answers(
        server, send(server, token=org.tokens["viewer"], json_body={"query": bomb})
    )
    assert answer.status == 200
    assert answer.body["data"] is None
    assert answer.codes == ["GRAPHQL_VALIDATION_FAILED"]
    assert "5000 fields" in answer.body["errors"][0]["message"]
    assert bystander.answered >= 1


async def test_many_bombs_at_once_leave_healthz_answering(server: Server, org: Org) -> None:
    bombs = [
        send(server, token=org.tokens["viewer"], json_body={"query": fragment_bomb(30 + i)})
        for i in range(20)
    ]
    answers, _ = await while_healthz_answers(server, asyncio.gather(*bombs))
    assert {tuple(a.codes) for a in answers} == {("GRAPHQL_VALIDATION_FAILED",)}


async def test_a_small_fan_out_within_the_limits_still_answers(org: Org) -> None:
    data = await org.viewer.data(fragment_bomb(6))  # 64 fields once expanded
    assert data == {"viewer": {"role": "VIEWER"}}


@pytest.mark.parametrize(
    "document",
    [
        "{ viewer { " + "org { id } " * 450 + "} }",
        "{ viewer { " + ("org { " + "id " * 20 + "} ") * 20 + "} }",
        "{ viewer { " + "...F " * 900 + "} } fragment F on Viewer { role }",
        "{ viewer { " + "role " * 1900 + "} }",
    ],
    ids=["450-copies", "20-by-20", "900-spreads", "1900-leaves"],
)
async def test_one_field_selected_over_and_over_is_refused_at_once(
    server: Server, org: Org, document: str
) -> None:
    """graphql-core compares same-named fields pairwise: 450 copies of `org { id }`, well
    within the token limit, held the event loop for seconds."""
    answer, _ = await while_healthz_answers(
        server, send(server, token=org.tokens["viewer"], json_body={"query": document})
    )
    assert answer.body["data"] is None
    assert answer.codes == ["GRAPHQL_VALIDATION_FAILED"]
    assert "same fields too many times" in answer.body["errors"][0]["message"]


@pytest.mark.parametrize(
    ("document", "words"),
    [
        (
            "query { viewer { ...A } } fragment A on Viewer { ...B } fragment B on Viewer { ...A }",
            "inside itself",
        ),
        (
            "query { viewer { ...F0 } } "
            + " ".join(f"fragment F{i} on Viewer {{ ...F{i + 1} }}" for i in range(100))
            + " fragment F100 on Viewer { role }",
            "deeper than 64 levels",
        ),
        (
            "query { viewer { ...F } } fragment F on Viewer { "
            + " ".join(f"a{i}: role" for i in range(4))
            + " } "
            "query Q { viewer { ...F ...G } } fragment G on Viewer { ...F ...F ...F ...F }",
            "aliases",
        ),
    ],
    ids=["cycle", "long-chain", "aliases-through-fragments"],
)
async def test_cycles_chains_and_hidden_aliases_are_refused(
    server: Server, org: Org, document: str, words: str
) -> None:
    answer = await send(
        server,
        token=org.tokens["viewer"],
        json_body={"query": document, "operationName": "Q" if "query Q" in document else None},
    )
    assert answer.body["data"] is None
    assert answer.codes and set(answer.codes) == {"GRAPHQL_VALIDATION_FAILED"}
    assert any(words in error["message"] for error in answer.body["errors"])


async def test_a_bomb_inside_a_subscription_is_refused_too(server: Server, org: Org) -> None:
    bomb = fragment_bomb(30).replace("query { viewer", "subscription { spaceStatusChanged")
    bomb = bomb.replace("on Viewer", "on SpaceStatusEvent").replace("role", "status")
    talk = await converse(server, [subscribe(bomb)], org.tokens["viewer"])
    (error,) = talk.messages
    assert error["type"] == "error"
    assert "5000 fields" in error["payload"][0]["message"]
    assert error["payload"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
