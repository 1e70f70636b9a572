"""`spacedock space import-kubeconfig` registers the spaces people already have in a
kubeconfig: run as a real process against the test server's database, checked
through GraphQL, and with credentials that must work against the cluster."""

from __future__ import annotations

import asyncio
import base64
import getpass
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support.server import REPO, Server

SPACES = "{ spaces(first: 100) { nodes { id name provider config { server clusterName } } } }"

STANDIN_NAMESPACES = ["default", "kube-system"]


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeStandIn]:
    with KubeStandIn(token=f"sa-{secrets.token_urlsafe(24)}") as stand_in:
        yield stand_in


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig(
    path: Path,
    contexts: dict[str, tuple[dict[str, Any], dict[str, Any]]],
    current: str | None = None,
) -> Path:
    """Writes a kubeconfig with one cluster and one user per context: {context: (cluster, user)}."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": f"{name}-cluster", "cluster": c} for name, (c, _) in contexts.items()
        ],
        "users": [{"name": f"{name}-user", "user": u} for name, (_, u) in contexts.items()],
        "contexts": [
            {"name": name, "context": {"cluster": f"{name}-cluster", "user": f"{name}-user"}}
            for name in contexts
        ],
        "current-context": current if current is not None else next(iter(contexts)),
    }
    path.write_text(yaml.safe_dump(document))
    return path


def cluster(kube: KubeStandIn, prefix: str = "") -> dict[str, Any]:
    return {"server": kube.url + prefix, "certificate-authority-data": b64(kube.ca_pem)}


def run_import(server: Server, path: Path, *args: str, org: str) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "api", "space", "import-kubeconfig", str(path), "--org", org, *args],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Run(done.returncode, done.stdout, done.stderr)


async def spaces_by_name(org: Org) -> dict[str, dict[str, Any]]:
    data = await org.viewer.data(SPACES)
    return {s["name"]: s for s in data["spaces"]["nodes"]}


async def namespaces_through_the_stored_credential(org: Org, space_id: str) -> list[str]:
    """Space.namespaces is read live from the cluster with the credential the import stored."""
    data = await org.viewer.data(
        "query($id: ID!) { space(id: $id) { namespaces { name } } }", {"id": space_id}
    )
    return sorted(n["name"] for n in data["space"]["namespaces"])


def assert_no_secrets(run: Run, *secret_texts: str) -> None:
    for text in secret_texts:
        for fragment in {
            text,
            b64(text),
            *(line for line in text.splitlines() if "-----" not in line),
        }:
            if fragment.strip():
                assert fragment not in run.output


async def test_token_user_becomes_a_working_generic_space(
    server: Server, org: Org, kube: KubeStandIn, tmp_path: Path
) -> None:
    path = kubeconfig(tmp_path / "config", {"kind-dev": (cluster(kube), {"token": kube.token})})

    run = run_import(server, path, org=org.name)

    assert run.code == 0, run.output
    spaces = await spaces_by_name(org)
    space = spaces["kind-dev"]
    assert space["provider"] == "GENERIC"
    assert space["config"] == {"server": kube.url, "clusterName": "kind-dev-cluster"}
    assert run.stdout.strip() == (
        f"imported space=kind-dev id={space['id']} server={kube.url} context=kind-dev"
    )
    assert_no_secrets(run, kube.token)
    assert await namespaces_through_the_stored_credential(org, space["id"]) == STANDIN_NAMESPACES
    # The running server finds the space the CLI registered and probes it within seconds.
    deadline = asyncio.get_running_loop().time() + 10
    query = "query($id: ID!) { space(id: $id) { status lastProbe { ok version } } }"
    while (probed := (await org.viewer.data(query, {"id": space["id"]}))["space"])[
        "status"
    ] != "ACTIVE":
        assert asyncio.get_running_loop().time() < deadline, probed
        await asyncio.sleep(0.2)
    assert probed["lastProbe"] == {"ok": True, "version": kube.git_version}


async def test_client_certificate_user_imports_with_a_sanitized_name(
    server: Server, org: Org, kube: KubeStandIn, tmp_path: Path
) -> None:
    pair = kube.client_certificate()
    user = {
        "client-certificate-data": b64(pair.certificate_pem),
        "client-key-data": b64(pair.key_pem),
    }
    eks_style = "arn:aws:eks:us-east-1:123456789012:cluster/prod"
    path = kubeconfig(tmp_path / "config", {eks_style: (cluster(kube, "/prod"), user)})

    run = run_import(server, path, "--context", eks_style, org=org.name)

    assert run.code == 0, run.output
    spaces = await spaces_by_name(org)
    space = spaces["arn-aws-eks-us-east-1-123456789012-cluster-prod"]
    assert space["config"]["server"] == f"{kube.url}/prod"
    assert (
        space["config"]["clusterName"] == "arn-aws-eks-us-east-1-123456789012-cluster-prod-cluster"
    )
    assert_no_secrets(run, pair.key_pem)
    assert await namespaces_through_the_stored_credential(org, space["id"]) == STANDIN_NAMESPACES


async def test_file_paths_resolve_beside_the_kubeconfig_and_all_contexts_import(
    server: Server, org: Org, kube: KubeStandIn, tmp_path: Path
) -> None:
    pair = kube.client_certificate("file-user")
    pki = tmp_path / "pki"
    pki.mkdir()
    (pki / "ca.crt").write_text(kube.ca_pem)
    (pki / "client.crt").write_text(pair.certificate_pem)
    (pki / "client.key").write_text(pair.key_pem)
    (pki / "token").write_text(kube.token + "\n")
    files_cluster = {"server": f"{kube.url}/files", "certificate-authority": "pki/ca.crt"}
    token_cluster = {
        "server": f"{kube.url}/token-file",
        "certificate-authority": str(pki / "ca.crt"),
    }
    path = kubeconfig(
        tmp_path / "config",
        {
            "cert-files": (
                files_cluster,
                {"client-certificate": "pki/client.crt", "client-key": "pki/client.key"},
            ),
            "token-file": (token_cluster, {"tokenFile": "pki/token"}),
        },
    )

    run = run_import(server, path, "--all-contexts", org=org.name)

    assert run.code == 0, run.output
    assert len(run.stdout.splitlines()) == 2
    spaces = await spaces_by_name(org)
    assert spaces["cert-files"]["config"]["server"] == f"{kube.url}/files"
    assert spaces["token-file"]["config"]["server"] == f"{kube.url}/token-file"
    assert_no_secrets(run, pair.key_pem, kube.token)
    for name in ("cert-files", "token-file"):
        assert (
            await namespaces_through_the_stored_credential(org, spaces[name]["id"])
            == STANDIN_NAMESPACES
        )


async def test_name_overrides_the_context_name(
    server: Server, org: Org, kube: KubeStandIn, tmp_path: Path
) -> None:
    path = kubeconfig(tmp_path / "config", {"default": (cluster(kube), {"token": kube.token})})

    run = run_import(server, path, "--name", "laptop-k3s", org=org.name)

    assert run.code == 0, run.output
    spaces = await spaces_by_name(org)
    assert set(spaces) == {"laptop-k3s"}


async def test_exec_plugin_user_is_refused_with_the_service_account_recipe(
    server: Server, org: Org, kube: KubeStandIn, tmp_path: Path
) -> None:
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", "prod"],
        }
    }
    path = kubeconfig(
        tmp_path / "config",
        {
            "eks-prod": (cluster(kube, "/eks"), exec_user),
            "kind-ok": (cluster(kube), {"token": kube.token}),
        },
    )

    run = run_import(server, path, "--all-contexts", org=org.name)

    assert run.code == 1
    assert "Traceback" not in run.output
    assert "imported space=kind-ok" in run.stdout
    assert "refused  context=eks-prod" in run.stderr
    assert "exec plugin (aws)" in run.stderr
    assert "store and use unattended" in run.stderr
    kubectl = f"kubectl --kubeconfig {path}"
    assert f"{kubectl} --context eks-prod -n kube-system create token spacedock" in run.stderr
    assert f"{kubectl} config set-credentials spacedock-eks-prod" in run.stderr
    assert (
        f"{kubectl} config set-context spacedock-eks-prod --cluster=eks-prod-cluster" in run.stderr
    )
    assert (
        f"spacedock space import-kubeconfig {path} --context spacedock-eks-prod --org {org.name}"
        in run.stderr
    )
    spaces = await spaces_by_name(org)
    assert set(spaces) == {"kind-ok"}
    assert_no_secrets(run, kube.token)


async def test_insecure_skip_tls_verify_is_refused(
    server: Server, org: Org, kube: KubeStandIn, tmp_path: Path
) -> None:
    insecure = {"server": kube.url, "insecure-skip-tls-verify": True}
    path = kubeconfig(tmp_path / "config", {"k3s": (insecure, {"token": kube.token})})

    run = run_import(server, path, org=org.name)

    assert run.code == 1
    assert "sets insecure-skip-tls-verify" in run.stderr
    assert "certificate-authority-data" in run.stderr
    spaces = await spaces_by_name(org)
    assert spaces == {}


async def test_unknown_context_names_the_ones_there_are(
    server: Server, org: Org, kube: KubeStandIn, tmp_path: Path
) -> None:
    path = kubeconfig(
        tmp_path / "config",
        {
            "dev": (cluster(kube), {"token": kube.token}),
            "prod": (cluster(kube), {"token": kube.token}),
        },
    )

    run = run_import(server, path, "--context", "staging", org=org.name)

    assert run.code == 2
    assert f"{path} has no context 'staging'; its contexts are: dev, prod" in run.stderr
    spaces = await spaces_by_name(org)
    assert spaces == {}


async def test_second_import_of_the_same_context_is_a_conflict(
    server: Server, org: Org, kube: KubeStandIn, tmp_path: Path
) -> None:
    path = kubeconfig(tmp_path / "config", {"kind-dev": (cluster(kube), {"token": kube.token})})
    assert run_import(server, path, org=org.name).code == 0

    again = run_import(server, path, org=org.name)

    assert again.code == 1
    assert "Traceback" not in again.output
    assert "refused  context=kind-dev space=kind-dev" in again.stderr
    assert (
        "input.name: a registered space named 'kind-dev' already exists (CONFLICT)" in again.stderr
    )
    assert (
        "input.config.server: this cluster is already registered as a space (CONFLICT)"
        in again.stderr
    )
    spaces = await spaces_by_name(org)
    assert list(spaces) == ["kind-dev"]

    # Both imports are audit events of the OS user, like registerSpace through the API,
    # with the token out of the recorded input.
    data = await org.admin.data(CLI_EVENTS)
    events = data["auditEvents"]["nodes"]
    assert [(e["action"], e["outcome"]) for e in events] == [
        ("registerSpace", "OK"),
        ("registerSpace", "CONFLICT"),
    ]
    for event in events:
        assert event["actor"] == getpass.getuser()
        assert (event["actorKind"], event["via"], event["actorTokenId"]) == ("OS_USER", "CLI", None)
        assert event["requestId"]
        assert event["input"]["config"]["serviceAccountToken"] == "[redacted]"
        assert event["input"]["config"]["server"] == kube.url
        assert event["input"]["kubeconfigContext"] == "kind-dev"
    assert events[0]["targetIds"] == [spaces["kind-dev"]["id"]]
    assert kube.token not in str(events)


CLI_EVENTS = """
{
  auditEvents(first: 10, filter: { via: CLI }) {
    nodes { action outcome actor actorKind via actorTokenId targetIds input requestId }
  }
}"""


async def test_unknown_org_is_refused_with_the_command_that_creates_it(
    server: Server, kube: KubeStandIn, tmp_path: Path
) -> None:
    path = kubeconfig(tmp_path / "config", {"kind-dev": (cluster(kube), {"token": kube.token})})
    missing = f"nobody-{secrets.token_hex(4)}"

    run = run_import(server, path, org=missing)

    assert run.code == 2
    assert f"there is no org '{missing}'" in run.stderr
    assert f"spacedock token create --org {missing} --role admin" in run.stderr


def test_broken_yaml_is_located_but_never_quoted(
    server: Server, kube: KubeStandIn, tmp_path: Path
) -> None:
    path = tmp_path / "config"
    path.write_text(f"users:\n- name: admin\n  user:\n    token: {kube.token}\n  [broken\n")

    run = run_import(server, path, org="acme")

    assert run.code == 2
    assert f"{path} is not valid YAML at line " in run.stderr
    assert_no_secrets(run, kube.token)
