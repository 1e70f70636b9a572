"""Issue 7, defect 4: whatever shape a cluster sends, the caller gets PROVIDER_ERROR.

A hostile (or broken) API server answers the namespace list and the namespace
creation with every malformed shape we could think of: objects without metadata,
nulls where names go, lists that are not lists, bodies that are not JSON or not
UTF-8, wrong content types, truncated and absurdly nested JSON. Each one is a
PROVIDER_ERROR saying "unexpected answer from the API server" (or the HTTP status,
for error answers), on that one field; never INTERNAL_SERVER_ERROR, never a
traceback in the server's log, and the rest of the query still answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from sim.kube_standin import HostileAnswer, KubeStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.server import Server

UNEXPECTED = "unexpected answer from the API server"
NAMESPACES = "query($id: ID!) { space(id: $id) { name namespaces { name } } viewer { role } }"
CREATE_NAMESPACE = f"""
mutation($input: CreateNamespaceInput!) {{
  createNamespace(input: $input) {{ namespace {{ name }} {make.USER_ERRORS} }}
}}"""


def listing(*items: Any) -> bytes:
    return json.dumps({"kind": "NamespaceList", "apiVersion": "v1", "items": list(items)}).encode()


def named(name: Any, **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **metadata}}


# label: (answer, what the error message starts with)
LIST_ANSWERS: dict[str, tuple[HostileAnswer, str]] = {
    "items-of-empty-objects": (HostileAnswer(listing({})), UNEXPECTED),
    "metadata-null": (HostileAnswer(listing({"metadata": None})), UNEXPECTED),
    "metadata-a-string": (HostileAnswer(listing({"metadata": "x"})), UNEXPECTED),
    "item-a-string": (HostileAnswer(listing("default")), UNEXPECTED),
    "item-null": (HostileAnswer(listing(None)), UNEXPECTED),
    "name-null": (HostileAnswer(listing(named(None))), UNEXPECTED),
    "name-a-number": (HostileAnswer(listing(named(5))), UNEXPECTED),
    "name-not-a-dns-label": (HostileAnswer(listing(named("Not A Label"))), UNEXPECTED),
    "name-too-long": (HostileAnswer(listing(named("a" * 64))), UNEXPECTED),
    "labels-a-list": (HostileAnswer(listing(named("a", labels=["x"]))), UNEXPECTED),
    "label-value-a-number": (HostileAnswer(listing(named("a", labels={"k": 5}))), UNEXPECTED),
    "label-value-nan": (
        HostileAnswer(b'{"items":[{"metadata":{"name":"a","labels":{"k":NaN}}}]}'),
        UNEXPECTED,
    ),
    "creation-time-garbage": (
        HostileAnswer(listing(named("a", creationTimestamp="yesterday"))),
        UNEXPECTED,
    ),
    "creation-time-a-number": (
        HostileAnswer(listing(named("a", creationTimestamp=5))),
        UNEXPECTED,
    ),
    "creation-time-without-zone": (
        HostileAnswer(listing(named("a", creationTimestamp="2026-01-01T00:00:00"))),
        UNEXPECTED,
    ),
    "items-an-object": (HostileAnswer(b'{"items":{"a":1}}'), UNEXPECTED),
    "items-a-string": (HostileAnswer(b'{"items":"x"}'), UNEXPECTED),
    "items-null": (HostileAnswer(b'{"items":null}'), UNEXPECTED),
    "no-items": (HostileAnswer(b'{"kind":"NamespaceList"}'), UNEXPECTED),
    "top-level-list": (HostileAnswer(b"[1,2]"), UNEXPECTED),
    "top-level-string": (HostileAnswer(b'"x"'), UNEXPECTED),
    "top-level-null": (HostileAnswer(b"null"), UNEXPECTED),
    "empty-body": (HostileAnswer(b""), UNEXPECTED),
    "not-json-as-json": (HostileAnswer(b"this is not json"), UNEXPECTED),
    "truncated-json": (HostileAnswer(b'{"items":[{"metadata":{"name":"a"'), UNEXPECTED),
    "invalid-utf8": (HostileAnswer(b'{"items":[{"metadata":{"name":"\xff\xfe"}}]}'), UNEXPECTED),
    "deeply-nested": (HostileAnswer(b"[" * 100_000 + b"]" * 100_000), UNEXPECTED),
    "html-200": (HostileAnswer(b"<html>hello</html>", content_type="text/html"), UNEXPECTED),
    "right-body-wrong-type": (
        HostileAnswer(listing(named("a")), content_type="text/plain"),
        UNEXPECTED,
    ),
    "yaml": (
        HostileAnswer(b"items:\n- metadata:\n    name: a\n", content_type="application/yaml"),
        UNEXPECTED,
    ),
    "protobuf": (
        HostileAnswer(b"k8s\x00\x0a\x02", content_type="application/vnd.kubernetes.protobuf"),
        UNEXPECTED,
    ),
    "no-content-type": (HostileAnswer(listing(named("a")), content_type=None), UNEXPECTED),
    "204-no-content": (HostileAnswer(b"", status=204, content_type=None), UNEXPECTED),
    "500-not-json": (
        HostileAnswer(b"\xff oops", status=500, content_type="text/plain"),
        "HTTP 500",
    ),
    "404-status-without-message": (HostileAnswer(b'{"kind":"Status"}', status=404), "HTTP 404"),
    "403-message-a-number": (HostileAnswer(b'{"message":5}', status=403), "403 forbidden"),
}

CREATE_ANSWERS: dict[str, tuple[HostileAnswer, str]] = {
    "201-metadata-null": (HostileAnswer(b'{"metadata":null}', status=201), UNEXPECTED),
    "201-empty-object": (HostileAnswer(b"{}", status=201), UNEXPECTED),
    "201-not-json": (HostileAnswer(b"created!", status=201), UNEXPECTED),
    "201-a-list": (HostileAnswer(b"[]", status=201), UNEXPECTED),
    "201-name-null": (HostileAnswer(b'{"metadata":{"name":null}}', status=201), UNEXPECTED),
    "201-another-name": (HostileAnswer(b'{"metadata":{"name":"other"}}', status=201), UNEXPECTED),
    "201-html": (HostileAnswer(b"<p>ok</p>", status=201, content_type="text/html"), UNEXPECTED),
    "200-truncated": (HostileAnswer(b'{"metadata":{"na', status=200), UNEXPECTED),
    "422-invalid-utf8": (HostileAnswer(b"\xff\xfe", status=422), "HTTP 422"),
}


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


@pytest.fixture(scope="module")
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


@pytest.fixture
def cluster(standin: KubeStandIn) -> Iterator[KubeStandIn]:
    yield standin
    standin.heal()


def assert_clean(message: str) -> None:
    assert message.isprintable() and len(message) <= 400, message


@pytest.mark.parametrize("shape", LIST_ANSWERS)
async def test_a_malformed_namespace_list_is_a_provider_error(
    server: Server, org: Org, cluster: KubeStandIn, shape: str
) -> None:
    answer, reason = LIST_ANSWERS[shape]
    space = await make.register_on_standin(org.admin, cluster)
    cluster.answers["GET /api/v1/namespaces"] = answer

    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})

    assert response["data"] == {
        "space": {"name": space["name"], "namespaces": None},
        "viewer": {"role": "VIEWER"},
    }
    [error] = response["errors"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR", error
    assert error["path"] == ["space", "namespaces"]
    assert error["message"].startswith(reason), error["message"]
    assert_clean(error["message"])
    assert "Traceback" not in server.log()


@pytest.mark.parametrize("shape", CREATE_ANSWERS)
async def test_a_malformed_creation_answer_is_a_provider_error(
    server: Server, org: Org, cluster: KubeStandIn, shape: str
) -> None:
    answer, reason = CREATE_ANSWERS[shape]
    space = await make.register_on_standin(org.admin, cluster)
    cluster.answers["POST /api/v1/namespaces"] = answer

    payload = await org.editor.mutate(
        CREATE_NAMESPACE, {"input": {"spaceId": space["id"], "name": make.unique("odd")}}
    )

    assert payload["namespace"] is None
    [error] = payload["userErrors"]
    assert (error["field"], error["code"]) == (None, "PROVIDER_ERROR")
    assert error["message"].startswith(reason), error["message"]
    assert_clean(error["message"])
    assert "Traceback" not in server.log()


async def test_a_well_formed_answer_still_lists(org: Org, cluster: KubeStandIn) -> None:
    """The checks refuse only what the API never sends: a minimal but valid list passes."""
    space = await make.register_on_standin(org.admin, cluster)
    cluster.answers["GET /api/v1/namespaces"] = HostileAnswer(
        listing(named("a"), named("b", labels=None, creationTimestamp="2026-01-01T00:00:00Z"))
    )
    data = await org.viewer.data(NAMESPACES, {"id": space["id"]})
    assert data["space"]["namespaces"] == [{"name": "a"}, {"name": "b"}]
