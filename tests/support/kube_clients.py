"""kubernetes-asyncio clients as a user builds them (from a kubeconfig, over TLS), and
the small readers the stand-in tests share."""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from sim.pki import KeyPair

# Server-side apply as spacedock sends it (plain dict bodies).
APPLY: dict[str, Any] = {
    "field_manager": "spacedock",
    "force": True,
    "_content_type": "application/apply-patch+yaml",
}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig_of(
    url: str, ca_pem: str, *, token: str | None = None, cert: KeyPair | None = None
) -> dict[str, Any]:
    user = (
        {"token": token}
        if token
        else {
            "client-certificate-data": b64(cert.certificate_pem if cert else ""),
            "client-key-data": b64(cert.key_pem if cert else ""),
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": url, "certificate-authority-data": b64(ca_pem)}}
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }


@asynccontextmanager
async def kube(
    url: str, ca_pem: str, *, token: str | None = None, cert: KeyPair | None = None
) -> AsyncIterator[ApiClient]:
    """A kubernetes-asyncio client from a kubeconfig, as a user would build it."""
    async with kube_from(kubeconfig_of(url, ca_pem, token=token, cert=cert)) as client:
        yield client


@asynccontextmanager
async def kube_from(config: dict[str, Any] | str) -> AsyncIterator[ApiClient]:
    """A client from a kubeconfig (a dict, or the YAML a Secret holds)."""
    loaded = yaml.safe_load(config) if isinstance(config, str) else config
    client = await new_client_from_config_dict(loaded)
    try:
        yield client
    finally:
        await client.close()


async def refused(call: Awaitable[Any]) -> ApiException:
    with pytest.raises(ApiException) as raised:
        await call
    return raised.value


def status_of(error: ApiException) -> dict[str, Any]:
    """The `Status` body the server answered with."""
    found: dict[str, Any] = json.loads(error.body or b"{}")
    return found


def message(error: ApiException) -> str:
    return str(status_of(error).get("message", ""))


def kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The machine's kubectl against a kubeconfig (text), as a person runs it."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "config")
        path.write_text(kubeconfig)
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": directory},
        )
