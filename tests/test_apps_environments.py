"""Apps on environments, end to end through the running server: an environment's space runs
Flux (the host stand-in's controllers) and the app's GitRepository and Kustomization land in
the environment's namespace; a space without Flux is refused; a space that goes INACTIVE
holds the revision for 3 tries, then dead-letters it until requeueAppRevision delivers it
once the space is back; a deregistered space gates its apps; a Git credential is sealed,
never shown and only written into the target's Secret."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim.host_standin import HostStandIn
from tests.conftest import Org, new_org, stop_checked
from tests.support import apps as support
from tests.support import factories as make
from tests.support.cloudspaces import eventually
from tests.support.server import Backend, Server

GIT = "https://git.example/shop.git"


@pytest.fixture(scope="module")
def host(backend: Backend) -> Iterator[HostStandIn]:
    """One per backend: the objects a test leaves on it must not meet the other backend's run."""
    with HostStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[HostStandIn]:
    """A cluster that does not run Flux: no CRDs, no controllers."""
    with HostStandIn(flux=False) as standin:
        yield standin


@pytest.fixture(scope="module")
def server(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    env = {
        "SPACEDOCK_PROBE_INTERVAL_S": "1",
        "SPACEDOCK_PROBE_TIMEOUT_S": "0.5",
        "SPACEDOCK_APP_STATUS_INTERVAL_S": "0.2",
        "SPACEDOCK_APP_RETRY_INTERVAL_S": "0.3",
    }
    running = Server(backend=backend, log_path=log_path, env=env).start()
    yield running
    stop_checked(running)


@pytest.fixture
def healthy(host: HostStandIn) -> Iterator[HostStandIn]:
    yield host
    host.heal()
    host.listen()


async def environment_on(
    org: Org, cluster: HostStandIn, namespace: str = "shop"
) -> tuple[dict[str, Any], dict[str, Any]]:
    space = await make.register_generic_space(
        org.admin, server=cluster.url, ca=cluster.ca_pem, token=cluster.token
    )
    environment = await make.create_environment(org.admin, space["id"], namespace=namespace)
    return space, environment


async def until_space(org: Org, space_id: str, status: str) -> None:
    async def reached() -> bool:
        data = await org.viewer.data(
            "query($id: ID!) { space(id: $id) { status } }", {"id": space_id}
        )
        return bool(data["space"]["status"] == status)

    await eventually(reached, 30)


def shop_files() -> dict[str, str]:
    return {
        "deploy/app.yaml": support.manifests(support.deployment("shop", 2), support.service("shop"))
    }


async def test_a_git_app_on_an_environment_runs_in_its_namespace(
    server: Server, healthy: HostStandIn
) -> None:
    host = healthy
    org = await new_org(server, "envapp")
    repo = host.flux.git(GIT)
    sha = repo.commit(shop_files())
    _, environment = await environment_on(org, host)
    async with support.watching(server, org.viewer, environmentId=environment["id"]) as watcher:
        payload = await support.create(
            org.editor, "shop", {"environmentId": environment["id"]}, support.git_input(GIT)
        )
        app_id = payload["app"]["id"]
        assert payload["app"]["namespace"] == "shop"
        assert payload["revision"]["number"] == 1 and payload["revision"]["state"] == "QUEUED"
        ready = await support.until_status(org.viewer, app_id, "READY")
        await watcher.until(app_id, kind="REVISION", revisionNumber=1, revisionState="READY")
    assert ready["lastAppliedRevision"] == f"main@sha1:{sha}"
    assert ready["statusReason"] == "ReconciliationSucceeded"
    assert ready["workloads"] == [
        {
            "kind": "Deployment",
            "namespace": "shop",
            "name": "shop",
            "readyReplicas": 2,
            "desiredReplicas": 2,
        }
    ]
    assert watcher.revision_states(app_id, 1) == ["QUEUED", "APPLYING", "APPLIED", "READY"]
    assert ready["latestRevision"]["fluxRevision"] == f"main@sha1:{sha}"
    # What spacedock wrote: Flux's kinds at their pinned versions, in the environment's
    # namespace, with its field manager and the app's id.
    kustomization = host.api.find(
        "kustomizations", "shop", "shop", group="kustomize.toolkit.fluxcd.io"
    )
    assert kustomization is not None
    assert kustomization["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1"
    assert kustomization["metadata"]["labels"]["spacedock.dev/app"] == app_id
    assert kustomization["spec"]["targetNamespace"] == "shop"
    assert kustomization["spec"]["prune"] is True
    managers = {m["manager"] for m in kustomization["metadata"]["managedFields"]}
    assert "spacedock" in managers
    source = host.api.find("gitrepositories", "shop", "shop", group="source.toolkit.fluxcd.io")
    assert source is not None and source["spec"]["ref"] == {"branch": "main"}
    assert host.api.find("deployments", "shop", "shop", group="apps") is not None


async def test_a_space_without_flux_is_refused_and_nothing_is_made(
    server: Server, bare_cluster: HostStandIn
) -> None:
    org = await new_org(server, "noflux")
    space, environment = await environment_on(org, bare_cluster)
    await until_space(org, space["id"], "ACTIVE")
    payload = await org.editor.mutate(
        support.CREATE,
        {
            "input": {
                "name": "shop",
                "target": {"environmentId": environment["id"]},
                "source": support.git_input(GIT),
            }
        },
    )
    assert payload["app"] is None
    (error,) = payload["userErrors"]
    assert error["code"] == "PRECONDITION_FAILED"
    assert error["field"] == ["input", "target", "environmentId"]
    assert (
        "does not run Flux" in error["message"]
        and "source.toolkit.fluxcd.io/v1" in error["message"]
    )
    data = await org.viewer.data("{ apps(first: 10) { totalCount } }")
    assert data["apps"]["totalCount"] == 0


async def test_an_inactive_space_dead_letters_after_three_tries_and_requeue_delivers(
    server: Server, healthy: HostStandIn
) -> None:
    host = healthy
    org = await new_org(server, "dlq")
    url = "https://git.example/dlq.git"
    host.flux.git(url).commit(shop_files())
    space, environment = await environment_on(org, host, "dlq")
    await until_space(org, space["id"], "ACTIVE")
    host.refuse(host=True, vclusters=False)
    await until_space(org, space["id"], "INACTIVE")
    async with support.watching(server, org.viewer, environmentId=environment["id"]) as watcher:
        payload = await support.create(
            org.editor, "shop", {"environmentId": environment["id"]}, support.git_input(url)
        )
        app_id, revision_id = payload["app"]["id"], payload["revision"]["id"]
        dead = await watcher.until(app_id, kind="REVISION", revisionState="DEAD_LETTERED")
        tried = [e for e in watcher.of(app_id) if e["kind"] == "REVISION"]
        assert [e["revisionState"] for e in tried] == [
            "QUEUED",
            "QUEUED",
            "QUEUED",
            "DEAD_LETTERED",
        ]
        assert tried[1]["reason"].startswith("try 1 of 3 failed: Space ")
        assert tried[2]["reason"].startswith("try 2 of 3 failed: Space ")
        assert dead["reason"].startswith("not delivered after 3 tries: Space ")
        assert "INACTIVE" in dead["reason"]
        found = await support.app(org.viewer, app_id)
        assert (
            found["latestRevision"]["state"] == "DEAD_LETTERED"
            and found["latestRevision"]["tries"] == 3
        )
        assert "INACTIVE" in found["gate"]
        assert (
            host.api.find("kustomizations", "shop", "dlq", group="kustomize.toolkit.fluxcd.io")
            is None
        )
        # While the space is still down, a requeue is refused, saying why.
        refused = await org.editor.mutate(support.REQUEUE, {"input": {"id": revision_id}})
        assert [e["code"] for e in refused["userErrors"]] == ["PRECONDITION_FAILED"]
        assert "requeue once it recovers" in refused["userErrors"][0]["message"]
        host.listen()
        await until_space(org, space["id"], "ACTIVE")
        requeued = await org.editor.mutate(support.REQUEUE, {"input": {"id": revision_id}})
        assert requeued["userErrors"] == []
        assert requeued["revision"]["state"] == "QUEUED" and requeued["revision"]["tries"] == 0
        await watcher.until(app_id, kind="REVISION", revisionNumber=1, revisionState="READY")
    ready = await support.until_status(org.viewer, app_id, "READY")
    assert ready["gate"] is None
    assert [w["name"] for w in ready["workloads"]] == ["shop"]


async def test_a_deregistered_space_gates_its_apps_and_dead_letters_what_waits(
    server: Server, healthy: HostStandIn
) -> None:
    host = healthy
    org = await new_org(server, "dereg")
    url = "https://git.example/dereg.git"
    host.flux.git(url).commit(shop_files())
    space, environment = await environment_on(org, host, "dereg")
    await until_space(org, space["id"], "ACTIVE")
    host.refuse(host=True, vclusters=False)  # the revision waits for its tries
    await until_space(org, space["id"], "INACTIVE")
    payload = await support.create(
        org.editor, "shop", {"environmentId": environment["id"]}, support.git_input(url)
    )
    app_id = payload["app"]["id"]
    await make.deregister_space(org.admin, space["id"])
    revision = await support.until_revision(org.viewer, app_id, 1, "DEAD_LETTERED")
    assert revision["reason"] == "Space deregistered"
    # The space was already down (UNKNOWN, TargetUnavailable); the watch loop's next pass
    # tells the gone target apart, while the gate reads the space at once.
    found = await support.until_status(org.viewer, app_id, "UNKNOWN", reason="TargetGone")
    assert found["gate"] == "Space deregistered"
    refused = await org.editor.mutate(support.REQUEUE, {"input": {"id": revision["id"]}})
    assert [e["code"] for e in refused["userErrors"]] == ["PRECONDITION_FAILED"]
    # Deleting a gated app removes it at once: nothing of it can be reached.
    deleted = await org.admin.mutate(
        support.DELETE, {"input": {"id": app_id, "confirmName": "shop"}}
    )
    assert deleted["userErrors"] == []

    async def gone() -> bool:
        return (await org.viewer.data(support.ONE, {"id": app_id}))["app"] is None

    await eventually(gone)


async def test_a_git_credential_is_sealed_and_only_written_into_the_targets_secret(
    server: Server, healthy: HostStandIn
) -> None:
    host = healthy
    org = await new_org(server, "private")
    url = "https://git.example/private.git"
    repo = host.flux.git(url)
    repo.commit(shop_files())
    token = "ghp_" + "s3cr3t" * 6
    repo.private(token=token)
    _, environment = await environment_on(org, host, "private")
    source = support.git_input(url, credential={"token": token})
    payload = await support.create(org.editor, "shop", {"environmentId": environment["id"]}, source)
    app_id = payload["app"]["id"]
    assert payload["app"]["hasCredential"] is True
    ready = await support.until_status(org.viewer, app_id, "READY")
    assert token not in str(ready)
    secret = host.api.find("secrets", "shop-git-auth", "private")
    assert secret is not None
    assert base64.b64decode(secret["data"]["bearerToken"]).decode() == token
    # Never in the database in clear, never in the audit log, never in the server's log.
    assert token not in server.log()
    audit = await org.admin.data(
        '{ auditEvents(first: 20, filter: {action: "createApp"}) { nodes { input } } }'
    )
    (event,) = audit["auditEvents"]["nodes"]
    assert event["input"]["source"]["git"]["credential"] == "[redacted]"
    if server.backend.name == "sqlite":
        database = Path(server.backend.url.removeprefix("sqlite+aiosqlite:///"))
        for stored in (database, database.with_name(database.name + "-wal")):
            if stored.exists():
                assert token.encode() not in await asyncio.to_thread(stored.read_bytes)
    # A wrong token: the source fails with Flux's words, and the app says so.
    updated = await org.editor.mutate(
        support.UPDATE,
        {"input": {"id": app_id, "source": support.git_input(url, credential={"token": "nope"})}},
    )
    assert updated["userErrors"] == [] and updated["revision"]["number"] == 2
    failed = await support.until_status(org.viewer, app_id, "FAILED")
    assert failed["statusReason"] == "GitOperationFailed"
    assert "authentication required" in failed["statusMessage"]


async def test_every_fault_of_an_app_is_reported_together_and_nothing_is_made(
    server: Server, host: HostStandIn
) -> None:
    org = await new_org(server, "faults")
    _, environment = await environment_on(org, host, "faults")
    target = {"environmentId": environment["id"], "namespace": "elsewhere"}
    source = {
        "git": {
            "url": "https://user:hunter2@git.example/x.git",
            "branch": "main",
            "tag": "v1",
            "path": "../up",
            "interval": "soon",
            "credential": {"token": "t", "sshPrivateKey": "k"},
        }
    }
    payload = await org.editor.mutate(
        support.CREATE, {"input": {"name": "Not_A_Label", "target": target, "source": source}}
    )
    assert payload["app"] is None
    faults = {tuple(e["field"]): e["code"] for e in payload["userErrors"]}
    git = ("input", "source", "git")
    assert faults == {
        ("input", "name"): "INVALID",
        ("input", "target", "namespace"): "INVALID",
        (*git, "url"): "INVALID",
        (*git, "tag"): "INVALID",
        (*git, "path"): "INVALID",
        (*git, "interval"): "INVALID",
        (*git, "credential"): "INVALID",
    }
    assert "hunter2" not in str(payload)
    helm = {"helm": {"repositoryUrl": "ftp://charts", "chart": "web", "values": "- a list\n"}}
    payload = await org.editor.mutate(
        support.CREATE,
        {"input": {"name": "ok", "target": {"environmentId": environment["id"]}, "source": helm}},
    )
    faults = {tuple(e["field"]): e["message"] for e in payload["userErrors"]}
    assert set(faults) == {
        ("input", "source", "helm", "repositoryUrl"),
        ("input", "source", "helm", "values"),
    }
    assert "must be a YAML mapping" in faults[("input", "source", "helm", "values")]
    both = {
        "git": {"url": "https://git.example/x.git"},
        "helm": {"repositoryUrl": "https://c", "chart": "c"},
    }
    payload = await org.editor.mutate(
        support.CREATE,
        {"input": {"name": "ok", "target": {"environmentId": environment["id"]}, "source": both}},
    )
    assert [(e["field"], e["code"]) for e in payload["userErrors"]] == [
        (["input", "source"], "INVALID")
    ]
    assert (await org.viewer.data("{ apps(first: 5) { totalCount } }"))["apps"]["totalCount"] == 0
    # A name is unique per target; the kind of an app's source stays.
    made = await support.create(
        org.editor, "one", {"environmentId": environment["id"]}, support.git_input(GIT)
    )
    again = await org.editor.mutate(
        support.CREATE,
        {
            "input": {
                "name": "one",
                "target": {"environmentId": environment["id"]},
                "source": support.git_input(GIT),
            }
        },
    )
    assert [(e["field"], e["code"]) for e in again["userErrors"]] == [
        (["input", "name"], "CONFLICT")
    ]
    switched = await org.editor.mutate(
        support.UPDATE,
        {
            "input": {
                "id": made["app"]["id"],
                "source": support.helm_input("https://c.example", "c"),
            }
        },
    )
    assert [(e["field"], e["code"]) for e in switched["userErrors"]] == [
        (["input", "source"], "INVALID")
    ]
    same = await org.editor.mutate(
        support.UPDATE, {"input": {"id": made["app"]["id"], "source": support.git_input(GIT)}}
    )
    assert (
        same["userErrors"] == [] and same["revision"]["number"] == 1
    )  # nothing changed, no revision
