"""Parsed documents are reused across requests (issue 12) without changing any answer:
the token limit still refuses a long document every time it comes, a syntax error is
answered as before, and one text's document never serves another (real server, HTTP)."""

from __future__ import annotations

from tests.conftest import Org
from tests.support.server import Server

LONG = "{ viewer { " + "role " * 2100 + "} }"  # past MAX_TOKENS (2,000)


async def test_a_document_past_the_token_limit_is_refused_every_time(
    server: Server, org: Org
) -> None:
    answers = [await org.viewer.post(LONG) for _ in range(3)]
    for status, body in answers:
        assert status == 200 and body.get("data") is None, body
        assert "tokens" in body["errors"][0]["message"], body
    assert len({str(body) for _, body in answers}) == 1


async def test_a_syntax_error_is_answered_the_same_every_time(server: Server, org: Org) -> None:
    answers = [await org.viewer.post("{ viewer { role }") for _ in range(2)]
    assert answers[0] == answers[1]
    status, body = answers[0]
    assert status == 200 and "Syntax Error" in body["errors"][0]["message"], body


async def test_repeated_and_similar_texts_each_get_their_own_answer(
    server: Server, org: Org
) -> None:
    for _ in range(2):
        assert await org.viewer.data("{ viewer { role } }") == {"viewer": {"role": "VIEWER"}}
        assert await org.admin.data("{ viewer { role } }") == {"viewer": {"role": "ADMIN"}}
        named = await org.viewer.data("{ viewer { org { name } } }")
        assert named == {"viewer": {"org": {"name": org.name}}}
