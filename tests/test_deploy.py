"""Issue 25: deploy/ and the Containerfile, checked as an operator would before applying them.

Each overlay is rendered by the machine's `kubectl kustomize` and every object it renders
is validated strictly (unknown fields refused) by kubernetes-validate against three
Kubernetes versions. Then what an operator looks for: the probes ask the paths and port
the server serves, the container runs `spacedock serve` as the image does, as the image's
user, on a read-only root; no secret sits in the ConfigMap, and every setting there is one
the code reads, at the code's default; SQLite runs one pod at a time on its volume,
Postgres several from a Secret's URL under a disruption budget. Last, a real server started
with exactly the environment the SQLite pod gets listens on every address and answers the
probes as the manifests expect, and on Postgres /readyz turns 503 while /healthz stays 200
when the database goes away.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import sqlalchemy as sa
import yaml

from api.settings import Settings
from api.settings_cloudspaces import RETIRED
from core.common.secrets import SecretBox
from providers import azure, gcp
from sim.ports import free_port
from tests.conftest import POSTGRES_URL
from tests.support.server import REPO, Backend, listens_on
from tests.support.tcp_proxy import TcpProxy

DEPLOY = REPO / "deploy"
OVERLAYS = ("sqlite", "postgres")
# Three minors across what kubernetes-validate ships schemas for (1.25 to 1.37): an older
# one still run by managed clouds, one between, and the newest.
KUBERNETES_VERSIONS = ("1.31", "1.34", "1.37")
# Settings that are secrets: they come from the Secret spacedock-secrets, never the ConfigMap.
SECRET_SETTINGS = {
    "SPACEDOCK_SECRET_KEY",
    "SPACEDOCK_METRICS_TOKEN",
    "SPACEDOCK_DATABASE_URL",
    "SPACEDOCK_ADVISOR_MODEL_API_KEY",
}
# Read by `spacedock kubeconfig-token`, the exec plugin on a person's own machine: a
# person's API token, never the server's.
CLIENT_SETTINGS = {"SPACEDOCK_TOKEN", "SPACEDOCK_TOKEN_FILE"}
# The only settings the ConfigMap sets away from the code's defaults, and why.
DELIBERATE = {
    "SPACEDOCK_HOST": "0.0.0.0",  # a pod is reached on its own address, not loopback
    "SPACEDOCK_LOG_FORMAT": "json",  # for the cluster's log collector
    "SPACEDOCK_DATABASE_URL": "sqlite+aiosqlite:////var/lib/spacedock/spacedock.db",  # the volume
}
CODE_PACKAGES = ("api", "core", "db", "providers", "resolvers", "schema")
SETTING_NAME = re.compile(r"SPACEDOCK_[A-Z0-9_]+")
# A Fernet key as written: urlsafe base64 of 32 bytes, 43 characters and one "=".
FERNET_KEY = re.compile(r"(?<![\w-])[A-Za-z0-9_-]{43}=(?![\w=-])")


NEEDS_KUBECTL = (
    "install a kubectl with kustomize v5 (kubectl 1.27 or later), such as Debian's "
    "kubernetes-client where it is that new (Debian 12's is kubectl 1.20, with kustomize v2)"
)


@functools.cache
def kubectl() -> str:
    found = shutil.which("kubectl") or "/usr/bin/kubectl"
    if not Path(found).exists():
        pytest.skip(f"no kubectl on this machine: {NEEDS_KUBECTL}")
    done = subprocess.run(
        [found, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60
    )
    kustomize = json.loads(done.stdout or "{}").get("kustomizeVersion", "none")
    if not re.fullmatch(r"v([5-9]|\d{2,})\..*", kustomize):
        pytest.skip(f"{found} has kustomize {kustomize}: {NEEDS_KUBECTL}")
    return found


@functools.cache
def rendered(overlay: str) -> list[dict[str, Any]]:
    return render(DEPLOY / "overlays" / overlay)


def render(overlay: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl kustomize {overlay} failed:\n{done.stderr}"
    return [item for item in yaml.safe_load_all(done.stdout) if item]


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [item for item in objects if item["kind"] == kind]
    return found


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(item["kind"] for item in objects)


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = only(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [server] = pod_spec(objects)["containers"]
    found: dict[str, Any] = server
    return found


def settings_of(objects: list[dict[str, Any]]) -> dict[str, str]:
    data: dict[str, str] = only(objects, "ConfigMap")["data"]
    return data


def container_port(objects: list[dict[str, Any]], port: int | str) -> int:
    """A port as a probe or a Service names it, resolved against the container's ports."""
    if isinstance(port, int):
        return port
    [number] = [p["containerPort"] for p in container(objects)["ports"] if p["name"] == port]
    return int(number)


