"""Secrets go in and never come out: not in a response, an error, a log line, or the database in clear.

One org creates AWS, GCP and AZURE accounts and GENERIC spaces (a bearer token
and a client certificate) whose every secret is distinctive, lets the probe
loop use them, reads back every field the schema offers (found through
introspection, so a field added later is read too), sends invalid inputs that
carry secrets, and then searches every raw response body, the server's log
and every stored row for any of the secret strings.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from sim import clouds
from sim.clouds import Clouds
from sim.kube_standin import KubeStandIn
from sim.ports import free_port
from tests.conftest import Org, new_org
from tests.support import factories as make
from tests.support.server import Server

# Every secret below contains MARK, except PEM bodies, which are searched line by line.
MARK = f"zq{secrets.token_hex(5)}"
NOWHERE = f"127.0.0.1:{free_port()}"  # nothing listens here: cloud calls fail fast, locally


def pem_lines(pem: str) -> list[str]:
    """The base64 lines of a PEM block: any one of them is enough to spot a leak."""
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


@dataclass
class Secrets:
    """The distinctive secrets this module hands the server, and what to search for."""

    fragments: list[str] = field(default_factory=lambda: [MARK])

    def pem(self, pem: str) -> str:
        self.fragments += pem_lines(pem)
        return pem


SECRETS = Secrets()
STANDIN_TOKEN = f"{MARK}-generic-bearer-token"
AWS_ACCESS_KEY_ID = "AKIA" + secrets.token_hex(8).upper()
SECRETS.fragments.append(AWS_ACCESS_KEY_ID)
AWS = {
    "accessKeyId": AWS_ACCESS_KEY_ID,
    "secretAccessKey": f"{MARK}-aws-secret-access-key",
    "sessionToken": f"{MARK}-aws-session-token",
    "externalId": f"{MARK}-aws-external-id",
}
GCP_KEY_FILE = {
    **make.gcp_service_account(),
    "private_key_id": f"{MARK}-gcp-private-key-id",
    "token_uri": f"http://{NOWHERE}/token",
}
AZURE = {**make.azure_credentials(), "clientSecret": f"{MARK}-azure-client-secret"}


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # Probes run often enough to use every credential several times during the module.
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "0.3",
        "SPACEDOCK_PROBE_TIMEOUT_S": "1",
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn(token=STANDIN_TOKEN) as standin:
        SECRETS.pem(standin.ca_pem)
        yield standin


class Recorder:
    """Calls the API as one org's admin and keeps every raw response body."""

    def __init__(self, server: Server, token: str) -> None:
        self.server = server
        self.headers = {"Authorization": f"Bearer {token}"}
        self.bodies: list[tuple[str, str]] = []

    async def ask(self, label: str, query: str, variables: dict[str, Any] | None = None) -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.server.url,
                json={"query": query, "variables": variables or {}},
                headers=self.headers,
            ) as response,
        ):
            body = await response.text()
        self.bodies.append((label, body))
        return json.loads(body)

    async def payload(self, label: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        answer = await self.ask(label, query, variables)
        assert not answer.get("errors"), (label, answer["errors"])
        (payload,) = answer["data"].values()
        assert payload["userErrors"] == [], (label, payload["userErrors"])
        result: dict[str, Any] = payload
        return result


@dataclass
class Scene:
    recorder: Recorder
    ids: list[str]


async def _account(recorder: Recorder, provider: str, credentials: dict[str, Any]) -> str:
    variables = {
        "input": {
            "name": make.unique(provider.lower()),
            "provider": provider,
            "credentials": credentials,
        }
    }
    payload = await recorder.payload(
        f"create {provider} account", make.CREATE_CLOUD_ACCOUNT, variables
    )
    account_id: str = payload["cloudAccount"]["id"]
    return account_id


async def _space(recorder: Recorder, label: str, register: dict[str, Any]) -> str:
    variables = {"input": {"name": make.unique("space"), **register}}
    payload = await recorder.payload(label, make.REGISTER_SPACE, variables)
    space_id: str = payload["space"]["id"]
    return space_id


async def _cloud_space(recorder: Recorder, provider: str, account_id: str) -> str:
    config = make.cloud_config(provider, "prod")
    clouds.active().add_cluster(provider, "prod", config["region"], config.get("resourceGroup"))
    access = {"cloudAccountId": account_id, "region": config["region"], "clusterName": "prod"}
    if provider == "AZURE":
        access["resourceGroup"] = config["resourceGroup"]
    await recorder.payload(f"grant {provider}", make.GRANT_CLUSTER_ACCESS, {"input": access})
    register = {"provider": provider, "cloudAccountId": account_id, "config": config}
    return await _space(recorder, f"register {provider} space", register)


async def _wait_for_probes(recorder: Recorder, space_ids: list[str]) -> None:
    """Until the probe loop has reached each GENERIC space with its secret (token or client
    certificate), so that the log searched later holds a probe's whole path."""
    deadline = time.monotonic() + 15
    query = "{ spaces(first: 100) { nodes { id lastProbe { ok } } } }"
    while True:
        answer = await recorder.ask("probe progress", query)
        nodes = answer["data"]["spaces"]["nodes"]
        if set(space_ids) <= {n["id"] for n in nodes if n["lastProbe"] and n["lastProbe"]["ok"]}:
            return
        assert time.monotonic() < deadline, f"the probes never succeeded: {nodes}"
        await asyncio.sleep(0.1)


def _cloud_credentials(standins: Clouds) -> dict[str, dict[str, Any]]:
    """Credentials the cloud stand-ins accept, every secret part of them to be searched for:
    AWS keys with a role to assume (its external id distinctive), a GCP key file."""
    aws = {
        **standins.aws_user(make.unique("vault")),
        "roleArn": standins.aws_role(make.unique("vault"), clouds.AWS_ACCOUNT),
        "externalId": f"{MARK}-aws-external-id",
    }
    SECRETS.fragments += [aws["accessKeyId"], aws["secretAccessKey"]]
    key_file = standins.gcp.service_account(make.GCP_PROJECT)
    SECRETS.fragments.append(key_file["private_key_id"])
    SECRETS.pem(key_file["private_key"])
    azure = standins.credentials("AZURE")
    SECRETS.fragments.append(azure["clientSecret"])
    return {"AWS": aws, "GCP": {"serviceAccountJson": key_file}, "AZURE": azure}


@pytest.fixture
async def scene(server: Server, cluster: KubeStandIn, clouds: Clouds) -> Scene:
    org: Org = await new_org(server, "vault")
    recorder = Recorder(server, org.tokens["admin"])
    client = cluster.client_certificate("secrets-test")
    SECRETS.pem(client.key_pem)
    SECRETS.pem(client.certificate_pem)

    accounts = {
        provider: await _account(recorder, provider, credentials)
        for provider, credentials in _cloud_credentials(clouds).items()
    }
    cloud_spaces = [await _cloud_space(recorder, p, a) for p, a in accounts.items()]
    token_space = await _space(
        recorder,
        "register GENERIC token space",
        {
            "provider": "GENERIC",
            "config": make.generic_config(f"{cluster.url}/token", cluster.ca_pem, STANDIN_TOKEN),
        },
    )
    certificate_config = {
        **make.generic_config(f"{cluster.url}/certificate", cluster.ca_pem),
        "clientCertificate": client.certificate_pem,
        "clientKey": client.key_pem,
    }
    del certificate_config["serviceAccountToken"]
    certificate_space = await _space(
        recorder,
        "register GENERIC client-certificate space",
        {"provider": "GENERIC", "config": certificate_config},
    )
    environment = await recorder.payload(
        "create environment",
        make.CREATE_ENVIRONMENT,
        {"input": {"name": make.unique("env"), "spaceId": token_space, "namespace": "apps"}},
    )
    await _wait_for_probes(recorder, [token_space, certificate_space, *cloud_spaces])
    # The short-lived tokens minted for the cloud spaces are secrets too.
    assert clouds.tokens_seen
    SECRETS.fragments += clouds.tokens_seen

    # Every other kind of mutation payload, once each.
    spare = await _account(recorder, "GCP", clouds.credentials("GCP"))
    await recorder.payload("delete account", make.DELETE_CLOUD_ACCOUNT, {"input": {"id": spare}})
    held = {"input": {"id": token_space, "status": "INACTIVE"}}
    await recorder.payload("hold", make.SET_SPACE_STATUS, held)
    await recorder.payload(
        "lift", make.SET_SPACE_STATUS, {"input": {**held["input"], "status": "ACTIVE"}}
    )
    clouds.add_cluster("AWS", "other", "us-east-1")
    access = {"cloudAccountId": accounts["AWS"], "region": "us-east-1", "clusterName": "other"}
    await recorder.payload("grant", make.GRANT_CLUSTER_ACCESS, {"input": access})
    await recorder.payload("revoke", make.REVOKE_CLUSTER_ACCESS, {"input": access})
    await recorder.payload(
        "bind environment",
        make.BIND_ENVIRONMENT,
        {
            "input": {
                "id": environment["environment"]["id"],
                "spaceId": certificate_space,
                "namespace": "web",
            }
        },
    )
    await recorder.payload(
        "deregister", make.DEREGISTER_SPACE, {"input": {"id": certificate_space}}
    )

    ids = [
        *accounts.values(),
        *cloud_spaces,
        token_space,
        certificate_space,
        environment["environment"]["id"],
    ]
    return Scene(recorder=recorder, ids=ids)


INTROSPECT = """
fragment TypeRef on __Type { kind name ofType { kind name ofType { kind name ofType { kind name } } } }
{
  __schema {
    types {
      name kind
      fields { name args { name type { ...TypeRef } defaultValue } type { ...TypeRef } }
    }
  }
}
"""


def _named(type_ref: dict[str, Any]) -> dict[str, Any]:
    while type_ref.get("ofType") is not None:
        type_ref = type_ref["ofType"]
    return type_ref


def selection(types: dict[str, Any], name: str, depth: int) -> str:
    """Every field of `name` that needs no argument, objects followed `depth` levels deep."""
    picked = []
    for field_ in types[name]["fields"]:
        if any(
            a["type"]["kind"] == "NON_NULL" and a["defaultValue"] is None for a in field_["args"]
        ):
            continue
        target = _named(field_["type"])
        if target["kind"] in ("SCALAR", "ENUM"):
            picked.append(field_["name"])
        elif target["kind"] == "OBJECT" and depth > 0:
            picked.append(f"{field_['name']} {{ {selection(types, target['name'], depth - 1)} }}")
        elif target["kind"] == "INTERFACE":
            picked.append(f"{field_['name']} {{ __typename }}")
    return " ".join(picked)


async def test_no_secret_in_any_response_log_line_or_stored_row(
    server: Server, scene: Scene
) -> None:
    recorder = scene.recorder
    schema = (await recorder.ask("introspection", INTROSPECT))["data"]["__schema"]
    types = {t["name"]: t for t in schema["types"] if t["kind"] == "OBJECT"}
    every = {name: selection(types, name, 2) for name in ("CloudAccount", "Space", "Environment")}
    for kind in ("CloudAccount", "SpaceConfig"):
        assert selection(types, kind, 0), f"introspection shows no fields of {kind}"

    fragments = " ".join(f"... on {kind} {{ {fields} }}" for kind, fields in every.items())
    for object_id in scene.ids:
        await recorder.ask(
            f"node {object_id}", f'{{ node(id: "{object_id}") {{ __typename {fragments} }} }}'
        )
    await recorder.ask(
        "accounts", f"{{ cloudAccounts(first: 100) {{ nodes {{ {every['CloudAccount']} }} }} }}"
    )
    await recorder.ask(
        "spaces",
        f"{{ spaces(first: 100, filter: {{includeDeregistered: true}}) {{ nodes {{ {every['Space']} }} }} }}",
    )
    await recorder.ask(
        "environments", f"{{ environments(first: 100) {{ nodes {{ {every['Environment']} }} }} }}"
    )
    await _send_invalid_inputs(recorder, scene)

    for label, body in recorder.bodies:
        leaked = [f for f in SECRETS.fragments if f in body]
        assert not leaked, f"{label} answered with a secret: {leaked[:1]}"
    log = server.log()
    assert not [f for f in SECRETS.fragments if f in log], "a secret reached the server log"
    stored = await _every_stored_cell(server.backend.url)
    assert any(scene.ids[0] in cell for cell in stored), "the dump is not of this server's database"
    assert not [f for f in SECRETS.fragments if any(f in cell for cell in stored)], (
        "a secret is stored in clear"
    )


async def _send_invalid_inputs(recorder: Recorder, scene: Scene) -> None:
    """Wrong inputs that carry secrets; every answer must refuse without quoting them."""
    token_config = make.generic_config(token=f"{MARK}-rejected-token")
    bad_key = f"-----BEGIN PRIVATE KEY-----\n{MARK}notakey\n-----END PRIVATE KEY-----\n"
    invalid_spaces = {
        "token of the wrong type": {
            **token_config,
            "serviceAccountToken": {"value": f"{MARK}-obj"},
        },
        "token with a space": {**token_config, "serviceAccountToken": f"Bearer {MARK}-spaced"},
        "credentials in the server URL": {
            **token_config,
            "server": f"https://admin:{MARK}@127.0.0.1:6443",
        },
        "a key that is not PEM": {
            **token_config,
            "serviceAccountToken": None,
            "clientKey": bad_key,
        },
        "a CA that is not PEM": {**token_config, "caCert": f"{MARK}-not-a-ca"},
        "an unknown CA field": {**token_config, "certificateAuthority": f"{MARK}-unknown-field"},
        "no clusterName": {k: v for k, v in token_config.items() if k != "clusterName"},
        "a token for a cloud provider": {
            **make.cloud_config("AWS", "prod"),
            "serviceAccountToken": f"{MARK}-aws",
        },
    }
    for label, config in invalid_spaces.items():
        provider = "AWS" if "cloud" in label else "GENERIC"
        variables = {"input": {"name": "bad", "provider": provider, "config": config}}
        await _refused(recorder, label, make.REGISTER_SPACE, variables)

    invalid_accounts: dict[str, tuple[str, Any]] = {
        "AWS key id not in shape": ("AWS", {**AWS, "accessKeyId": f"{MARK}-lowercase"}),
        "AWS role ARN not in shape": ("AWS", {**AWS, "roleArn": f"arn:{MARK}"}),
        "AWS secret under a wrong name": ("AWS", {**AWS, "secretKey": f"{MARK}-misnamed"}),
        "GCP key file that is not JSON": (
            "GCP",
            {"serviceAccountJson": f'{{"private_key": "{MARK}'},
        ),
        "GCP key file without a type": (
            "GCP",
            {"serviceAccountJson": {**GCP_KEY_FILE, "type": f"{MARK}-type"}},
        ),
        "AZURE client id not a UUID": ("AZURE", {**AZURE, "clientId": f"{MARK}-client-id"}),
        "credentials that are a string": ("AWS", f"{MARK}-just-a-string"),
    }
    for label, (provider, credentials) in invalid_accounts.items():
        variables = {"input": {"name": "bad", "provider": provider, "credentials": credentials}}
        await _refused(recorder, label, make.CREATE_CLOUD_ACCOUNT, variables)

    # Secrets written into the document itself, not passed as variables.
    literal = (
        'mutation { registerSpace(input: {name: "bad", provider: GENERIC, '
        f'config: {{server: "https://127.0.0.1:6443", serviceAccountToken: "{MARK}-literal"}}}}) '
        "{ space { id } userErrors { message } } }"
    )
    await _refused(recorder, "secret in a literal without clusterName", literal, {})
    enum = 'mutation($p: Provider!) { createCloudAccount(input: {name: "x", provider: $p, credentials: {}}) { userErrors { message } } }'
    await _refused(recorder, "secret as an enum value", enum, {"p": f"{MARK}-enum"})


async def _refused(recorder: Recorder, label: str, query: str, variables: dict[str, Any]) -> None:
    answer = await recorder.ask(label, query, variables)
    payload = next(iter((answer.get("data") or {}).values()), None)
    refused = bool(answer.get("errors")) or bool(payload and payload["userErrors"])
    assert refused, f"{label} was accepted: {answer}"


async def _every_stored_cell(database_url: str) -> list[str]:
    """Every value of every row of every table, as text."""
    engine = create_async_engine(database_url)
    metadata = sa.MetaData()
    try:
        async with engine.connect() as connection:
            await connection.run_sync(metadata.reflect)
            cells = []
            for table in metadata.sorted_tables:
                for row in (await connection.execute(sa.select(table))).all():
                    cells += [str(value) for value in row]
            return cells
    finally:
        await engine.dispose()
