"""Issue 7: the deny list at registration is the deny list at connect.

A cluster address can be spelled many ways that reach the same machine: legacy IPv4
forms the system resolver accepts, IPv4-mapped and IPv4-compatible IPv6, NAT64 and
6to4. Each spelling of a denied canary (127.0.0.2, denied by this module's server) and
of the cloud metadata addresses (denied by default; only ever written, never
contacted) is refused at registration, naming the server field, and nothing is
written. The connection side uses the same check: the session every cluster call
goes through refuses each spelling before it opens a socket.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest

from providers.errors import PermanentError
from providers.network import OutboundSession
from tests.conftest import Org
from tests.support import factories as make
from tests.support.canary import Canary

CANARY_SPELLINGS = [
    "127.0.0.2",
    "2130706434",
    "0x7f000002",
    "0x7f.0.0.2",
    "0177.0.0.2",
    "127.2",
    "127.0.2",
    "[::ffff:127.0.0.2]",
    "[::ffff:7f00:2]",
    "[::127.0.0.2]",
    "[64:ff9b::7f00:2]",
    "[64:ff9b::127.0.0.2]",
    "[2002:7f00:2::1]",
]
METADATA_SPELLINGS = [
    "169.254.169.254",
    "2852039166",
    "0xa9fea9fe",
    "169.254.43518",
    "0251.0376.0251.0376",
    "[::ffff:169.254.169.254]",
    "[::ffff:a9fe:a9fe]",
    "[::169.254.169.254]",
    "[64:ff9b::a9fe:a9fe]",
    "[2002:a9fe:a9fe::]",
    "[fe80::1%25eth0]",
    "[fd00:ec2::254]",
    "[FD00:EC2:0:0:0:0:0:254]",
    "100.100.100.200",
    "1684301000",
]


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    with Canary("127.0.0.2") as listening:
        yield listening


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600", "SPACEDOCK_CLUSTER_DENY_CIDRS": "127.0.0.2/32"}


@pytest.mark.parametrize("host", CANARY_SPELLINGS + METADATA_SPELLINGS)
async def test_every_spelling_of_a_denied_address_is_refused_at_registration(
    org: Org, canary: Canary, host: str
) -> None:
    port = f":{canary.port}" if host in CANARY_SPELLINGS else ""
    payload = await org.admin.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("spelled"),
                "provider": "GENERIC",
                "config": make.generic_config(server=f"https://{host}{port}"),
            }
        },
    )

    assert payload["space"] is None
    assert make.error_fields(payload) == {(("input", "config", "server"), "INVALID")}
    assert "denied" in payload["userErrors"][0]["message"]
    assert (await org.viewer.data("{ spaces { totalCount } }"))["spaces"]["totalCount"] == 0
    assert canary.connections == 0


@pytest.mark.parametrize("host", CANARY_SPELLINGS)
async def test_the_cluster_session_refuses_every_spelling_before_connecting(
    canary: Canary, host: str
) -> None:
    session = OutboundSession((ipaddress.ip_network("127.0.0.2/32"),))
    try:
        with pytest.raises(PermanentError) as refused:
            await session.request("GET", f"http://{host}:{canary.port}/version")
    finally:
        await session.close()
    assert refused.value.reason.startswith("denied: the address")
    assert canary.connections == 0


async def test_loopback_itself_stays_allowed(org: Org) -> None:
    """kind and k3s live on loopback: only the denied canary address is refused."""
    space = await make.register_generic_space(org.admin, server="https://127.0.0.1:6443")
    assert space["config"]["server"] == "https://127.0.0.1:6443"