def pod_env(objects: list[dict[str, Any]], secrets: dict[str, str]) -> dict[str, str]:
    """The environment the kubelet gives the container: the ConfigMap, then `env` (a Secret's
    value by key, skipped when optional and absent)."""
    server = container(objects)
    env: dict[str, str] = {}
    for source in server.get("envFrom", []):
        assert source["configMapRef"]["name"] == only(objects, "ConfigMap")["metadata"]["name"]
        env.update(settings_of(objects))
    for variable in server.get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
            continue
        reference = variable["valueFrom"]["secretKeyRef"]
        if reference["key"] in secrets:
            env[variable["name"]] = secrets[reference["key"]]
        else:
            assert reference.get("optional"), f"{variable['name']} needs a value from the Secret"
    return env


# -- the Containerfile ------------------------------------------------------------------


@dataclasses.dataclass
class Stage:
    base: str
    instructions: list[tuple[str, str]]

    def last(self, instruction: str) -> str:
        return [text for name, text in self.instructions if name == instruction][-1]


@functools.cache
def containerfile() -> list[Stage]:
    """The Containerfile's stages, continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for line in (REPO / "Containerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    stages: list[Stage] = []
    for line in logical:
        name, _, text = line.partition(" ")
        if name.upper() == "FROM":
            stages.append(Stage(text.split()[0], []))
        else:
            stages[-1].instructions.append((name.upper(), text))
    return stages


def project() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


# -- rendered and valid -----------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_an_overlay_renders_is_valid_strictly(overlay: str, version: str) -> None:
    objects = rendered(overlay)
    expected = {
        "sqlite": ["ConfigMap", "Deployment", "NetworkPolicy", "PersistentVolumeClaim"],
        "postgres": ["ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget"],
    }[overlay] + ["Service", "ServiceAccount"]
    assert kinds(objects) == sorted(expected)
    for item in objects:
        checked_against = kubernetes_validate.validate(item, version, strict=True)
        assert checked_against == version, f"{item['kind']}: no schema of its own for {version}"
        assert item["metadata"]["namespace"] == "spacedock"


def test_strict_validation_refuses_a_field_kubernetes_does_not_know() -> None:
    """The check above can fail: a misspelt field is an error, not ignored."""
    deployment = copy.deepcopy(only(rendered("postgres"), "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="httpGett"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def test_the_readmes_own_overlay_renders_and_validates(tmp_path: Path) -> None:
    """The README's example of an overlay beside the two, as written."""
    readme = (REPO / "README.md").read_text()
    after = readme[readme.index("put an overlay of your own") :]
    example = after[after.index("```yaml\n") + len("```yaml\n") : after.index("```\n", 10)]
    (tmp_path / "overlays" / "mine").mkdir(parents=True)
    (tmp_path / "overlays" / "postgres").symlink_to(DEPLOY / "overlays" / "postgres")
    (tmp_path / "overlays" / "mine" / "kustomization.yaml").write_text(example)
    objects = render(tmp_path / "overlays" / "mine")
    for item in objects:
        kubernetes_validate.validate(item, KUBERNETES_VERSIONS[-1], strict=True)
    assert container(objects)["image"] == "registry.example.com/spacedock:0.1.0"
    assert only(objects, "Deployment")["spec"]["replicas"] == 5
    assert settings_of(objects)["SPACEDOCK_CLUSTER_DENY_CIDRS"] == "10.0.0.0/8"
    assert set(settings_of(objects)) == set(settings_of(rendered("postgres")))


