"""providers/kube.py against the Kubernetes stand-in: both ways to authenticate, every
failure named with its reason words, and no key material left on disk."""

from __future__ import annotations

import ipaddress
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes_asyncio.client import Configuration, CoreV1Api

from providers import kube, network
from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, TemporaryError
from sim.kube_standin import KubeStandIn
from sim.pki import CertificateAuthority

MANAGED = {"app.kubernetes.io/managed-by": "spacedock"}


@pytest.fixture(scope="module")
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


@pytest.fixture
def k(standin: KubeStandIn) -> Iterator[KubeStandIn]:
    """The module's stand-in, healed after each test that flips a fault switch."""
    yield standin
    standin.heal()


def token_credentials(k: KubeStandIn, token: str | None = None) -> ClusterCredentials:
    # A trailing slash, as people paste server URLs, must not break paths.
    return ClusterCredentials(server=k.url + "/", ca_pem=k.ca_pem, token=token or k.token)


def certificate_credentials(k: KubeStandIn) -> ClusterCredentials:
    pair = k.client_certificate()
    return ClusterCredentials(
        server=k.url,
        ca_pem=k.ca_pem,
        client_certificate_pem=pair.certificate_pem,
        client_key_pem=pair.key_pem,
    )


async def failure(credentials: ClusterCredentials, timeout_s: float = 5.0) -> ProviderError:
    with pytest.raises(ProviderError) as raised:
        await kube.list_namespaces(credentials, timeout_s=timeout_s)
    return raised.value


async def test_token_auth_lists_namespaces_with_utc_creation_times(k: KubeStandIn) -> None:
    found = {n.name: n for n in await kube.list_namespaces(token_credentials(k))}
    assert {"default", "kube-system"} <= set(found)
    created = found["default"].created_at
    assert created is not None and created.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - created) < timedelta(minutes=10)
    assert found["default"].labels["kubernetes.io/metadata.name"] == "default"


async def test_client_certificate_auth_creates_a_labelled_namespace(k: KubeStandIn) -> None:
    credentials = certificate_credentials(k)
    created = await kube.create_namespace(credentials, "cert-made", MANAGED)
    assert created.name == "cert-made"
    assert created.labels["app.kubernetes.io/managed-by"] == "spacedock"
    assert (
        k.namespaces["cert-made"]["metadata"]["labels"]["app.kubernetes.io/managed-by"]
        == "spacedock"
    )
    assert "cert-made" in {n.name for n in await kube.list_namespaces(credentials)}


async def test_creating_an_existing_namespace_is_already_exists(k: KubeStandIn) -> None:
    with pytest.raises(kube.AlreadyExists) as raised:
        await kube.create_namespace(token_credentials(k), "kube-system", MANAGED)
    assert raised.value.reason.startswith("409 conflict")
    assert "already exists" in raised.value.reason


async def test_a_rejected_token_is_401_without_the_token_in_the_reason(k: KubeStandIn) -> None:
    error = await failure(token_credentials(k, token="not-the-cluster-token"))
    assert isinstance(error, PermanentError)
    assert error.reason.startswith("401 unauthorized")
    assert "not-the-cluster-token" not in error.reason


async def test_a_5xx_is_temporary_and_names_the_code(k: KubeStandIn) -> None:
    k.status_code = 503
    error = await failure(token_credentials(k))
    assert isinstance(error, TemporaryError)
    assert error.reason.startswith("HTTP 503")


async def test_nothing_listening_is_connection_refused(k: KubeStandIn) -> None:
    k.refuse()
    error = await failure(token_credentials(k))
    assert isinstance(error, TemporaryError)
    assert error.reason.startswith("connection refused")


async def test_a_certificate_from_another_ca_is_tls(k: KubeStandIn) -> None:
    k.present_wrong_ca()
    error = await failure(token_credentials(k))
    assert isinstance(error, PermanentError)
    assert error.reason.startswith("TLS")


async def test_a_configured_ca_that_did_not_sign_the_server_is_tls(k: KubeStandIn) -> None:
    other = ClusterCredentials(
        server=k.url, ca_pem=CertificateAuthority("other").pem, token=k.token
    )
    assert (await failure(other)).reason.startswith("TLS")


