"""What the app tests share: the GraphQL documents, a gql subscriber of appChanged, waits on
an app's status and revisions, and what a test puts behind a Git URL or in a Helm chart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import yaml

from tests.support import factories as make
from tests.support.cloudspaces import eventually, request, wait_for_subscribers
from tests.support.graphql import GraphQL
from tests.support.server import Server

REVISION = """
  id number state tries reason rollbackOf createdBy createdAt appliedAt finishedAt fluxRevision
  source {
    __typename
    ... on GitSource { url branch tag semver commit path interval }
    ... on HelmSource { repositoryUrl chart version values interval }
  }
"""
APP = f"""
  id name namespace vclusterName suspended hasCredential status statusReason statusMessage
  lastAppliedRevision lastAttemptedRevision lastSyncHandledAt gate createdAt
  workloads {{ kind namespace name readyReplicas desiredReplicas }}
  latestRevision {{ {REVISION} }}
"""
PAYLOAD = f"app {{ {APP} }} revision {{ {REVISION} }} {make.USER_ERRORS}"


def mutation(name: str, input_type: str) -> str:
    return f"mutation($input: {input_type}!) {{ {name}(input: $input) {{ {PAYLOAD} }} }}"


CREATE = mutation("createApp", "CreateAppInput")
UPDATE = mutation("updateApp", "UpdateAppInput")
SUSPEND = mutation("suspendApp", "AppIdInput")
RESUME = mutation("resumeApp", "AppIdInput")
SYNC = mutation("syncApp", "AppIdInput")
DELETE = mutation("deleteApp", "DeleteAppInput")
REQUEUE = mutation("requeueAppRevision", "AppRevisionIdInput")
ROLLBACK = mutation("rollbackApp", "RollbackAppInput")
ONE = f"""
query($id: ID!) {{
  app(id: $id) {{ {APP} revisions(first: 20) {{ totalCount nodes {{ {REVISION} }} }} }}
}}"""
EVENTS = """
subscription($appId: ID, $cloudSpaceId: ID, $environmentId: ID) {
  appChanged(appId: $appId, cloudSpaceId: $cloudSpaceId, environmentId: $environmentId) {
    kind appId previousStatus status reason message revisionNumber revisionState at
    app { id status }
  }
}"""

WEB = "nginx:1.27"


def deployment(name: str, replicas: int = 1, image: str = WEB) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": image,
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                        }
                    ]
                },
            },
        },
    }


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 80}]},
    }


def manifests(*objects: dict[str, Any]) -> str:
    return yaml.safe_dump_all(list(objects))


def git_input(url: str, **fields: Any) -> dict[str, Any]:
    return {"git": {"url": url, "path": "./deploy", **fields}}


def helm_input(url: str, chart: str, **fields: Any) -> dict[str, Any]:
    return {"helm": {"repositoryUrl": url, "chart": chart, **fields}}


def chart_render(name: str) -> Any:
    """A chart that installs one Deployment with `replicaCount` replicas."""

    def render(values: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
        made = deployment(f"{release}-{name}", int(values.get("replicaCount", 1)))
        made["metadata"]["namespace"] = namespace
        return [made]

    return render


async def create(
    client: GraphQL, name: str, target: dict[str, Any], source: dict[str, Any]
) -> dict[str, Any]:
    payload = await client.mutate(
        CREATE, {"input": {"name": name, "target": target, "source": source}}
    )
    assert payload["userErrors"] == [], payload["userErrors"]
    return payload


async def app(client: GraphQL, app_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await client.data(ONE, {"id": app_id}))["app"]
    return found


async def until_status(
    client: GraphQL,
    app_id: str,
    status: str,
    timeout_s: float = 60.0,
    reason: str | None = None,
) -> dict[str, Any]:
    """The app once it shows `status` (and `reason`, when given)."""

    async def reached() -> dict[str, Any] | None:
        found = await app(client, app_id)
        if found["status"] != status:
            return None
        return found if reason is None or found["statusReason"] == reason else None

    return await eventually(reached, timeout_s)


async def until_revision(
    client: GraphQL, app_id: str, number: int, state: str, timeout_s: float = 60.0
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        found = await app(client, app_id)
        (revision,) = [r for r in found["revisions"]["nodes"] if r["number"] == number]
        return revision if revision["state"] == state else None

    return await eventually(reached, timeout_s)


class Watcher:
    """A gql subscriber of appChanged, collecting events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def of(self, app_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["appId"] == app_id]

    def revision_states(self, app_id: str, number: int) -> list[str]:
        return [
            e["revisionState"]
            for e in self.of(app_id)
            if e["kind"] == "REVISION" and e["revisionNumber"] == number
        ]

    def statuses(self, app_id: str) -> list[str]:
        return [e["status"] for e in self.of(app_id) if e["kind"] == "STATUS"]

    async def until(self, app_id: str, timeout_s: float = 60.0, **wanted: Any) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            found = [e for e in self.of(app_id) if all(e.get(k) == v for k, v in wanted.items())]
            return found[-1] if found else None

        return await eventually(reached, timeout_s)


@asynccontextmanager
async def watching(server: Server, client: GraphQL, **variables: Any) -> AsyncIterator[Watcher]:
    watcher = Watcher()
    before = server.metric("spacedock_event_subscribers")
    async with client.websocket() as session:

        async def listen() -> None:
            async for event in session.subscribe(request(EVENTS, variables)):
                watcher.events.append(event["appChanged"])

        task = asyncio.create_task(listen())
        try:
            await wait_for_subscribers(server, int(before) + 1)
            yield watcher
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
