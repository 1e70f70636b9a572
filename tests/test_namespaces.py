"""Namespaces through the GraphQL server, live on a cluster stand-in registered as a
GENERIC space: listing, creating with our label, every refusal, and every way the
cluster can fail, for the query field and for the mutation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sim.kube_standin import KubeStandIn
from sim.pki import CertificateAuthority
from sim.ports import free_port
from tests.conftest import Org, new_org
from tests.support import factories as make
from tests.support.server import Server

MANAGED_BY = "app.kubernetes.io/managed-by"

SPACE_NAMESPACES = """
query($id: ID!) {
  space(id: $id) { id name status namespaces { name managed createdAt space { id } } }
  viewer { role }
}"""
PROBED = "query($id: ID!) { space(id: $id) { status held lastProbe { error } } }"
CREATE_NAMESPACE = f"""
mutation($input: CreateNamespaceInput!) {{
  createNamespace(input: $input) {{
    namespace {{ name managed createdAt space {{ id name }} }}
    {make.USER_ERRORS}
  }}
}}"""


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # The probe loop stays out of the way: these tests decide what the cluster does.
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


@pytest.fixture(scope="module")
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


@pytest.fixture
def cluster(standin: KubeStandIn) -> Iterator[KubeStandIn]:
    """The module's stand-in, healed after tests that flip its fault switches."""
    yield standin
    standin.heal()


def namespace_calls(cluster: KubeStandIn) -> int:
    return sum(count for call, count in cluster.requests.items() if "namespaces" in call)


async def register(org: Org, cluster: KubeStandIn, **config: str) -> dict[str, Any]:
    """A GENERIC space on the stand-in (a distinct server path each time), by token unless
    config says otherwise."""
    given = {
        "clusterName": make.unique("standin"),
        "server": f"{cluster.url}/{make.unique('c')}",
        "caCert": cluster.ca_pem,
        **config,
    }
    if "clientCertificate" not in given:
        given.setdefault("serviceAccountToken", cluster.token)
    payload = await org.admin.mutate(
        make.REGISTER_SPACE,
        {"input": {"name": make.unique("space"), "provider": "GENERIC", "config": given}},
    )
    space: dict[str, Any] = make.succeeded(payload)["space"]
    return space


