"""Issues 7 and 18: one API server is one cluster, however its URL is spelled.

A space is registered at https://127.0.0.1:6443/c1 (or at localhost); every other
spelling that reaches the same API server (scheme and host case, legacy IPv4 and
IPv4-mapped IPv6 forms, `localhost` for 127.0.0.1 and back, a leading-zero or default
port, a trailing dot, dot segments, empty segments, percent-encoding, full-width
letters) is then CONFLICT on the server field. Paths are case-sensitive: /C1 is
another path than /c1, and registers. A registration answers the canonical URL,
which is what the probe and every cluster call use. Spaces and control characters
(escaped too), path parameters (`;`) and escaped slashes are refused before anything
parses them. Nothing here listens: probes fail, harmlessly.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.spaces.cluster_endpoints import ServerProblem, canonical_server, server_identity
from tests.conftest import Org, new_org
from tests.support import factories as make
from tests.support.server import Server

CONFLICT = "this cluster is already registered as a space"
ADDRESS_SPELLINGS = [
    "https://127.0.0.1:6443/c1/",
    "HTTPS://127.0.0.1:6443/c1",
    "https://127.0.0.1:06443/c1",
    "https://2130706433:6443/c1",
    "https://0x7f.0.0.1:6443/c1",
    "https://0177.0.0.1:6443/c1",
    "https://127.1:6443/c1",
    "https://[::ffff:127.0.0.1]:6443/c1",
    "https://[::FFFF:7F00:1]:6443/c1",
    "https://127.0.0.1:6443/x/../c1",
    "https://127.0.0.1:6443/./c1",
    "https://127.0.0.1:6443//c1//",
    "https://127.0.0.1:6443/%63%31",
    "https://127.0.0.1:6443/%2E/c1",
    "https://127.0.0.1:6443/c%31",
    "https://localhost:6443/c1",
    "https://LOCALHOST.:6443/c1/",
]
NAME_SPELLINGS = [
    "https://LOCALHOST/c2",
    "https://localhost.:443/c2",
    "https://localhost:443/c2/",
    "https://%6Cocalhost/c2",
    "https://" + "".join(chr(0xFEE0 + ord(c)) for c in "localhost") + "/c2",  # full-width
    "https://LocalHost./a/../c2",
    "https://127.0.0.1/c2",
    "https://[::ffff:127.0.0.1]:443/c2",
]
REFUSED = {
    "a newline at the end": "https://127.0.0.1:6443/c3\n",
    "a tab inside": "https://127.0.0.1:6443/c\t3",
    "a leading space": " https://127.0.0.1:6443/c3",
    "a space in the path": "https://127.0.0.1:6443/c 3",
    "a NUL in the host": "https://127.0.0.1\x00.example:6443",
    "an escape sequence": "https://127.0.0.1:6443/\x1b[2Jc3",
    "a zero-width space": "https://127.0.0.1:6443/c\u200b3",
    "a right-to-left override": "https://127.0.0.1:6443/\u202ec3",
}
# Spellings servers and proxies read differently: refused, not registered as a new space.
REFUSED_PATHS = {
    "https://127.0.0.1:6443/c1;x": "path parameters",
    "https://127.0.0.1:6443/c1%3Bx": "path parameters",
    "https://127.0.0.1:6443/c1%2F": "escaped slash",
    "https://127.0.0.1:6443/%2F/c1": "escaped slash",
    "https://127.0.0.1:6443/c1%20": "spaces or control characters",
    "https://127.0.0.1:6443/%20c1": "spaces or control characters",
    "https://127.0.0.1:6443/c1%0A": "spaces or control characters",
}


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600"}


async def register(org: Org, server: str) -> dict[str, Any]:
    payload: dict[str, Any] = await org.admin.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("spelled"),
                "provider": "GENERIC",
                "config": make.generic_config(server=server),
            }
        },
    )
    return payload


@pytest.fixture(scope="module")
def registered(server: Server) -> Org:
    """One org, with the two clusters every spelling below names."""

    async def setup() -> Org:
        org = await new_org(server, "spelled")
        for canonical in ("https://127.0.0.1:6443/c1", "https://localhost/c2"):
            space = make.succeeded(await register(org, canonical))["space"]
            assert space["config"]["server"] == canonical
        return org

    return asyncio.run(setup())


@pytest.mark.parametrize("spelling", ADDRESS_SPELLINGS + NAME_SPELLINGS)
async def test_another_spelling_of_a_registered_server_is_a_conflict(
    registered: Org, spelling: str
) -> None:
    org = registered
    payload = await register(org, spelling)
    assert payload["space"] is None
    assert make.error_fields(payload) == {(("input", "config", "server"), "CONFLICT")}
    assert payload["userErrors"][0]["message"] == CONFLICT
    assert (await org.viewer.data("{ spaces { totalCount } }"))["spaces"]["totalCount"] == 2


async def test_a_registration_answers_the_canonical_url(org: Org) -> None:
    payload = await register(org, "HTTPS://[::ffff:7f00:1]:443/Team/./a/%7Eb//")
    assert make.succeeded(payload)["space"]["config"]["server"] == "https://127.0.0.1/Team/a/~b"


@pytest.mark.parametrize("spelling", REFUSED_PATHS)
async def test_ambiguous_paths_are_refused_not_registered_anew(
    registered: Org, spelling: str
) -> None:
    org = registered
    payload = await register(org, spelling)
    assert payload["space"] is None
    assert make.error_fields(payload) == {(("input", "config", "server"), "INVALID")}
    assert REFUSED_PATHS[spelling] in payload["userErrors"][0]["message"]
    assert (await org.viewer.data("{ spaces { totalCount } }"))["spaces"]["totalCount"] == 2


async def test_paths_are_case_sensitive(org: Org) -> None:
    """/DUP and /dup are two paths (a proxy routes them apart): both register."""
    for path in ("/DUP", "/dup", "/Dup"):
        space = make.succeeded(await register(org, f"https://127.0.0.1:6443{path}"))["space"]
        assert space["config"]["server"] == f"https://127.0.0.1:6443{path}"
    assert make.error_fields(await register(org, "https://localhost:6443/DUP/")) == {
        (("input", "config", "server"), "CONFLICT")
    }
    assert (await org.viewer.data("{ spaces { totalCount } }"))["spaces"]["totalCount"] == 3


@pytest.mark.parametrize("what", REFUSED)
async def test_control_characters_and_spaces_are_refused(org: Org, what: str) -> None:
    payload = await register(org, REFUSED[what])
    assert payload["space"] is None
    assert make.error_fields(payload) == {(("input", "config", "server"), "INVALID")}
    # C0 controls meet the rule every string input has first; the rest meet the URL's.
    assert "control characters" in payload["userErrors"][0]["message"]


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("https://BÜCHER.example./k8s", "https://xn--bcher-kva.example/k8s"),
        ("https://xn--bcher-kva.EXAMPLE:443/k8s/", "https://xn--bcher-kva.example/k8s"),
        ("https://[2001:DB8:0:0::0001]:6443/%7e%5b", "https://[2001:db8::1]:6443/~%5B"),
        ("https://kube.example/a/b/../../c", "https://kube.example/c"),
        ("https://kube.example/caf%c3%a9", "https://kube.example/caf%C3%A9"),
        ("https://kube.example/café", "https://kube.example/caf%C3%A9"),
        ("https://kube.example/a%21b%3a", "https://kube.example/a!b:"),
        ("https://kube.example/%25/[x]", "https://kube.example/%25/%5Bx%5D"),
    ],
)
def test_names_are_canonical_without_being_contacted(spelling: str, canonical: str) -> None:
    """Host names beyond loopback are only canonicalised here, never registered (a
    registration would probe them)."""
    assert canonical_server(spelling, ()) == canonical


@pytest.mark.parametrize(
    "spelling",
    [
        "https://h/%zz",
        "https://h..example",
        "https://[fe80::1%25eth0]",
        "https://u@h",
        "https://h/?",
    ],
)
def test_malformed_urls_are_refused(spelling: str) -> None:
    with pytest.raises(ServerProblem):
        canonical_server(spelling, ())


@pytest.mark.parametrize(
    ("server", "identity"),
    [
        ("https://localhost", "https://127.0.0.1"),
        ("https://localhost:6443/c1", "https://127.0.0.1:6443/c1"),
        ("https://localhost/C2", "https://127.0.0.1/C2"),
        ("https://localhost.example/c", "https://localhost.example/c"),
        ("https://kube.example/localhost", "https://kube.example/localhost"),
    ],
)
def test_localhost_is_the_loopback_address_it_names(server: str, identity: str) -> None:
    assert server_identity(server) == identity
