"""What App Advisor tests share: the GraphQL documents, a subscriber of adviceChanged that
collects what it receives, and a vCluster client (kubernetes-asyncio, admin certificate)
that writes objects as a user does and status as a kubelet or a controller does."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient

from sim.host_standin import HostStandIn, VClusterApi
from sim.pki import KeyPair
from tests.conftest import Org
from tests.support import factories as make
from tests.support.cloudspaces import Platform, eventually, key, request, wait_for_subscribers
from tests.support.kube_clients import kube, kubeconfig_of, kubectl

FINDING = """
  id cloudSpaceId ruleId family severity object { kind namespace name } appId title
  evidence suggestion patch explanation explainedAt fingerprint firstSeenAt lastSeenAt
  resolvedAt dismissed dismissReason dismissedBy
"""
ADVICE = f"""
query($id: ID!, $severity: AdviceSeverity, $resolved: Boolean! = false,
      $dismissed: Boolean! = false, $first: Int = 100, $after: String) {{
  cloudSpace(id: $id) {{
    advisor {{ enabled lastRunAt lastError objectsRead complete exemptions {{ ruleId reason createdBy }} }}
    adviceCounts {{ critical warning info total }}
    advice(severity: $severity, includeResolved: $resolved, includeDismissed: $dismissed,
           first: $first, after: $after) {{
      totalCount counts {{ critical warning info total }}
      pageInfo {{ hasNextPage endCursor }}
      nodes {{ {FINDING} }}
    }}
  }}
}}"""
CHANGES = f"""
subscription($id: ID!) {{
  adviceChanged(cloudSpaceId: $id) {{ cloudSpaceId change at finding {{ {FINDING} }} }}
}}"""
DISMISS = f"""
mutation($input: DismissFindingInput!) {{
  dismissFinding(input: $input) {{ finding {{ {FINDING} }} {make.USER_ERRORS} }}
}}"""
RESTORE = f"""
mutation($input: RestoreFindingInput!) {{
  restoreFinding(input: $input) {{ finding {{ {FINDING} }} {make.USER_ERRORS} }}
}}"""
EXEMPT = f"""
mutation($input: ExemptAdvisorRuleInput!) {{
  exemptAdvisorRule(input: $input) {{ exemption {{ ruleId reason createdBy }} {make.USER_ERRORS} }}
}}"""
UNEXEMPT = f"""
mutation($input: RemoveAdvisorExemptionInput!) {{
  removeAdvisorExemption(input: $input) {{ exemption {{ ruleId }} {make.USER_ERRORS} }}
}}"""


class Advice:
    """A gql subscriber of one CloudSpace's adviceChanged."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def of(self, rule: str, name: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["finding"]["ruleId"] == rule
            and (name is None or e["finding"]["object"]["name"] == name)
        ]

    async def until(
        self, rule: str, name: str, change: str, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        async def arrived() -> dict[str, Any] | None:
            found = [e for e in self.of(rule, name) if e["change"] == change]
            return found[-1] if found else None

        return await eventually(arrived, timeout_s)


@asynccontextmanager
async def watching(platform: Platform, org: Org, cloud_space_id: str) -> AsyncIterator[Advice]:
    advice = Advice()
    before = platform.server.metric("spacedock_event_subscribers")
    async with org.viewer.websocket() as session:

        async def listen() -> None:
            async for event in session.subscribe(request(CHANGES, {"id": cloud_space_id})):
                advice.events.append(event["adviceChanged"])

        task = asyncio.create_task(listen())
        try:
            await wait_for_subscribers(platform.server, int(before) + 1)
            yield advice
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def vcluster_of(host: HostStandIn, cloud_space_id: str) -> VClusterApi:
    namespace = f"cs-{key(cloud_space_id)}"
    (found,) = [v for (ns, _), v in host.vclusters.items() if ns == namespace]
    return found


class Tenant:
    """Calls on a CloudSpace's vCluster as its owner does, with the admin certificate."""

    def __init__(self, host: HostStandIn, cloud_space_id: str) -> None:
        self.api = vcluster_of(host, cloud_space_id)
        self.url = self.api.url
        self.ca_pem = host.vcluster_ca_pem
        self.cert = KeyPair(self.api.admin.certificate_pem, self.api.admin.key_pem)
        self.client: ApiClient | None = None
        self.namespaces: list[str] = []

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[Tenant]:
        """A client for the block; the namespaces it made are deleted at its end, so the
        tests sharing one CloudSpace share none of each other's quota."""
        async with kube(self.url, self.ca_pem, cert=self.cert) as client:
            self.client = client
            try:
                yield self
            finally:
                for name in self.namespaces:
                    await self.call("DELETE", f"/api/v1/namespaces/{name}")
                self.namespaces, self.client = [], None

    async def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        assert self.client is not None
        response = await self.client.call_api(
            path,
            method,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            _preload_content=False,
        )
        found: dict[str, Any] = json.loads(await response.read())
        return found

    def path(self, obj: dict[str, Any], sub: str = "", *, named: bool = True) -> str:
        resource = next(
            r
            for r in self.api.resources.values()
            if r.api_version == obj["apiVersion"] and r.kind == obj["kind"]
        )
        meta = obj["metadata"]
        return self.api.path_for(
            resource, meta.get("namespace", ""), meta["name"] if named else "", sub
        )

    async def namespace(self, name: str) -> None:
        await self.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        self.namespaces.append(name)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as stored (with its uid)."""
        return await self.call("POST", self.path(obj, named=False), obj)

    async def status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """What a kubelet or a controller writes: a strategic merge patch of `status`."""
        written = await self.call(
            "PATCH",
            self.path(obj, "status"),
            {"status": status},
            "application/strategic-merge-patch+json",
        )
        assert written.get("kind") != "Status", written
        return written

    async def delete(self, obj: dict[str, Any]) -> None:
        await self.call("DELETE", self.path(obj))

    def kubectl_patch(self, obj: dict[str, Any], patch: str) -> str:
        """`kubectl patch <kind> <name> -n <ns> --patch-file fix.yaml`, as the finding says."""
        config = yaml.safe_dump(kubeconfig_of(self.url, self.ca_pem, cert=self.cert))
        with tempfile.TemporaryDirectory() as directory:
            fix = Path(directory, "fix.yaml")
            fix.write_text(patch)
            meta = obj["metadata"]
            done = kubectl(
                config,
                "patch",
                obj["kind"].lower(),
                meta["name"],
                "-n",
                meta["namespace"],
                "--patch-file",
                str(fix),
            )
        assert done.returncode == 0, done.stderr
        return done.stdout


async def advice_of(org: Org, cloud_space_id: str, **variables: Any) -> dict[str, Any]:
    data = await org.viewer.data(ADVICE, {"id": cloud_space_id, **variables})
    found: dict[str, Any] = data["cloudSpace"]
    return found


async def runs_after(org: Org, cloud_space_id: str, count: int = 2) -> None:
    """Waits until `count` more runs of the CloudSpace have finished."""
    seen: list[str] = []

    async def ran() -> bool:
        advisor = (await advice_of(org, cloud_space_id, first=1))["advisor"]
        stamp = advisor["lastRunAt"]
        if stamp is not None and stamp not in seen:
            seen.append(stamp)
        return len(seen) > count

    await eventually(ran, 60)
