"""Cluster credentials are cached until shortly before they expire, and built only on a miss."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from providers.credentials import REFRESH_MARGIN, ClusterCredentials, ClusterTarget, CredentialCache
from tests.support.pki import CertificateAuthority

CA = CertificateAuthority().pem


def generic_target(space_id: str, token: str) -> ClusterTarget:
    return ClusterTarget(
        space_id=space_id,
        provider="GENERIC",
        config={"clusterName": "dev", "server": "https://127.0.0.1:6443"},
        secret={"caCert": CA, "serviceAccountToken": token},
    )


def test_a_credential_is_fresh_until_the_refresh_margin_before_expiry() -> None:
    now = datetime.now(UTC)
    static = ClusterCredentials(server="https://x", ca_pem=CA, token="t")
    assert static.fresh(now + timedelta(days=365))
    expiring = ClusterCredentials(
        server="https://x", ca_pem=CA, token="t", expires_at=now + timedelta(minutes=14)
    )
    assert expiring.fresh(now)
    assert expiring.fresh(now + timedelta(minutes=14) - REFRESH_MARGIN - timedelta(seconds=1))
    assert not expiring.fresh(now + timedelta(minutes=14) - REFRESH_MARGIN)


async def test_the_cache_builds_the_target_only_on_a_miss_and_forgets_on_request() -> None:
    cache = CredentialCache()
    built: list[str] = []

    def target(token: str) -> ClusterTarget:
        built.append(token)
        return generic_target("spc_1", token)

    first = await cache.get("spc_1", lambda: target("one"))
    again = await cache.get("spc_1", lambda: target("two"))
    assert first is again and first.token == "one"
    assert built == ["one"]  # no decryption or minting while the credential is fresh

    cache.forget("spc_1")  # e.g. the cluster grant was revoked
    renewed = await cache.get("spc_1", lambda: target("three"))
    assert renewed.token == "three"
    assert built == ["one", "three"]


def test_a_credential_never_shows_its_secrets_in_repr() -> None:
    credentials = ClusterCredentials(
        server="https://x",
        ca_pem=CA,
        token="sekret-token",
        client_certificate_pem="CERT",
        client_key_pem="-----BEGIN PRIVATE KEY-----",
    )
    shown = repr(credentials) + repr(generic_target("spc_1", "sekret-token"))
    assert "sekret-token" not in shown
    assert "PRIVATE KEY" not in shown
    assert "BEGIN CERTIFICATE" not in shown