async def test_an_unloadable_ca_is_tls_before_any_request(k: KubeStandIn) -> None:
    before = sum(k.requests.values())
    broken = ClusterCredentials(server=k.url, ca_pem="not a certificate", token=k.token)
    assert (await failure(broken)).reason.startswith("TLS")
    assert sum(k.requests.values()) == before


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_server_in_a_denied_network_is_never_contacted(k: KubeStandIn, host: str) -> None:
    """Literal addresses and names resolving into a denied network alike."""
    before = sum(k.requests.values())
    credentials = ClusterCredentials(
        server=f"https://{host}:{k.port}", ca_pem=k.ca_pem, token=k.token
    )
    with pytest.raises(PermanentError) as raised:
        await kube.list_namespaces(credentials, deny=(ipaddress.ip_network("127.0.0.0/8"),))
    assert raised.value.reason.startswith("denied")
    assert sum(k.requests.values()) == before


async def test_cloud_metadata_is_denied_without_any_setting() -> None:
    metadata = ClusterCredentials(
        server="https://169.254.169.254", ca_pem=CertificateAuthority("x").pem, token="t"
    )
    with pytest.raises(PermanentError) as raised:
        await kube.list_namespaces(metadata, timeout_s=1)
    assert raised.value.reason.startswith("denied")


async def test_a_slow_server_is_a_timeout_within_the_limit(k: KubeStandIn) -> None:
    k.delay_s = 3.0
    started = time.monotonic()
    error = await failure(token_credentials(k), timeout_s=0.3)
    assert time.monotonic() - started < 2.0
    assert isinstance(error, TemporaryError)
    assert error.reason.startswith("timeout")


async def test_key_material_is_on_disk_only_while_the_client_is_built(
    k: KubeStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(network, "SCRATCH_ROOT", str(tmp_path))
    seen: list[dict[str, int]] = []
    real_private_files = network.private_files

    @contextmanager
    def observed_private_files(**contents: str) -> Iterator[dict[str, str]]:
        with real_private_files(**contents) as paths:
            (directory,) = tmp_path.iterdir()
            seen.append(
                {"(directory)": stat.S_IMODE(directory.stat().st_mode)}
                | {path.name: stat.S_IMODE(path.stat().st_mode) for path in directory.iterdir()}
            )
            yield paths

    monkeypatch.setattr(network, "private_files", observed_private_files)
    monkeypatch.setattr(kube, "private_files", observed_private_files)
    client = await kube.build_client(certificate_credentials(k))
    try:
        assert seen == [
            {"(directory)": 0o700, "cert": 0o600, "key": 0o600},
            {"(directory)": 0o700, "ca": 0o600},
        ]
        assert os.listdir(tmp_path) == []
        # The client keeps working on its in-memory TLS context, files gone.
        listed = await CoreV1Api(client).list_namespace()
        assert "default" in {item.metadata.name for item in listed.items}
    finally:
        await client.close()
    assert os.listdir(tmp_path) == []


async def test_a_failed_build_leaves_no_file_either(
    k: KubeStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(network, "SCRATCH_ROOT", str(tmp_path))
    pair = k.client_certificate()
    mismatched = ClusterCredentials(
        server=k.url,
        ca_pem=k.ca_pem,
        client_certificate_pem=pair.certificate_pem,
        client_key_pem=k.client_certificate("someone-else").key_pem,
    )
    with pytest.raises(PermanentError):
        await kube.list_namespaces(mismatched)
    assert os.listdir(tmp_path) == []


async def test_the_global_default_configuration_is_never_touched(k: KubeStandIn) -> None:
    before = Configuration.get_default_copy()
    await kube.list_namespaces(token_credentials(k))
    after = Configuration.get_default_copy()
    assert (after.host, after.api_key, after.ssl_ca_cert) == (
        before.host,
        before.api_key,
        before.ssl_ca_cert,
    )
    assert k.token not in repr(vars(after))


async def test_the_client_does_not_consult_proxy_settings(
    k: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy that does not exist: a session trusting the environment would fail through it.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert "default" in {n.name for n in await kube.list_namespaces(token_credentials(k))}
