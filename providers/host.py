"""Calls on a CloudSpace's host cluster and on its vCluster, through kubernetes-asyncio.

Every write is a server-side apply (field manager `spacedock`, forced), so a
step that runs again changes nothing that is already right and never creates
an object twice. A `Kube` lives for one call scope on one `ApiClient` built by
`providers.kube` (deny-list resolver, private CA files, no proxy lookups);
every failure leaves as a `ProviderError` with the reason words of
`providers.errors`. Answers are read bounded and decoded (off the event loop when
large) by `providers.kube.json_answer`, like every cluster answer, and never
quoted in reasons.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, UnexpectedAnswer
from providers.kube import DEFAULT_TIMEOUT_S, build_client, json_answer, translate
from providers.network import DEFAULT_MAX_BODY_BYTES, IPNetwork, denied_address

FIELD_MANAGER = "spacedock"
# Lists are read in chunks of this many objects (kubectl's default), up to LIST_MAX.
LIST_CHUNK = 500
LIST_MAX = 50_000
APPLY = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
CLUSTER_SCOPED = {
    "Namespace",
    "Node",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
}


def plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch")):
        return lower + "es"
    return lower + "s"


def path_of(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    """The REST path of an object (or, without a name, of its collection)."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if kind not in CLUSTER_SCOPED and namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural(kind)}"
    return base if name is None else f"{base}/{quote(name, safe='')}"


def _object_path(manifest: Mapping[str, Any]) -> str:
    metadata = manifest.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise PermanentError("a manifest has no metadata.name")
    return path_of(
        str(manifest.get("apiVersion", "v1")),
        str(manifest["kind"]),
        metadata.get("namespace"),
        name,
    )


class Kube:
    """Generic object calls on one cluster."""

    def __init__(self, client: ApiClient, on_call: Callable[[], None] | None = None) -> None:
        self.client = client
        self.on_call = on_call

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        absent: frozenset[int] = frozenset(),
    ) -> dict[str, Any] | None:
        """The answer's object, read and decoded the way every cluster answer is
        (`providers.kube.json_answer`); None when the status is one of `absent`."""
        if self.on_call is not None:
            self.on_call()
        response = await self.client.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        try:
            if response.status in absent:
                return None
            parsed = await json_answer(response)
        finally:
            response.release()
        if not isinstance(parsed, dict):
            raise UnexpectedAnswer("the answer is not an object")
        return parsed

    async def _object(self, method: str, path: str, **call: Any) -> dict[str, Any]:
        answer = await self._call(method, path, **call)
        if answer is None:  # only when a caller names statuses that mean absent
            raise UnexpectedAnswer("no object")
        return answer

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of one object, as field manager `spacedock`."""
        return await self._object(
            "PATCH",
            _object_path(manifest),
            body=dict(manifest),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type=APPLY,
        )

    async def annotate(self, path: str, annotations: Mapping[str, str]) -> dict[str, Any]:
        """Sets annotations on the object with a JSON merge patch, as `kubectl annotate`
        and the flux CLI do: what server-side apply owns is left as it is."""
        return await self._object(
            "PATCH",
            path,
            body={"metadata": {"annotations": dict(annotations)}},
            query=[("fieldManager", FIELD_MANAGER)],
            content_type=MERGE_PATCH,
        )

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at `path`; None when it does not exist."""
        return await self._call("GET", path, absent=frozenset({404}))

    async def items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Every object of a list, read in chunks as kubectl reads them (one answer of a
        large cluster's pods would be tens of megabytes); a list longer than LIST_MAX is
        refused rather than counted short."""
        listed = await self.chunks(
            path, page_size=LIST_CHUNK, max_items=LIST_MAX, label_selector=label_selector
        )
        assert listed is not None  # not optional: a 404 raised
        items, more = listed
        if more:
            raise UnexpectedAnswer(f"a list of more than {LIST_MAX} objects")
        return items

    async def chunks(
        self,
        path: str,
        *,
        page_size: int,
        max_items: int,
        field_selector: str | None = None,
        label_selector: str | None = None,
        optional: bool = False,
    ) -> tuple[list[dict[str, Any]], bool] | None:
        """A list read in chunks of `page_size` (`limit` and `continue`), at most
        `max_items` items: (items, whether more were left unread). None when `optional`
        and the API is not served (404). A continue token the server expired (410) starts
        the list over once, as clients do."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        restarted = False
        while True:
            query = [("limit", str(max(1, min(page_size, max_items - len(items)))))]
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            absent = frozenset({404}) if optional else frozenset()
            try:
                listed = await self._call("GET", path, query=query, absent=absent)
            except ProviderError as expired:
                if token is None or restarted or "410" not in expired.reason:
                    raise
                items, token, restarted = [], None, True
                continue
            if listed is None:
                return None
            chunk = listed.get("items") or []
            if not isinstance(chunk, list):
                raise UnexpectedAnswer("a list without items")
            items += [item for item in chunk if isinstance(item, dict)]
            token = (listed.get("metadata") or {}).get("continue") or None
            if not token:
                return items, False
            if len(items) >= max_items:
                return items, True
            if not isinstance(token, str):
                raise UnexpectedAnswer("a continue token that is not a string")

    async def delete(self, path: str) -> None:
        """Deletes the object; one that is already gone is fine."""
        # 404: gone; 409: already going (a terminating namespace)
        await self._call(
            "DELETE", path, body={"propagationPolicy": "Background"}, absent=frozenset({404, 409})
        )

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._object("POST", path, body=dict(body))


@asynccontextmanager
async def connect(
    credentials: ClusterCredentials,
    *,
    deny: tuple[IPNetwork, ...] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    on_call: Callable[[], None] | None = None,
) -> AsyncIterator[Kube]:
    """A `Kube` on a fresh client (`on_call` counts its calls); the block must finish
    within timeout_s and any failure in it leaves as a ProviderError. An API server in a
    denied network is never contacted; no answer is read past `max_body_bytes`."""
    host = URL(credentials.server).host
    if host is not None and (why := denied_address(host, deny)) is not None:
        raise PermanentError(why)
    client = await build_client(credentials, deny, max_body_bytes)
    try:
        async with asyncio.timeout(timeout_s):
            yield Kube(client, on_call)
    except ProviderError:
        raise
    except (ApiException, aiohttp.ClientError, OSError, TimeoutError) as failed:
        raise translate(failed, timeout_s) from failed
    finally:
        await client.close()


def node_allocatable(nodes: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
    """status.allocatable of every node that is not cordoned."""
    found = []
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        allocatable = (node.get("status") or {}).get("allocatable")
        if isinstance(allocatable, Mapping):
            found.append(allocatable)
    return found
