"""Kubeconfigs a person keeps, tried with the machine's real kubectl against the vCluster
stand-in: the download is a file named like its context, whose cluster, user and context
names are unique per CloudSpace and vCluster, so two orgs' `default` CloudSpaces merge
(`KUBECONFIG=a:b`) and both work; the exec plugin form runs `spacedock kubeconfig-token`
with the person's own API token and gets a new token after the vCluster ended the last,
in a new kubectl and in a long-running one; reading `kubeconfigExpiresAt` mints nothing
and a VIEWER may read it; browsers on an allowed origin may read the expiry header."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.host_standin import HostStandIn, VClusterApi
from sim.ports import HeldPort
from tests.conftest import Org
from tests.support.chromium import Chromium, serve_page
from tests.support.cloudspaces import (
    LIST,
    Platform,
    default_of,
    download,
    eventually,
    key,
    ready_cloud_space,
    serve_platform,
)
from tests.support.server import Backend

TTL_S = 900
ORIGIN = "http://app.example:5173"
# A page's origin on loopback, for the browser's own reading of the route.
PAGE_PORT = HeldPort()
PAGE_ORIGIN = f"http://127.0.0.1:{PAGE_PORT.number}"
PAGE = """<!doctype html>
<html><head><title>cards</title></head><body><script>
window.download = async (url, token) => {
  const response = await fetch(url, {headers: {"Authorization": "Bearer " + token}});
  const body = await response.text();
  return {
    status: response.status,
    expiresAt: response.headers.get("X-Kubeconfig-Expires-At"),
    disposition: response.headers.get("Content-Disposition"),
    body: response.status === 200 ? body.slice(0, 10) : JSON.parse(body),
  };
};
</script></body></html>
"""
TOKEN_REQUESTS = {"verb": "create", "resource": "serviceaccounts/token"}
CARD = """
query($id: ID!) {
  cloudSpace(id: $id) {
    name phase quota { cpu memoryMiB } usage { cpu memoryMiB }
    vclusters { name ready kubeconfigExpiresAt }
  }
}"""
WITH_KUBECONFIG = """
query($id: ID!) { cloudSpace(id: $id) { vclusters { kubeconfigExpiresAt kubeconfig } } }"""


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("32", "128Gi"), ("32", "128Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host: HostStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    env = {
        "SPACEDOCK_KUBECONFIG_TTL_S": str(TTL_S),
        "SPACEDOCK_CORS_ORIGINS": f"{ORIGIN}, {PAGE_ORIGIN}",
    }
    yield from serve_platform(backend, host, log_path, env)


@pytest.fixture
async def tenant(platform: Platform) -> Org:
    return await platform.tenant()


def vcluster_of(host: HostStandIn, cloud_space: dict[str, Any]) -> VClusterApi:
    return host.vcluster(f"cs-{key(cloud_space['id'])}", cloud_space["name"])


async def ready_default(org: Org) -> dict[str, Any]:
    """The org's default CloudSpace, once READY."""
    default = default_of(await org.viewer.data(LIST))

    async def ready() -> dict[str, Any] | None:
        found = await org.viewer.data(CARD, {"id": default["id"]})
        return default if found["cloudSpace"]["phase"] == "READY" else None

    return await eventually(ready)


