"""Probes resume TLS sessions (issue 12), and a resumed session never stands in for
certificate verification: a real TLS stand-in API server counts, from its own side, which
handshakes were resumed and which were full."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from providers.cluster_credentials import ClusterCredentials
from providers.probe import VersionProber
from sim.kube_standin import KubeStandIn
from sim.pki import CertificateAuthority


@pytest.fixture
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


@pytest.fixture
async def prober() -> AsyncIterator[VersionProber]:
    prober = VersionProber(timeout_s=5.0)
    yield prober
    await prober.close()


def credentials(cluster: KubeStandIn, ca_pem: str, path: str = "") -> ClusterCredentials:
    return ClusterCredentials(server=cluster.url + path, ca_pem=ca_pem, token=cluster.token)


async def test_probes_after_the_first_resume_its_tls_session(
    cluster: KubeStandIn, prober: VersionProber
) -> None:
    for _ in range(3):
        outcome = await prober.probe(credentials(cluster, cluster.ca_pem))
        assert outcome.ok, outcome
    assert cluster.handshakes == {"full": 1, "resumed": 2}
    # Spaces on one API server under different paths share its session.
    assert (await prober.probe(credentials(cluster, cluster.ca_pem, "/c1"))).ok
    assert cluster.handshakes == {"full": 1, "resumed": 3}


async def test_a_ca_change_is_verified_afresh_and_never_resumes_the_old_session(
    cluster: KubeStandIn, prober: VersionProber
) -> None:
    assert (await prober.probe(credentials(cluster, cluster.ca_pem))).ok
    assert (await prober.probe(credentials(cluster, cluster.ca_pem))).ok
    assert cluster.handshakes == {"full": 1, "resumed": 1}

    # The space now trusts another CA, which did not sign the server's certificate: the
    # probe must fail verification, not ride the session the old CA verified.
    other_ca = CertificateAuthority("rotated-ca").pem
    refused = await prober.probe(credentials(cluster, other_ca))
    assert not refused.ok and refused.error is not None and "TLS" in refused.error, refused
    assert cluster.handshakes == {"full": 1, "resumed": 1}  # no request got through

    # Back on the right CA, the old session is gone: a full, verified handshake again.
    assert (await prober.probe(credentials(cluster, cluster.ca_pem))).ok
    assert cluster.handshakes == {"full": 2, "resumed": 1}


async def test_a_server_that_changes_its_certificate_is_verified_again(
    cluster: KubeStandIn, prober: VersionProber
) -> None:
    assert (await prober.probe(credentials(cluster, cluster.ca_pem))).ok
    assert (await prober.probe(credentials(cluster, cluster.ca_pem))).ok
    cluster.present_wrong_ca()  # an impostor on the same address
    refused = await prober.probe(credentials(cluster, cluster.ca_pem))
    assert not refused.ok and refused.error is not None and "TLS" in refused.error, refused
    cluster.heal()
    assert (await prober.probe(credentials(cluster, cluster.ca_pem))).ok
    assert cluster.handshakes == {"full": 2, "resumed": 1}
    assert prober.sessions.handshakes == {"full": 2, "resumed": 1}
