"""Issue 7: a client certificate and key are checked to belong together at registration.

A key that is not the private half of the certificate would fail every TLS
handshake later, as a probe reason nobody can act on. Registration refuses it at
once, as INVALID on ["input", "config", "clientKey"], writes nothing, and never
echoes key material. A matching pair registers and works against the stand-in.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from sim.kube_standin import KubeStandIn
from sim.pki import CertificateAuthority
from tests.conftest import Org
from tests.support import factories as make

NAMESPACES = "query($id: ID!) { space(id: $id) { namespaces { name } } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


@pytest.fixture(scope="module")
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


def rsa_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def mismatched_pairs(standin: KubeStandIn) -> dict[str, tuple[str, str]]:
    mine, theirs = standin.client_certificate("alice"), standin.client_certificate("bob")
    other_ca = CertificateAuthority("elsewhere").issue("alice", server=False)
    return {
        "another user's key": (mine.certificate_pem, theirs.key_pem),
        "a key of another kind (RSA for EC)": (mine.certificate_pem, rsa_key_pem()),
        "the same name from another CA": (mine.certificate_pem, other_ca.key_pem),
    }


KINDS = [
    "another user's key",
    "a key of another kind (RSA for EC)",
    "the same name from another CA",
]


async def register(org: Org, standin: KubeStandIn, certificate: str, key: str) -> dict[str, Any]:
    payload: dict[str, Any] = await org.admin.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("paired"),
                "provider": "GENERIC",
                "config": {
                    "clusterName": make.unique("paired"),
                    "server": f"{standin.url}/{make.unique('c')}",
                    "caCert": standin.ca_pem,
                    "clientCertificate": certificate,
                    "clientKey": key,
                },
            }
        },
    )
    return payload


@pytest.mark.parametrize("kind", KINDS)
async def test_a_key_that_is_not_the_certificates_is_invalid(
    org: Org, standin: KubeStandIn, kind: str
) -> None:
    certificate, key = mismatched_pairs(standin)[kind]
    calls = sum(standin.requests.values())

    payload = await register(org, standin, certificate, key)

    assert payload["space"] is None
    assert make.error_fields(payload) == {(("input", "config", "clientKey"), "INVALID")}
    message = payload["userErrors"][0]["message"]
    assert "does not belong to clientCertificate" in message
    assert "PRIVATE KEY" not in str(payload) and key.splitlines()[1] not in str(payload)
    assert (await org.viewer.data("{ spaces { totalCount } }"))["spaces"]["totalCount"] == 0
    assert sum(standin.requests.values()) == calls, "nothing was contacted"


async def test_a_matching_pair_registers_and_lists(org: Org, standin: KubeStandIn) -> None:
    pair = standin.client_certificate()
    space = make.succeeded(await register(org, standin, pair.certificate_pem, pair.key_pem))[
        "space"
    ]
    data = await org.viewer.data(NAMESPACES, {"id": space["id"]})
    assert "kube-system" in {n["name"] for n in data["space"]["namespaces"]}
