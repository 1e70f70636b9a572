"""Issue 7, defect 6 and the body limit: whatever arrives at /graphql over HTTP, the answer
is JSON with `extensions.code`, never a plain-text 500 or a traceback.

A body that is no GraphQL request is a 4xx with code BAD_REQUEST: not JSON (invalid
UTF-8 too), JSON that is not an object (`5`, `"x"`, `null`, a batch list), JSON nested
deeper than 32 levels, fields of the wrong type, a wrong content type, a body over
SPACEDOCK_MAX_BODY_BYTES (413), and an operation that cannot be picked.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from tests.conftest import Org
from tests.support.attack import send, while_healthz_answers
from tests.support.server import Server

MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_MAX_BODY_BYTES": str(MAX_BODY)}


VIEWER = "{ viewer { role } }"
MALFORMED: dict[str, bytes] = {
    "number": b"5",
    "string": b'"x"',
    "null": b"null",
    "true": b"true",
    "batch": json.dumps([{"query": VIEWER}, {"query": VIEWER}]).encode(),
    "empty": b"",
    "not-json": b"query { viewer { role } }",
    "invalid-utf8": b'{"query": "\xff\xfe{ viewer { role } }"}',
    "deep-array": b"[" * 50_000,
    "deep-variables": (
        b'{"query": "'
        + VIEWER.encode()
        + b'", "variables": {"v": '
        + b"[" * 200
        + b"]" * 200
        + b"}}"
    ),
    "query-number": b'{"query": 5}',
    "variables-list": json.dumps({"query": VIEWER, "variables": [1]}).encode(),
    "operation-name-number": json.dumps({"query": VIEWER, "operationName": 5}).encode(),
    "extensions-string": json.dumps({"query": VIEWER, "extensions": "x"}).encode(),
    "no-query": b"{}",
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_body_is_a_json_400(server: Server, org: Org, body: bytes) -> None:
    answer = await send(server, body, token=org.tokens["viewer"])
    assert answer.status == 400
    assert answer.content_type == "application/json"
    assert answer.codes == ["BAD_REQUEST"]
    assert "Traceback" not in server.log()


async def test_a_lone_surrogate_query_is_a_clear_error_not_a_500(server: Server, org: Org) -> None:
    # Valid JSON, but the query text cannot be a GraphQL document either way.
    answer = await send(
        server, json_body={"query": "{ viewer { role } }\ud800"}, token=org.tokens["viewer"]
    )
    assert answer.status in (200, 400)
    assert answer.codes and "INTERNAL_SERVER_ERROR" not in answer.codes


@pytest.mark.parametrize(
    ("content_type", "status"),
    [(None, 415), ("text/plain", 415), ("application/x-www-form-urlencoded", 415)],
)
async def test_a_wrong_content_type_is_refused_as_json(
    server: Server, org: Org, content_type: str | None, status: int
) -> None:
    answer = await send(
        server, json.dumps({"query": VIEWER}), token=org.tokens["viewer"], content_type=content_type
    )
    assert (answer.status, answer.codes) == (status, ["BAD_REQUEST"])
    assert "application/json" in answer.body["errors"][0]["message"]


@pytest.mark.parametrize(
    ("document", "operation_name", "words"),
    [
        ("query A { viewer { role } }", "B", "Unknown operation"),
        ("query A { viewer { role } } query B { viewer { role } }", None, "operationName"),
    ],
    ids=["unknown-operation-name", "several-operations-unnamed"],
)
async def test_an_operation_that_cannot_be_picked_is_a_request_error(
    server: Server, org: Org, document: str, operation_name: str | None, words: str
) -> None:
    answer = await send(
        server,
        json_body={"query": document, "operationName": operation_name},
        token=org.tokens["viewer"],
    )
    assert answer.body.get("data") is None
    assert answer.codes == ["BAD_REQUEST"]
    assert words in answer.body["errors"][0]["message"]


async def test_several_operations_answer_the_one_named(server: Server, org: Org) -> None:
    document = "query A { viewer { role } } query B { viewer { org { name } } }"
    answer = await send(
        server, json_body={"query": document, "operationName": "A"}, token=org.tokens["viewer"]
    )
    assert answer.body == {"data": {"viewer": {"role": "VIEWER"}}}


async def test_a_body_over_the_limit_is_413_before_it_is_read(server: Server, org: Org) -> None:
    padding = " " * MAX_BODY
    oversized = json.dumps({"query": VIEWER + padding})
    answer, _ = await while_healthz_answers(
        server, send(server, oversized, token=org.tokens["viewer"])
    )
    assert (answer.status, answer.codes) == (413, ["BAD_REQUEST"])
    assert str(MAX_BODY) in answer.body["errors"][0]["message"]
    # Just under the limit is an ordinary request.
    fits = json.dumps({"query": VIEWER + " " * (MAX_BODY - 100)})
    assert (await send(server, fits, token=org.tokens["viewer"])).body == {
        "data": {"viewer": {"role": "VIEWER"}}
    }


async def test_a_chunked_body_over_the_limit_is_413(server: Server, org: Org) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"query": "' + VIEWER.encode()
        for _ in range(4):
            yield b" " * (MAX_BODY // 2)
        yield b'"}'

    answer = await send(server, chunks(), token=org.tokens["viewer"])
    assert (answer.status, answer.codes) == (413, ["BAD_REQUEST"])


async def test_an_unauthenticated_body_is_not_read(server: Server) -> None:
    answer = await send(server, json.dumps({"query": VIEWER}))
    assert (answer.status, answer.codes) == (401, ["UNAUTHENTICATED"])


async def test_get_requests_are_checked_the_same_way(server: Server, org: Org) -> None:
    token = org.tokens["viewer"]
    bad_variables = await send(
        server,
        method="GET",
        content_type=None,
        token=token,
        params={"query": VIEWER, "variables": "[" * 1000},
    )
    assert (bad_variables.status, bad_variables.codes) == (400, ["BAD_REQUEST"])
    list_variables = await send(
        server,
        method="GET",
        content_type=None,
        token=token,
        params={"query": VIEWER, "variables": "[1]"},
    )
    assert (list_variables.status, list_variables.codes) == (400, ["BAD_REQUEST"])
    fine = await send(
        server, method="GET", content_type=None, token=token, params={"query": VIEWER}
    )
    assert fine.body == {"data": {"viewer": {"role": "VIEWER"}}}


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
async def test_other_methods_get_a_json_answer(server: Server, org: Org, method: str) -> None:
    answer = await send(
        server, json.dumps({"query": VIEWER}), method=method, token=org.tokens["viewer"]
    )
    assert (answer.status, answer.content_type) == (405, "application/json")
    assert answer.codes == ["BAD_REQUEST"]


# -- issue 18: one reading of every request ---------------------------------------------------

CREATE_ROLE = 'mutation { createRole(input: {name: "dup", policies: []}) { role { id } } }'
ROLE_COUNT = "{ roles { name } }"


async def role_count(org: Org) -> int:
    return len((await org.admin.data(ROLE_COUNT))["roles"])


async def test_a_key_given_twice_is_refused_and_nothing_runs(server: Server, org: Org) -> None:
    """The last `query` used to win: a harmless read first, a mutation second, and the
    mutation ran."""
    before = await role_count(org)
    twice = (
        f'{{"query": {json.dumps(VIEWER)}, "query": {json.dumps(CREATE_ROLE)}}}',
        f'{{"query": {json.dumps(CREATE_ROLE)}, "variables": {{"a": 1, "a": 2}}}}',
        '{"query": "{ viewer { role } }", "variables": {"v": {"x": {"k": 1, "k": 1}}}}',
    )
    for body in twice:
        answer = await send(server, body, token=org.tokens["admin"])
        assert (answer.status, answer.codes) == (400, ["BAD_REQUEST"]), answer
        assert "appears twice" in answer.body["errors"][0]["message"]
    assert await role_count(org) == before


async def test_a_get_parameter_given_twice_is_refused(server: Server, org: Org) -> None:
    """The second `query` of a GET used to run."""
    token = org.tokens["admin"]
    for repeated in ("query", "variables", "operationName"):
        query = f"query={VIEWER}&query={VIEWER}" if repeated == "query" else f"query={VIEWER}"
        if repeated != "query":
            query += f"&{repeated}=&{repeated}="
        answer = await send(server, method="GET", content_type=None, token=token, url_query=query)
        assert (answer.status, answer.codes) == (400, ["BAD_REQUEST"]), (repeated, answer)
        assert f"`{repeated}`" in answer.body["errors"][0]["message"]
    once = await send(
        server, method="GET", content_type=None, token=token, url_query=f"query={VIEWER}"
    )
    assert once.body == {"data": {"viewer": {"role": "ADMIN"}}}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
async def test_only_utf_8_bodies_are_read(server: Server, org: Org, encoding: str) -> None:
    """UTF-16 bodies used to be accepted (json.loads guesses the encoding of bytes)."""
    body = json.dumps({"query": VIEWER}).encode(encoding)
    answer = await send(server, body, token=org.tokens["viewer"])
    assert (answer.status, answer.codes) == (400, ["BAD_REQUEST"]), answer


async def test_a_charset_other_than_utf_8_is_refused(server: Server, org: Org) -> None:
    body = json.dumps({"query": VIEWER})
    for charset, status in (("utf-16", 415), ("latin-1", 415), ("UTF-8", 200), ("utf-8", 200)):
        content_type = f"application/json; charset={charset}"
        answer = await send(server, body, token=org.tokens["viewer"], content_type=content_type)
        assert answer.status == status, (charset, answer)


@pytest.mark.parametrize(
    "number", ["1" + "0" * 19, "-" + "9" * 20, "9" * 5000, "1e400", "-1e400"], ids=str.__len__
)
async def test_numbers_past_64_bits_or_a_float_are_refused_before_conversion(
    server: Server, org: Org, number: str
) -> None:
    body = '{"query": "query($n: Int) { spaces(first: $n) { totalCount } }", "variables": '
    answer = await send(server, body + f'{{"n": {number}}}}}', token=org.tokens["viewer"])
    assert (answer.status, answer.codes) == (400, ["BAD_REQUEST"]), answer


async def test_a_request_of_too_many_values_is_refused_before_graphql_sees_it(
    server: Server, org: Org
) -> None:
    """100,000 ids held the event loop 0.1 s while graphql-core coerced them one by one."""
    query = "query($ids: [ID!]!) { nodes(ids: $ids) { id } }"
    many = await send(
        server,
        json_body={"query": query, "variables": {"ids": ["a"] * 2_001}},
        token=org.tokens["viewer"],
    )
    assert (many.status, many.codes) == (400, ["BAD_REQUEST"]), many
    assert "2000 JSON values" in many.body["errors"][0]["message"]
    unused = await send(
        server,
        json_body={"query": VIEWER, "variables": {"v": [[0] * 100] * 21}},
        token=org.tokens["viewer"],
    )
    assert (unused.status, unused.codes) == (400, ["BAD_REQUEST"]), unused
    # The most an operation takes is answered as before.
    hundred = await send(
        server,
        json_body={"query": query, "variables": {"ids": ["a"] * 100}},
        token=org.tokens["viewer"],
    )
    assert hundred.body == {"data": {"nodes": [None] * 100}}