async def create(client: Any, space_id: str, name: str) -> dict[str, Any]:
    payload: dict[str, Any] = await client.mutate(
        CREATE_NAMESPACE, {"input": {"spaceId": space_id, "name": name}}
    )
    return payload


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_listing_shows_the_clusters_namespaces_as_unmanaged(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await register(org, cluster)
    data = await org.viewer.data(SPACE_NAMESPACES, {"id": space["id"]})
    listed = {n["name"]: n for n in data["space"]["namespaces"]}
    assert {"default", "kube-system"} <= set(listed)
    for name in ("default", "kube-system"):
        assert listed[name]["managed"] is False
        assert listed[name]["space"] == {"id": space["id"]}
        stamp = cluster.namespaces[name]["metadata"]["creationTimestamp"]
        assert parse_time(listed[name]["createdAt"]) == parse_time(stamp), (
            "createdAt is the cluster's"
        )


async def test_a_created_namespace_is_labelled_managed_and_listed(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await register(org, cluster)
    name = make.unique("team")
    payload = await create(org.editor, space["id"], name)
    assert payload["userErrors"] == []
    created = payload["namespace"]
    assert (created["name"], created["managed"]) == (name, True)
    assert created["space"] == {"id": space["id"], "name": space["name"]}
    assert abs(datetime.now(UTC) - parse_time(created["createdAt"])) < timedelta(minutes=5)
    assert cluster.namespaces[name]["metadata"]["labels"][MANAGED_BY] == "spacedock"

    data = await org.viewer.data(SPACE_NAMESPACES, {"id": space["id"]})
    listed = {n["name"]: n["managed"] for n in data["space"]["namespaces"]}
    assert listed[name] is True
    assert listed["default"] is False


INVALID_NAMES = {
    "Team-A": "DNS-1123",
    "team_a": "DNS-1123",
    "-team": "DNS-1123",
    "team-": "DNS-1123",
    "tëam": "DNS-1123",
    "": "empty",
    "a" * 64: "63 characters",
}


@pytest.mark.parametrize("name", INVALID_NAMES)
async def test_a_name_that_is_no_dns_label_is_invalid_without_calling_the_cluster(
    org: Org, cluster: KubeStandIn, name: str
) -> None:
    space = await register(org, cluster)
    calls = namespace_calls(cluster)
    payload = await create(org.editor, space["id"], name)
    assert payload["namespace"] is None
    assert make.error_fields(payload) == {(("input", "name"), "INVALID")}
    assert INVALID_NAMES[name] in payload["userErrors"][0]["message"]
    assert namespace_calls(cluster) == calls


async def test_a_bad_name_and_an_unknown_space_are_reported_together(org: Org) -> None:
    payload = await create(org.editor, "spc_doesnotexist", "Bad_Name")
    assert make.error_fields(payload) == {
        (("input", "name"), "INVALID"),
        (("input", "spaceId"), "NOT_FOUND"),
    }


async def test_an_existing_namespace_is_a_conflict(org: Org, cluster: KubeStandIn) -> None:
    space = await register(org, cluster)
    name = make.unique("twice")
    assert (await create(org.editor, space["id"], name))["userErrors"] == []
    for existing in (name, "kube-system"):
        payload = await create(org.editor, space["id"], existing)
        assert payload["namespace"] is None
        assert make.error_fields(payload) == {(("input", "name"), "CONFLICT")}
        assert existing in payload["userErrors"][0]["message"]


async def test_a_held_space_refuses_until_the_hold_is_lifted(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await register(org, cluster)
    held = await make.set_space_status(org.editor, space["id"], "INACTIVE")
    assert held["status"] == "INACTIVE"
    calls = namespace_calls(cluster)
    name = make.unique("held")

    payload = await create(org.editor, space["id"], name)
    assert make.error_fields(payload) == {(("input", "spaceId"), "PRECONDITION_FAILED")}
    assert "INACTIVE" in payload["userErrors"][0]["message"]
    assert namespace_calls(cluster) == calls
    assert name not in cluster.namespaces

    await make.set_space_status(org.editor, space["id"], "ACTIVE")
    assert (await create(org.editor, space["id"], name))["namespace"]["name"] == name


async def test_a_deregistered_space_refuses_and_lists_nothing(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await register(org, cluster)
    await make.deregister_space(org.admin, space["id"])
    calls = namespace_calls(cluster)

    payload = await create(org.editor, space["id"], make.unique("gone"))
    assert make.error_fields(payload) == {(("input", "spaceId"), "PRECONDITION_FAILED")}
    assert "deregistered" in payload["userErrors"][0]["message"]

    response = await org.viewer.call(SPACE_NAMESPACES, {"id": space["id"]})
    assert response["data"]["space"]["namespaces"] is None
    assert make.top_level_codes(response) == ["PROVIDER_ERROR"]
    assert response["errors"][0]["message"].startswith("cluster access revoked")
    assert namespace_calls(cluster) == calls


def _refused(cluster: KubeStandIn) -> None:
    cluster.refuse()


def _unavailable(cluster: KubeStandIn) -> None:
    cluster.status_code = 503


def _wrong_ca(cluster: KubeStandIn) -> None:
    cluster.present_wrong_ca()


def _no_fault(cluster: KubeStandIn) -> None:
    """The cluster is fine; the space's own token is what it rejects."""


WRONG_TOKEN = "token-the-cluster-never-issued"
# (fault, registration config, the reason the error must start with)
FAULTS: dict[str, tuple[Callable[[KubeStandIn], None], dict[str, str], str]] = {
    "refused": (_refused, {}, "connection refused"),
    "503": (_unavailable, {}, "HTTP 503"),
    "wrong-ca": (_wrong_ca, {}, "TLS"),
    "401": (_no_fault, {"serviceAccountToken": WRONG_TOKEN}, "401 unauthorized"),
}


@pytest.mark.parametrize("fault", FAULTS)
async def test_an_unreachable_cluster_nulls_only_the_namespaces_field(
    org: Org, cluster: KubeStandIn, fault: str
) -> None:
    breaks, config, reason = FAULTS[fault]
    space = await register(org, cluster, **config)
    breaks(cluster)

    response = await org.viewer.call(SPACE_NAMESPACES, {"id": space["id"]})

    assert response["data"]["space"]["namespaces"] is None
    assert response["data"]["space"]["name"] == space["name"], "the rest of the query answers"
    assert response["data"]["viewer"] == {"role": "VIEWER"}
    [error] = response["errors"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR"
    assert error["path"] == ["space", "namespaces"]
    assert error["message"].startswith(reason), error["message"]
    assert WRONG_TOKEN not in error["message"] and cluster.token not in error["message"]


@pytest.mark.parametrize("fault", FAULTS)
async def test_an_unreachable_cluster_is_a_provider_error_for_create(
    org: Org, cluster: KubeStandIn, fault: str
) -> None:
    breaks, config, reason = FAULTS[fault]
    space = await register(org, cluster, **config)
    breaks(cluster)
    name = make.unique("unreached")

    payload = await create(org.editor, space["id"], name)

    assert payload["namespace"] is None
    [error] = payload["userErrors"]
    assert (error["field"], error["code"]) == (None, "PROVIDER_ERROR")
    assert error["message"].startswith(reason), error["message"]
    assert WRONG_TOKEN not in error["message"] and cluster.token not in error["message"]
    cluster.heal()
    assert name not in cluster.namespaces


async def test_one_unreachable_space_does_not_hide_the_others_namespaces(
    org: Org, cluster: KubeStandIn
) -> None:
    reachable = await register(org, cluster)
    # Nothing listens on this port: connection refused, for this space only.
    unreachable = await register(org, cluster, server=f"https://127.0.0.1:{free_port()}")
    response = await org.viewer.call("{ spaces { nodes { id namespaces { name } } } }")

    nodes = response["data"]["spaces"]["nodes"]
    by_id = {node["id"]: node["namespaces"] for node in nodes}
    assert "default" in {n["name"] for n in by_id[reachable["id"]]}
    assert by_id[unreachable["id"]] is None
    [error] = response["errors"]
    at = [node["id"] for node in nodes].index(unreachable["id"])
    assert error["path"] == ["spaces", "nodes", at, "namespaces"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR"
    assert error["message"].startswith("connection refused")


async def test_a_configured_ca_that_did_not_sign_the_cluster_is_tls(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await register(org, cluster, caCert=CertificateAuthority("not-the-cluster").pem)
    response = await org.viewer.call(SPACE_NAMESPACES, {"id": space["id"]})
    assert make.top_level_codes(response) == ["PROVIDER_ERROR"]
    assert response["errors"][0]["message"].startswith("TLS")


async def test_a_viewer_may_list_but_not_create(org: Org, cluster: KubeStandIn) -> None:
    space = await register(org, cluster)
    calls = namespace_calls(cluster)
    name = make.unique("viewer")
    payload = await create(org.viewer, space["id"], name)
    assert payload["namespace"] is None
    assert make.error_fields(payload) == {(None, "FORBIDDEN")}
    assert "namespace:create" in payload["userErrors"][0]["message"]
    assert namespace_calls(cluster) == calls
    assert name not in cluster.namespaces


async def test_another_orgs_space_is_not_found(
    org: Org, other_org: Org, cluster: KubeStandIn
) -> None:
    theirs = await register(other_org, cluster)
    calls = namespace_calls(cluster)
    name = make.unique("intruder")

    payload = await create(org.admin, theirs["id"], name)
    assert payload["namespace"] is None
    assert make.error_fields(payload) == {(("input", "spaceId"), "NOT_FOUND")}
    response = await org.admin.call(SPACE_NAMESPACES, {"id": theirs["id"]})
    assert response["data"]["space"] is None and not response["errors"]
    assert namespace_calls(cluster) == calls
    assert name not in cluster.namespaces


async def test_a_client_certificate_space_lists_and_creates(org: Org, cluster: KubeStandIn) -> None:
    pair = cluster.client_certificate()
    space = await register(
        org, cluster, clientCertificate=pair.certificate_pem, clientKey=pair.key_pem
    )
    data = await org.viewer.data(SPACE_NAMESPACES, {"id": space["id"]})
    assert "kube-system" in {n["name"] for n in data["space"]["namespaces"]}
    name = make.unique("cert")
    assert (await create(org.editor, space["id"], name))["namespace"]["managed"] is True
    assert cluster.namespaces[name]["metadata"]["labels"][MANAGED_BY] == "spacedock"


async def test_slow_cluster_calls_hold_no_database_connection(
    org: Org, cluster: KubeStandIn
) -> None:
    # More creates than the server's connection pool holds (15 on SQLite, 30 on Postgres),
    # against a cluster that holds every answer: if each kept its transaction open across
    # the cluster call, only a pool's worth would reach the cluster, and any other request
    # would queue behind them. Asserted by order, not by time: the cluster answers only
    # once every create has reached it and a read has been answered.
    in_flight = 40
    space = await register(org, cluster)
    cluster.hold()
    posted = cluster.requests["POST /api/v1/namespaces"]
    names = [make.unique("slow") for _ in range(in_flight)]
    creates = [asyncio.create_task(create(org.editor, space["id"], name)) for name in names]
    deadline = time.monotonic() + 60  # a bound on the wait, not a speed requirement
    while cluster.requests["POST /api/v1/namespaces"] - posted < in_flight:
        assert not any(c.done() for c in creates), "creates queued behind the cluster calls"
        assert time.monotonic() < deadline, "the creates never reached the cluster"
        await asyncio.sleep(0.02)

    data = await org.viewer.data("{ spaces { totalCount } }")

    assert data["spaces"]["totalCount"] == 1
    assert not any(c.done() for c in creates), "a database read waited behind cluster calls"
    cluster.release()
    payloads = await asyncio.gather(*creates)
    assert all(p["userErrors"] == [] for p in payloads)
    assert set(names) <= set(cluster.namespaces)


async def test_a_space_whose_probes_failed_refuses_with_the_probe_reason(
    server: Server, cluster: KubeStandIn, tmp_path: Path
) -> None:
    # This module's server probes hourly; for this test a replica whose probe loop runs fast
    # takes its place on the same database (and key), so that failing probes take a space
    # INACTIVE without an operator hold. Two replicas share one lease schedule, so the slow
    # one stops while the fast one runs.
    server.stop()
    fast = Server(
        backend=server.backend,
        log_path=tmp_path / "fast-probes.log",
        env={
            "SPACEDOCK_SECRET_KEY": server.secret_key,
            "SPACEDOCK_PROBE_INTERVAL_S": "0.3",
            "SPACEDOCK_PROBE_TIMEOUT_S": "1",
            "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "2",
        },
    ).start()
    try:
        org = await new_org(fast, "probed")
        space = await register(org, cluster, serviceAccountToken=WRONG_TOKEN)
        deadline = time.monotonic() + 15
        while True:
            found = (await org.viewer.data(PROBED, {"id": space["id"]}))["space"]
            if found["status"] == "INACTIVE":
                break
            assert time.monotonic() < deadline, f"the failing probes never told: {found}"
            await asyncio.sleep(0.05)
        assert found["held"] is False

        payload = await create(org.editor, space["id"], make.unique("probed"))

        assert make.error_fields(payload) == {(("input", "spaceId"), "PRECONDITION_FAILED")}
        message = payload["userErrors"][0]["message"]
        assert "INACTIVE" in message and "401 unauthorized" in message
        assert WRONG_TOKEN not in message
    finally:
        fast.stop()
        server.start()