# -- what an operator checks ------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_ask_the_health_paths_on_the_port_the_server_listens_on(overlay: str) -> None:
    objects = rendered(overlay)
    server = container(objects)
    listening = int(settings_of(objects)["SPACEDOCK_PORT"])
    asked = {
        probe: (
            server[probe]["httpGet"]["path"],
            container_port(objects, server[probe]["httpGet"]["port"]),
        )
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert asked == {
        "startupProbe": ("/healthz", listening),
        "livenessProbe": ("/healthz", listening),
        "readinessProbe": ("/readyz", listening),
    }
    assert settings_of(objects)["SPACEDOCK_HOST"] == "0.0.0.0", "the kubelet probes the pod's IP"
    [service_port] = only(objects, "Service")["spec"]["ports"]
    assert container_port(objects, service_port["targetPort"]) == listening
    [ingress] = only(objects, "NetworkPolicy")["spec"]["ingress"]
    assert [p["port"] for p in ingress["ports"]] == [listening]
    final = containerfile()[-1]
    assert final.last("EXPOSE") == str(listening)


def test_the_container_runs_spacedock_serve_as_the_image_does() -> None:
    for overlay in OVERLAYS:
        server = container(rendered(overlay))
        assert server["command"] + server["args"] == ["spacedock", "serve"]
    final = containerfile()[-1]
    image_command = json.loads(final.last("ENTRYPOINT")) + json.loads(final.last("CMD"))
    assert image_command == ["spacedock", "serve"]
    assert project()["project"]["scripts"]["spacedock"] == "api.cli:main"
    installed = Path(sys.executable).parent / "spacedock"
    done = subprocess.run(
        [installed, "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "--host" in done.stdout, done.stderr


def test_the_image_is_a_slim_python_with_the_wheel_as_a_numeric_non_root_user() -> None:
    *builders, final = containerfile()
    assert re.fullmatch(r"docker\.io/library/python:3\.11-slim(-\w+)?", final.base)
    user, _, group = final.last("USER").partition(":")
    assert user.isdigit() and group.isdigit() and int(user) != 0
    # The wheel is built in a stage of its own, with GraphiQL's pinned assets beside it.
    [wheel_stage] = [s for s in builders if any("pip wheel" in t for _, t in s.instructions)]
    assert any("node_modules" in t for n, t in wheel_stage.instructions if n == "COPY")
    assert "pip install" in final.last("RUN") and "--no-index" in final.last("RUN")
    for overlay in OVERLAYS:
        objects = rendered(overlay)
        pod = pod_spec(objects)["securityContext"]
        assert (pod["runAsUser"], pod["runAsGroup"]) == (int(user), int(group))
        assert pod["runAsNonRoot"] is True
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        server = container(objects)
        assert server["image"] == f"spacedock:{project()['project']['version']}"
        assert server["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        mounts = {mount["mountPath"]: mount["name"] for mount in server["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in pod_spec(objects)["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], "scratch files need a writable /tmp"
        assert "limits" in server["resources"] and "requests" in server["resources"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pod_holds_no_kubernetes_token_and_no_service_links(overlay: str) -> None:
    objects = rendered(overlay)
    assert only(objects, "ServiceAccount")["automountServiceAccountToken"] is False
    pod = pod_spec(objects)
    assert pod["serviceAccountName"] == only(objects, "ServiceAccount")["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False
    # A Service named spacedock would inject SPACEDOCK_PORT=tcp://…, read as a setting.
    assert pod["enableServiceLinks"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_is_in_the_configmap(overlay: str) -> None:
    objects = rendered(overlay)
    settings = settings_of(objects)
    secret_here = SECRET_SETTINGS & set(settings)
    if overlay == "sqlite":
        secret_here -= {"SPACEDOCK_DATABASE_URL"}  # a file path, no password
        assert "@" not in settings["SPACEDOCK_DATABASE_URL"]
    assert not secret_here
    for name, value in settings.items():
        for word in FERNET_KEY.findall(value):
            assert not SecretBox.is_valid_key(word), f"{name} holds a Fernet key"
    from_secret = {
        variable["name"]: variable["valueFrom"]["secretKeyRef"]
        for variable in container(objects)["env"]
    }
    assert from_secret["SPACEDOCK_SECRET_KEY"] == {
        "name": "spacedock-secrets",
        "key": "SPACEDOCK_SECRET_KEY",
    }, "the key is required: no pod starts without it"
    assert from_secret["SPACEDOCK_METRICS_TOKEN"]["optional"] is True
    assert "Secret" not in kinds(objects), "the operator makes the Secret; none is committed"


def test_no_key_is_committed_under_deploy() -> None:
    for path in [*DEPLOY.rglob("*"), REPO / "Containerfile"]:
        if path.is_file():
            for word in FERNET_KEY.findall(path.read_text()):
                assert not SecretBox.is_valid_key(word), f"{path} holds a Fernet key"


def test_sqlite_runs_one_pod_at_a_time_on_the_volume_the_database_url_names() -> None:
    objects = rendered("sqlite")
    deployment = only(objects, "Deployment")["spec"]
    assert deployment["replicas"] == 1
    assert deployment["strategy"] == {"type": "Recreate"}, "two pods must never share the file"
    database = Path(sa.make_url(settings_of(objects)["SPACEDOCK_DATABASE_URL"]).database or "")
    assert database.is_absolute(), "a relative path would land on the read-only root"
    mounts = {m["mountPath"]: m["name"] for m in container(objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    claim = volumes[mounts[str(database.parent)]]["persistentVolumeClaim"]["claimName"]
    assert claim == only(objects, "PersistentVolumeClaim")["metadata"]["name"]
    assert "PodDisruptionBudget" not in kinds(objects), "a budget for one pod would block drains"


def test_postgres_runs_several_pods_from_a_secrets_url_under_a_disruption_budget() -> None:
    objects = rendered("postgres")
    deployment = only(objects, "Deployment")["spec"]
    assert deployment["replicas"] >= 2
    assert deployment["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert "SPACEDOCK_DATABASE_URL" not in settings_of(objects)
    [url] = [v for v in container(objects)["env"] if v["name"] == "SPACEDOCK_DATABASE_URL"]
    assert url["valueFrom"]["secretKeyRef"] == {
        "name": "spacedock-secrets",
        "key": "SPACEDOCK_DATABASE_URL",
    }
    pod_labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    budget = only(objects, "PodDisruptionBudget")["spec"]
    assert budget["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["maxUnavailable"] < deployment["replicas"]
    egress_ports = {
        port["port"]
        for rule in only(objects, "NetworkPolicy")["spec"]["egress"]
        for port in rule["ports"]
    }
    assert {53, 5432, 443} <= egress_ports
    for spread in pod_spec(objects)["topologySpreadConstraints"]:
        assert spread["labelSelector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_network_policy_selects_the_pods_and_keeps_them_off_cloud_metadata(
    overlay: str,
) -> None:
    objects = rendered(overlay)
    policy = only(objects, "NetworkPolicy")["spec"]
    pod_labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    for rule in policy["egress"]:
        for peer in rule.get("to", []):
            block = peer["ipBlock"]
            if block["cidr"] in ("0.0.0.0/0", "::/0"):
                assert {"169.254.0.0/16", "fe80::/10"} & set(block["except"])


# -- the settings -----------------------------------------------------------------------


def settings_the_code_reads() -> set[str]:
    """Every SPACEDOCK_* name written as a whole string in the server's code."""
    names = set()
    for package in CODE_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and SETTING_NAME.fullmatch(node.value)
                ):
                    names.add(node.value)
    return names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_setting_in_the_configmap_is_read_by_the_code(overlay: str) -> None:
    read = settings_the_code_reads()
    assert "SPACEDOCK_PROBE_INTERVAL_S" in read  # the scan finds the settings it should
    unknown = set(settings_of(rendered(overlay))) - read
    assert not unknown, f"the ConfigMap sets what no code reads (renamed?): {sorted(unknown)}"


def test_every_setting_the_code_reads_is_in_the_configmap_or_a_secret() -> None:
    listed = set(settings_of(rendered("postgres"))) | SECRET_SETTINGS | CLIENT_SETTINGS
    # Retired settings are named in the code only to refuse them at start.
    missing = settings_the_code_reads() - listed - set(RETIRED)
    assert not missing, (
        f"add {sorted(missing)} to deploy/base/settings.env (at the code's default), or to "
        "SECRET_SETTINGS here when it is a secret"
    )


@pytest.fixture
def no_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in os.environ:
        if name.startswith("SPACEDOCK_"):
            monkeypatch.delenv(name)
    yield monkeypatch


def test_the_configmap_holds_the_codes_defaults(no_settings: pytest.MonkeyPatch) -> None:
    defaults = (Settings.from_env(), gcp.container_endpoint(), azure.arm_endpoint())
    settings = settings_of(rendered("sqlite"))
    for name, value in settings.items():
        no_settings.setenv(name, value)
    assert {name: settings[name] for name in DELIBERATE} == DELIBERATE
    for name in DELIBERATE:
        no_settings.delenv(name)
    assert (Settings.from_env(), gcp.container_endpoint(), azure.arm_endpoint()) == defaults
    # The comparison above sees a changed value.
    no_settings.setenv("SPACEDOCK_PROBE_INTERVAL_S", "61")
    assert Settings.from_env() != defaults[0]


# -- a real server with the pod's environment -------------------------------------------


def probe(server: PodLikeServer, check: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """What the kubelet sees of a probe: the status (200-399 passes) and the JSON body,
    within the probe's own timeout (a slower answer is a failure)."""
    url = f"http://127.0.0.1:{server.port}{check['httpGet']['path']}"
    try:
        with urllib.request.urlopen(url, timeout=check["timeoutSeconds"]) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@dataclasses.dataclass
class PodLikeServer:
    """`spacedock serve`, the console script, run with a pod's environment and nothing else."""

    env: dict[str, str]
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    port: int = 0

    def start(self) -> PodLikeServer:
        for _ in range(5):
            self.port = free_port()
            log = self.directory / "server.log"
            with log.open("wb") as output:
                self.process = subprocess.Popen(
                    [Path(sys.executable).parent / "spacedock", "serve"],
                    cwd=self.directory,
                    env={**self.env, "SPACEDOCK_PORT": str(self.port), "PATH": os.environ["PATH"]},
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + 60
            while self.process.poll() is None and time.monotonic() < deadline:
                if listens_on(self.process.pid, self.port, "0.0.0.0"):
                    return self
                time.sleep(0.05)
            text = log.read_text(errors="replace")
            self.stop()
            if "address already in use" not in text.lower():
                raise AssertionError(
                    f"the server never listened on 0.0.0.0:{self.port}, as a pod must:\n{text}"
                )
        raise AssertionError("no free port in five tries")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)


def test_a_server_with_the_sqlite_pods_environment_answers_the_probes(tmp_path: Path) -> None:
    objects = rendered("sqlite")
    env = pod_env(objects, {"SPACEDOCK_SECRET_KEY": SecretBox.generate_key()})
    # The volume's path, under this test's directory.
    database = Path(sa.make_url(env["SPACEDOCK_DATABASE_URL"]).database or "")
    volume = tmp_path / database.parent.relative_to("/")
    volume.mkdir(parents=True)
    env["SPACEDOCK_DATABASE_URL"] = f"sqlite+aiosqlite:///{volume / database.name}"
    server = PodLikeServer(env, tmp_path).start()  # listening on 0.0.0.0, as in the pod
    checks = container(objects)
    try:
        for name in ("startupProbe", "livenessProbe"):
            assert probe(server, checks[name]) == (200, {"status": "ok"})
        assert probe(server, checks["readinessProbe"]) == (
            200,
            {"status": "ok", "database": "reachable"},
        )
    finally:
        server.stop()
    assert (volume / database.name).is_file(), "the database lives on the volume"
    assert not list(tmp_path.rglob("*.key")), "no development key: the Secret's key was used"


@pytest.mark.skipif(POSTGRES_URL is None, reason="needs SPACEDOCK_TEST_DATABASE_URL")
def test_on_postgres_readiness_fails_and_liveness_holds_while_the_database_is_away(
    tmp_path: Path,
) -> None:
    assert POSTGRES_URL is not None
    objects = rendered("postgres")
    checks = container(objects)
    database = Backend.postgres(POSTGRES_URL)
    url = sa.make_url(database.url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
    through_proxy = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    env = pod_env(
        objects,
        {"SPACEDOCK_SECRET_KEY": SecretBox.generate_key(), "SPACEDOCK_DATABASE_URL": through_proxy},
    )
    try:
        server = PodLikeServer(env, tmp_path).start()
        try:
            assert probe(server, checks["readinessProbe"])[0] == 200
            proxy.cut()
            # Out of the Service while the database is away, but not restarted.
            assert probe(server, checks["readinessProbe"]) == (
                503,
                {"status": "unavailable", "database": "unreachable"},
            )
            assert probe(server, checks["livenessProbe"]) == (200, {"status": "ok"})
            proxy.restore()
            deadline = time.monotonic() + 30
            while probe(server, checks["readinessProbe"])[0] != 200:
                assert time.monotonic() < deadline, "not ready again after the database came back"
                time.sleep(0.1)
        finally:
            server.stop()
    finally:
        proxy.stop()
        database.dispose(POSTGRES_URL)