def kubectl(
    directory: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The machine's kubectl as a person runs it (`spacedock` found for exec plugins)."""
    return subprocess.run(
        ["kubectl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=person(directory, env),
    )


def person(directory: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment whose PATH finds kubectl and `spacedock`, a home of its own."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(directory),
        **(env or {}),
    }


async def fetched(
    platform: Platform, org: Org, cloud_space: dict[str, Any], query: str = "", role: str = "editor"
) -> tuple[int, dict[str, str], str]:
    return await asyncio.to_thread(
        download, platform.server, cloud_space["id"], cloud_space["name"], org.tokens[role], query
    )


def names_of(config: dict[str, Any]) -> tuple[str, str, str]:
    ((cluster,), (user,), (context,)) = config["clusters"], config["users"], config["contexts"]
    assert (context["context"]["cluster"], context["context"]["user"]) == (
        cluster["name"],
        user["name"],
    )
    return cluster["name"], user["name"], context["name"]


async def test_two_orgs_default_kubeconfigs_merge_and_both_work_with_kubectl(
    platform: Platform, host: HostStandIn, tmp_path: Path
) -> None:
    first, second = await platform.tenant("first"), await platform.tenant("second")
    spaces = [await ready_default(first), await ready_default(second)]
    files = []
    for org, cloud_space in zip((first, second), spaces, strict=True):
        status, headers, body = await fetched(platform, org, cloud_space)
        assert status == 200, body
        config = yaml.safe_load(body)
        cluster, user, context = names_of(config)
        expected = f"spacedock-{key(cloud_space['id'])}-default"
        assert (cluster, user, context) == (expected, f"{expected}-tenant", expected)
        assert config["current-context"] == context
        assert config["contexts"][0]["context"]["namespace"] == "default"
        assert headers["content-disposition"] == f'attachment; filename="{context}.kubeconfig"'
        assert datetime.fromisoformat(headers["x-kubeconfig-expires-at"]) > datetime.now(UTC)
        path = tmp_path / f"{context}.kubeconfig"
        path.write_text(body)
        files.append((path, context))
        alone = await asyncio.to_thread(kubectl, tmp_path, "--kubeconfig", str(path), "get", "ns")
        assert alone.returncode == 0, alone.stderr
        assert "kube-system" in alone.stdout

    merged = {"KUBECONFIG": ":".join(str(path) for path, _ in files)}
    listed = await asyncio.to_thread(
        kubectl, tmp_path, "config", "get-contexts", "-o", "name", env=merged
    )
    assert sorted(listed.stdout.split()) == sorted(context for _, context in files)
    for (_, context), cloud_space, who in zip(files, spaces, ("first", "second"), strict=True):
        # `apply -f` (JSON on the wire): kubectl's `create namespace` sends protobuf to a
        # server newer than itself (the chart's vCluster runs 1.36), which the stand-in
        # cannot read.
        manifest = tmp_path / f"{who}.yaml"
        manifest.write_text(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {who}\n")
        made = await asyncio.to_thread(
            kubectl, tmp_path, "--context", context, "apply", "-f", str(manifest), env=merged
        )
        assert made.returncode == 0, made.stderr  # the second file's token, not the first's
        assert vcluster_of(host, cloud_space).find("namespaces", who)
    assert vcluster_of(host, spaces[1]).find("namespaces", "first") is None  # each reached its own


async def test_the_exec_plugin_fetches_a_new_token_when_the_last_one_ended(
    platform: Platform, host: HostStandIn, tenant: Org, tmp_path: Path
) -> None:
    cloud_space = await ready_cloud_space(tenant, "plugged", 1, 1024)
    vcluster = vcluster_of(host, cloud_space)
    token_file = tmp_path / "spacedock-token"
    token_file.write_text(tenant.tokens["editor"] + "\n")
    status, headers, body = await fetched(
        platform, tenant, cloud_space, f"?credential=exec&tokenFile={token_file}"
    )
    assert status == 200, body
    assert "x-kubeconfig-expires-at" not in headers  # nothing in it expires
    config = yaml.safe_load(body)
    (user,) = config["users"]
    plugin = user["user"]["exec"]
    assert set(user["user"]) == {"exec"}, "no token in the file"
    assert plugin["apiVersion"] == "client.authentication.k8s.io/v1"
    assert plugin["command"] == "spacedock" and plugin["interactiveMode"] == "Never"
    assert plugin["args"] == [
        "kubeconfig-token",
        "--server",
        platform.server.base,
        "--cloud-space",
        cloud_space["id"],
        "--vcluster",
        "plugged",
        "--token-file",
        str(token_file),
    ]
    assert tenant.tokens["editor"] not in body
    path = tmp_path / "plugged.kubeconfig"
    path.write_text(body)

    # Each kubectl run asks the plugin (kubectl v1.31 does twice, for two of its clients).
    minted = vcluster.count(**TOKEN_REQUESTS)
    first = await asyncio.to_thread(kubectl, tmp_path, "--kubeconfig", str(path), "get", "ns")
    assert first.returncode == 0, first.stderr
    assert vcluster.count(**TOKEN_REQUESTS) > minted
    vcluster.expire_tokens()  # the vCluster ends every token it gave
    minted = vcluster.count(**TOKEN_REQUESTS)
    again = await asyncio.to_thread(kubectl, tmp_path, "--kubeconfig", str(path), "get", "ns")
    assert again.returncode == 0, again.stderr
    assert vcluster.count(**TOKEN_REQUESTS) > minted

    # A kubectl that keeps running (a proxy) is refused once, asks the plugin, and goes on.
    proxy = await asyncio.create_subprocess_exec(
        *("kubectl", "--kubeconfig", str(path), "proxy", "--port=0", "--append-server-path"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=person(tmp_path),
    )
    try:
        assert proxy.stdout is not None
        started = (await asyncio.wait_for(proxy.stdout.readline(), 30)).decode()
        port = int(started.rsplit(":", 1)[1])
        url = f"http://127.0.0.1:{port}/api/v1/namespaces"
        assert await asyncio.to_thread(status_of, url) == 200
        vcluster.expire_tokens()
        minted = vcluster.count(**TOKEN_REQUESTS)
        assert await asyncio.to_thread(status_of, url) == 401  # the ended token, once
        assert await asyncio.to_thread(status_of, url) == 200  # a new one from the plugin
        assert vcluster.count(**TOKEN_REQUESTS) == minted + 1
    finally:
        proxy.terminate()
        await proxy.wait()

    # Without the file named, the token comes from SPACEDOCK_TOKEN; without any, kubectl
    # shows what to do; a VIEWER's token is refused by spacedock in its words.
    status, _, plain = await fetched(platform, tenant, cloud_space, "?credential=exec")
    assert status == 200 and "--token-file" not in plain
    path.write_text(plain)
    for env, expected in (
        ({"SPACEDOCK_TOKEN": tenant.tokens["admin"]}, None),
        ({}, "no spacedock API token: cannot read"),
        ({"SPACEDOCK_TOKEN": tenant.tokens["viewer"]}, "spacedock refused: HTTP 403"),
    ):
        ran = await asyncio.to_thread(
            kubectl, tmp_path, "--kubeconfig", str(path), "get", "ns", env=env
        )
        if expected is None:
            assert ran.returncode == 0, ran.stderr
        else:
            assert ran.returncode == 1 and expected in ran.stderr, ran.stderr


def status_of(request: str | urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


async def test_reading_the_expiry_mints_nothing_and_a_viewer_may_read_it(
    platform: Platform, host: HostStandIn, tenant: Org
) -> None:
    cloud_space = await ready_cloud_space(tenant, "cards", 1, 1024)
    vcluster = vcluster_of(host, cloud_space)
    minted = vcluster.count(**TOKEN_REQUESTS)
    for _ in range(50):
        for role in ("viewer", "editor"):
            answer = await tenant.as_role(role).call(CARD, {"id": cloud_space["id"]})
            assert not answer.get("errors"), answer
            (card,) = answer["data"]["cloudSpace"]["vclusters"]
            expires = datetime.fromisoformat(card["kubeconfigExpiresAt"])
            now = datetime.now(UTC)
            assert now + timedelta(seconds=TTL_S - 60) < expires <= now + timedelta(seconds=TTL_S)
    assert vcluster.count(**TOKEN_REQUESTS) == minted, "a hundred reads minted nothing"
    assert answer["data"]["cloudSpace"]["quota"] == {"cpu": 1.0, "memoryMiB": 1024}

    # Asked with the kubeconfig, it is that kubeconfig's expiry (one token for both).
    both = await tenant.editor.data(WITH_KUBECONFIG, {"id": cloud_space["id"]})
    (vc,) = both["cloudSpace"]["vclusters"]
    token = yaml.safe_load(vc["kubeconfig"])["users"][0]["user"]["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert datetime.fromisoformat(vc["kubeconfigExpiresAt"]).timestamp() == claims["exp"]
    assert vcluster.count(**TOKEN_REQUESTS) == minted + 1
    # A VIEWER asking for both is refused the kubeconfig only.
    refused = await tenant.viewer.call(WITH_KUBECONFIG, {"id": cloud_space["id"]})
    assert [(e["path"][-1], e["extensions"]["code"]) for e in refused["errors"]] == [
        ("kubeconfig", "FORBIDDEN")
    ]
    assert refused["data"]["cloudSpace"]["vclusters"][0]["kubeconfigExpiresAt"]
    assert vcluster.count(**TOKEN_REQUESTS) == minted + 1


async def test_the_route_names_its_file_for_browsers_and_refuses_what_it_cannot_use(
    platform: Platform, tenant: Org
) -> None:
    cloud_space = await ready_cloud_space(tenant, "browser", 1, 1024)
    url = (
        f"{platform.server.base}/api/v1/cloudspaces/{cloud_space['id']}/vclusters/browser/"
        "kubeconfig"
    )
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {tenant.tokens['editor']}", "Origin": ORIGIN}
    )
    with await asyncio.to_thread(urllib.request.urlopen, request, timeout=30) as answer:
        exposed = {
            h.strip().lower() for h in answer.headers["access-control-expose-headers"].split(",")
        }
        assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert {"x-kubeconfig-expires-at", "content-disposition"} <= exposed
    for query, said in (
        ("?credential=cert", "credential must be token or exec"),
        ("?tokenFile=/tmp/t", "tokenFile goes with credential=exec"),
        ("?credential=exec&tokenFile=", "tokenFile must be a file path"),
    ):
        status, _, body = await fetched(platform, tenant, cloud_space, query)
        assert status == 400, body
        (error,) = json.loads(body)["errors"]
        assert error["extensions"]["code"] == "BAD_REQUEST" and said in error["message"]
    # The ExecCredential route answers the plugin, and follows the same policy.
    credential = f"{platform.server.base}/api/v1/cloudspaces/{cloud_space['id']}/vclusters/browser/credential"
    asked = urllib.request.Request(
        credential, headers={"Authorization": f"Bearer {tenant.tokens['editor']}"}
    )
    with await asyncio.to_thread(urllib.request.urlopen, asked, timeout=30) as answer:
        given = json.loads(answer.read())
    assert (given["apiVersion"], given["kind"]) == (
        "client.authentication.k8s.io/v1",
        "ExecCredential",
    )
    assert given["status"]["token"] and given["status"]["expirationTimestamp"].endswith("Z")
    denied = urllib.request.Request(
        credential, headers={"Authorization": f"Bearer {tenant.tokens['viewer']}"}
    )
    assert await asyncio.to_thread(status_of, denied) == 403


async def test_a_page_on_another_origin_reads_the_expiry_and_a_refusals_reason(
    platform: Platform, tenant: Org, chromium: None, tmp_path: Path
) -> None:
    cloud_space = await ready_cloud_space(tenant, "page", 1, 1024)
    url = json.dumps(
        f"{platform.server.base}/api/v1/cloudspaces/{cloud_space['id']}/vclusters/page/kubeconfig"
    )
    runner = await serve_page(PAGE_PORT, PAGE)
    try:
        async with Chromium(tmp_path / "profile") as browser:
            await browser.open(f"{PAGE_ORIGIN}/")
            await browser.wait_for("typeof window.download === 'function'")
            token = json.dumps(tenant.tokens["editor"])
            got = await browser.evaluate(f"window.download({url}, {token})")
            refused = await browser.evaluate(f"window.download({url}, 'sdk_gone')")
    finally:
        await runner.cleanup()
    assert got["status"] == 200 and got["body"].startswith("apiVersion"), got
    expires = datetime.fromisoformat(got["expiresAt"].replace("Z", "+00:00"))
    assert timedelta(0) < expires - datetime.now(UTC) <= timedelta(seconds=TTL_S)
    assert got["disposition"].startswith("attachment; filename=")
    assert refused["status"] == 401
    assert refused["body"]["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert refused["body"]["errors"][0]["message"] == "Unknown API token."
