"""Issue 7: generated inputs for every mutation against one running server.

Hypothesis fills each mutation's input with arbitrary text (control characters, lone
surrogates, newlines, huge and empty strings), arbitrary JSON credentials and ids both
real and impossible. Whatever it sends: no 500, no INTERNAL_SERVER_ERROR, userErrors
only with the documented codes, and a refused call writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import apps
from tests.support import factories as make
from tests.support.server import Server, mint_token

USER_ERROR_CODES = {
    "INVALID",
    "NOT_FOUND",
    "CONFLICT",
    "FORBIDDEN",
    "PRECONDITION_FAILED",
    "QUOTA_EXCEEDED",
    "PROVIDER_ERROR",
}
EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
NAMESPACE = (
    "mutation($input: CreateNamespaceInput!) { createNamespace(input: $input) "
    "{ namespace { name } userErrors { field message code } } }"
)
TOTALS = (
    "{ cloudAccounts(first: 1) { totalCount } spaces(first: 1) { totalCount } "
    "environments(first: 1) { totalCount } apps(first: 1) { totalCount } }"
)


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # Several 64 KiB+ strings in one input may pass 1 MiB once JSON-escaped; the body
    # limit has its own tests (test_attack_bodies), these are about what a mutation does.
    return {"SPACEDOCK_MAX_BODY_BYTES": str(8 * 1024 * 1024)}


class Caller:
    """A synchronous client: Hypothesis drives plain functions."""

    def __init__(self, server: Server, token: str) -> None:
        self.server, self.token = server, token

    def call(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            self.server.url,
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                assert reply.status == 200
                body: dict[str, Any] = json.loads(reply.read())
        except urllib.error.HTTPError as refused:
            # A request no operation could take (an integer past 64 bits): 400 BAD_REQUEST.
            assert refused.code == 400, refused
            body = json.loads(refused.read())
        return body

    def data(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = self.call(query, variables)
        assert not body.get("errors"), body
        data: dict[str, Any] = body["data"]
        return data


@pytest.fixture(scope="module")
def admin(server: Server) -> Caller:
    return Caller(server, asyncio.run(mint_token(server.backend.url, "fuzzed", "admin")))


@pytest.fixture(scope="module")
def real(admin: Caller) -> dict[str, str]:
    """Ids of real objects, so generated inputs also hit existing rows."""
    account = admin.data(
        make.CREATE_CLOUD_ACCOUNT,
        {"input": {"name": "fuzz-aws", "provider": "AWS", "credentials": make.AWS_CREDENTIALS}},
    )["createCloudAccount"]["cloudAccount"]
    space = admin.data(
        make.REGISTER_SPACE,
        {"input": {"name": "fuzz-space", "provider": "GENERIC", "config": make.generic_config()}},
    )["registerSpace"]["space"]
    environment = admin.data(
        make.CREATE_ENVIRONMENT,
        {"input": {"name": "fuzz-env", "spaceId": space["id"], "namespace": "default"}},
    )["createEnvironment"]["environment"]
    app = admin.data(
        apps.CREATE,
        {
            "input": {
                "name": "fuzz-app",
                "target": {"environmentId": environment["id"]},
                "source": apps.git_input("https://git.example/fuzz.git"),
            }
        },
    )["createApp"]
    return {
        "account": account["id"],
        "space": space["id"],
        "environment": environment["id"],
        "app": app["app"]["id"],
        "revision": app["revision"]["id"],
    }


SHORT = st.one_of(
    st.text(max_size=70),
    st.sampled_from(["prod", "prod\n", "", " ", "a" * 64, "us-east-1", "\x00", "\ud800"]),
)
# Past the 64 KiB limit on any input string.
LONG = st.sampled_from(["a" * 70_000, "é" * 40_000])
TEXT = st.one_of(SHORT, LONG)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | SHORT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SHORT, inner, max_size=4),
    max_leaves=12,
)


def ids(real: dict[str, str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(list(real.values())),
        st.builds(
            lambda real_id, tail: real_id + tail, st.sampled_from(list(real.values())), SHORT
        ),
        SHORT,
    )


def inputs(real: dict[str, str]) -> Iterator[tuple[str, str, st.SearchStrategy[dict[str, Any]]]]:
    object_id = ids(real)
    provider = st.sampled_from(["AWS", "GCP", "AZURE", "GENERIC"])
    config = st.fixed_dictionaries(
        {"clusterName": TEXT},
        optional={
            "region": TEXT,
            "projectId": TEXT,
            "resourceGroup": TEXT,
            "subscriptionId": TEXT,
            "server": st.one_of(TEXT, st.builds(lambda t: "https://127.0.0.1:6443/" + t, TEXT)),
            "caCert": st.one_of(TEXT, st.just(make.ca_pem())),
            "serviceAccountToken": TEXT,
            "clientCertificate": TEXT,
            "clientKey": TEXT,
        },
    )
    access = st.fixed_dictionaries(
        {"cloudAccountId": object_id, "region": TEXT, "clusterName": TEXT},
        optional={"resourceGroup": TEXT},
    )
    yield (
        "createCloudAccount",
        make.CREATE_CLOUD_ACCOUNT,
        st.fixed_dictionaries({"name": TEXT, "provider": provider, "credentials": JSON}),
    )
    yield (
        "rotateCloudAccountCredentials",
        make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS,
        st.fixed_dictionaries({"id": object_id, "credentials": JSON}),
    )
    yield "deleteCloudAccount", make.DELETE_CLOUD_ACCOUNT, st.fixed_dictionaries({"id": object_id})
    yield "grantClusterAccess", make.GRANT_CLUSTER_ACCESS, access
    yield "revokeClusterAccess", make.REVOKE_CLUSTER_ACCESS, access
    yield (
        "registerSpace",
        make.REGISTER_SPACE,
        st.fixed_dictionaries(
            {"name": TEXT, "provider": provider, "config": config},
            optional={"cloudAccountId": object_id, "synthetic": st.booleans()},
        ),
    )
    yield (
        "setSpaceStatus",
        make.SET_SPACE_STATUS,
        st.fixed_dictionaries(
            {"id": object_id, "status": st.sampled_from(["ACTIVE", "INACTIVE", "UNKNOWN"])}
        ),
    )
    yield "deregisterSpace", make.DEREGISTER_SPACE, st.fixed_dictionaries({"id": object_id})
    yield (
        "createNamespace",
        NAMESPACE,
        st.fixed_dictionaries({"spaceId": object_id, "name": TEXT}),
    )
    yield (
        "createEnvironment",
        make.CREATE_ENVIRONMENT,
        st.fixed_dictionaries({"name": TEXT, "spaceId": object_id, "namespace": TEXT}),
    )
    yield (
        "bindEnvironment",
        make.BIND_ENVIRONMENT,
        st.fixed_dictionaries({"id": object_id, "spaceId": object_id, "namespace": TEXT}),
    )


def cloud_space_mutation(name: str, input_type: str) -> str:
    return (
        f"mutation($input: {input_type}!) {{ {name}(input: $input) "
        "{ cloudSpace { id } userErrors { field message code } } }"
    )


def cloud_space_inputs(
    real: dict[str, str],
) -> Iterator[tuple[str, str, st.SearchStrategy[dict[str, Any]]]]:
    object_id = ids(real)
    cpu = st.floats(allow_nan=False, allow_infinity=False, width=32)
    memory = st.integers(min_value=-(2**31), max_value=2**31 - 1)
    yield (
        "createCloudSpace",
        cloud_space_mutation("createCloudSpace", "CreateCloudSpaceInput"),
        st.fixed_dictionaries(
            {"name": TEXT, "cpu": cpu, "memoryMiB": memory}, optional={"hostSpaceId": object_id}
        ),
    )
    yield (
        "updateCloudSpaceQuota",
        cloud_space_mutation("updateCloudSpaceQuota", "UpdateCloudSpaceQuotaInput"),
        st.fixed_dictionaries({"id": object_id, "cpu": cpu, "memoryMiB": memory}),
    )
    yield (
        "deleteCloudSpace",
        cloud_space_mutation("deleteCloudSpace", "DeleteCloudSpaceInput"),
        st.fixed_dictionaries({"id": object_id, "confirmName": TEXT}),
    )

    def vcluster_mutation(name: str, input_type: str) -> str:
        return (
            f"mutation($input: {input_type}!) {{ {name}(input: $input) "
            "{ vcluster { id } userErrors { field message code } } }"
        )

    yield (
        "addVCluster",
        vcluster_mutation("addVCluster", "AddVClusterInput"),
        st.fixed_dictionaries({"cloudSpaceId": object_id, "name": TEXT}),
    )
    yield (
        "removeVCluster",
        vcluster_mutation("removeVCluster", "RemoveVClusterInput"),
        st.fixed_dictionaries({"id": object_id, "confirmName": TEXT}),
    )


def access_inputs(
    real: dict[str, str],
) -> Iterator[tuple[str, str, st.SearchStrategy[dict[str, Any]]]]:
    """Custom roles and API tokens."""

    def mutation(name: str, input_type: str) -> str:
        return (
            f"mutation($input: {input_type}!) {{ {name}(input: $input) "
            "{ __typename userErrors { field message code } } }"
        )

    object_id = ids(real)
    policies = st.lists(
        st.one_of(SHORT, st.sampled_from(["space:view", "token:manage"])), max_size=5
    )
    role = st.one_of(SHORT, st.sampled_from(["ADMIN", "EDITOR", "VIEWER"]), object_id)
    yield (
        "createRole",
        mutation("createRole", "CreateRoleInput"),
        st.fixed_dictionaries({"name": TEXT, "policies": policies}),
    )
    yield (
        "updateRole",
        mutation("updateRole", "UpdateRoleInput"),
        st.fixed_dictionaries({"id": object_id, "policies": policies}),
    )
    yield (
        "deleteRole",
        mutation("deleteRole", "DeleteRoleInput"),
        st.fixed_dictionaries({"id": object_id}),
    )
    yield (
        "createApiToken",
        mutation("createApiToken", "CreateApiTokenInput"),
        st.fixed_dictionaries(
            {"name": TEXT, "role": role},
            optional={"expiresInDays": st.integers(min_value=-(2**31), max_value=2**31 - 1)},
        ),
    )
    yield (
        "revokeApiToken",
        mutation("revokeApiToken", "RevokeApiTokenInput"),
        st.fixed_dictionaries({"id": object_id}),
    )


def app_inputs(
    real: dict[str, str],
) -> Iterator[tuple[str, str, st.SearchStrategy[dict[str, Any]]]]:
    object_id = ids(real)
    url = st.one_of(
        TEXT,
        st.sampled_from(
            [
                "https://git.example/a.git",
                "ssh://git@git.example/a.git",
                "oci://r.example/c",
                "http://x",
            ]
        ),
    )
    values = st.one_of(
        TEXT, st.sampled_from(["a: 1", "- 1", "a: &x [*x]", "[" * 5000, "a: !!set {}"])
    )
    credential = st.fixed_dictionaries(
        {},
        optional={
            "token": TEXT,
            "username": TEXT,
            "password": TEXT,
            "sshPrivateKey": TEXT,
            "knownHosts": TEXT,
        },
    )
    git = st.fixed_dictionaries(
        {"url": url},
        optional={
            "branch": TEXT,
            "tag": TEXT,
            "semver": TEXT,
            "commit": TEXT,
            "path": TEXT,
            "interval": TEXT,
            "credential": credential,
        },
    )
    helm = st.fixed_dictionaries(
        {"repositoryUrl": url, "chart": TEXT},
        optional={"version": TEXT, "values": values, "interval": TEXT},
    )
    source = st.fixed_dictionaries({}, optional={"git": git, "helm": helm})
    target = st.fixed_dictionaries(
        {},
        optional={
            "cloudSpaceId": object_id,
            "vclusterName": TEXT,
            "environmentId": object_id,
            "namespace": TEXT,
        },
    )
    yield (
        "createApp",
        apps.mutation("createApp", "CreateAppInput"),
        st.fixed_dictionaries(
            {"name": TEXT, "target": target, "source": source},
            optional={"suspended": st.booleans()},
        ),
    )
    yield (
        "updateApp",
        apps.mutation("updateApp", "UpdateAppInput"),
        st.fixed_dictionaries(
            {"id": object_id, "source": source}, optional={"removeCredential": st.booleans()}
        ),
    )
    for name in ("suspendApp", "resumeApp", "syncApp"):
        yield name, apps.mutation(name, "AppIdInput"), st.fixed_dictionaries({"id": object_id})
    yield (
        "deleteApp",
        apps.mutation("deleteApp", "DeleteAppInput"),
        st.fixed_dictionaries({"id": object_id, "confirmName": TEXT}),
    )
    yield (
        "requeueAppRevision",
        apps.mutation("requeueAppRevision", "AppRevisionIdInput"),
        st.fixed_dictionaries({"id": object_id}),
    )
    yield (
        "rollbackApp",
        apps.mutation("rollbackApp", "RollbackAppInput"),
        st.fixed_dictionaries({"revisionId": object_id}),
    )


def advisor_mutation(name: str, input_type: str) -> str:
    return (
        f"mutation($input: {input_type}!) {{ {name}(input: $input) "
        "{ __typename userErrors { field message code } } }"
    )


def advisor_inputs(
    real: dict[str, str],
) -> Iterator[tuple[str, str, st.SearchStrategy[dict[str, Any]]]]:
    object_id = ids(real)
    rule = st.one_of(SHORT, st.sampled_from(["crash-loop", "single-replica"]))
    for name, input_type in (
        ("dismissFinding", "DismissFindingInput"),
        ("restoreFinding", "RestoreFindingInput"),
    ):
        yield (
            name,
            advisor_mutation(name, input_type),
            st.fixed_dictionaries({"id": object_id, "reason": TEXT}),
        )
    yield (
        "exemptAdvisorRule",
        advisor_mutation("exemptAdvisorRule", "ExemptAdvisorRuleInput"),
        st.fixed_dictionaries({"cloudSpaceId": object_id, "ruleId": rule, "reason": TEXT}),
    )
    yield (
        "removeAdvisorExemption",
        advisor_mutation("removeAdvisorExemption", "RemoveAdvisorExemptionInput"),
        st.fixed_dictionaries({"cloudSpaceId": object_id, "ruleId": rule}),
    )


def every_input(
    real: dict[str, str],
) -> Iterator[tuple[str, str, st.SearchStrategy[dict[str, Any]]]]:
    yield from inputs(real)
    yield from cloud_space_inputs(real)
    yield from access_inputs(real)
    yield from advisor_inputs(real)
    yield from app_inputs(real)


MUTATIONS = [name for name, _, _ in every_input({"x": "y"})]


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_generated_inputs_never_break_the_server(
    admin: Caller, real: dict[str, str], mutation: str
) -> None:
    (document, strategy) = next((d, s) for name, d, s in every_input(real) if name == mutation)

    @EXAMPLES
    @given(values=strategy)
    def attack(values: dict[str, Any]) -> None:
        before = admin.data(TOTALS)
        body = admin.call(document, {"input": values})
        codes = [e.get("extensions", {}).get("code") for e in body.get("errors") or []]
        assert "INTERNAL_SERVER_ERROR" not in codes, body
        if codes:  # a refusal of the whole request (say, an enum value that does not exist)
            assert body.get("data") is None and set(codes) <= {
                "GRAPHQL_VALIDATION_FAILED",
                "BAD_USER_INPUT",
                "BAD_REQUEST",
            }
            assert admin.data(TOTALS) == before
            return
        payload = body["data"][mutation]
        refused = payload["userErrors"]
        assert {e["code"] for e in refused} <= USER_ERROR_CODES, refused
        if refused:
            assert all(
                value is None
                for key, value in payload.items()
                if key not in ("userErrors", "__typename")
            )
            assert admin.data(TOTALS) == before, "a refused mutation wrote something"

    attack()


def test_every_mutation_of_the_schema_is_attacked() -> None:
    from schema.build import schema

    mutation_type = schema._schema.mutation_type
    assert mutation_type is not None
    assert set(MUTATIONS) == set(mutation_type.fields)
