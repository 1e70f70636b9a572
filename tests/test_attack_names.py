"""Issue 7, defect 8: a trailing newline passes no name check.

`re.match` with `$` accepted "prod\\n" beside "prod", "dev\\n" as a namespace sent to the
cluster, and regions, cluster names and tokens with a newline. Every rule now matches
the whole value. Hypothesis draws valid values from each rule and checks that the same
value with a newline (or any other trailing or leading control character) is refused;
the API is attacked the same way on the running server.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.access.auth import BEARER
from core.common import ids, names
from core.spaces import clouds
from tests.conftest import Org
from tests.support import factories as make
from tests.support.attack import converse
from tests.support.server import Server

TAILS = st.sampled_from(["\n", "\r\n", "\x00", "\t", " \n", "\n\n"])
RULES: dict[str, re.Pattern[str]] = {
    "dns label (namespaces)": names.DNS_LABEL,
    "display name (spaces, accounts, environments)": names.DISPLAY_NAME,
    "cloud name (clusters, resource groups)": names.CLOUD_NAME,
    "uuid (Azure ids)": clouds.UUID,
    "AWS access key id": clouds.AWS_ACCESS_KEY_ID,
    "AWS role ARN": clouds.AWS_ROLE_ARN,
    "AWS region": clouds.AWS_REGION,
    "GCP project": clouds.GCP_PROJECT,
    "region": clouds.REGION,
    "object id": ids.ID,
    "bearer header": BEARER,
}
CHECKS = {
    "dns label (namespaces)": names.dns_label_problem,
    "display name (spaces, accounts, environments)": names.display_name_problem,
    "cloud name (clusters, resource groups)": names.cloud_name_problem,
}
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("rule", RULES, ids=RULES)
@PROPERTY
@given(data=st.data())
def test_a_valid_value_with_a_newline_is_refused(rule: str, data: st.DataObject) -> None:
    pattern = RULES[rule]
    value = data.draw(st.from_regex(pattern, fullmatch=True))
    tail = data.draw(TAILS)
    assert pattern.fullmatch(value)
    assert not pattern.fullmatch(value + tail)
    assert not pattern.fullmatch(tail + value)
    if rule in CHECKS:
        assert CHECKS[rule](value + tail) is not None


@pytest.mark.parametrize("rule", CHECKS, ids=CHECKS)
@PROPERTY
@given(value=st.text(max_size=80))
def test_what_a_name_rule_accepts_has_no_control_character(rule: str, value: str) -> None:
    if CHECKS[rule](value) is None:
        assert names.text_problem(value) is None


# -- the same attack on the running server -----------------------------------------------


async def test_names_with_a_trailing_newline_are_refused_by_the_api(org: Org) -> None:
    space = await make.register_generic_space(org.admin)
    attacks = [
        (
            make.REGISTER_SPACE,
            {"name": "prod\n", "provider": "GENERIC", "config": make.generic_config()},
            ("name",),
        ),
        (
            make.CREATE_ENVIRONMENT,
            {"name": "dev", "spaceId": space["id"], "namespace": "dev\n"},
            ("namespace",),
        ),
        (
            make.CREATE_ENVIRONMENT,
            {"name": "dev\n", "spaceId": space["id"], "namespace": "dev"},
            ("name",),
        ),
        (
            make.GRANT_CLUSTER_ACCESS,
            {
                "cloudAccountId": (await make.create_cloud_account(org.admin))["id"],
                "region": "us-east-1\n",
                "clusterName": "prod",
            },
            ("region",),
        ),
        (
            make.CREATE_CLOUD_ACCOUNT,
            {
                "name": "aws",
                "provider": "AWS",
                "credentials": {**make.AWS_CREDENTIALS, "accessKeyId": "AKIAIOSFODNN7EXAMPLE\n"},
            },
            ("credentials", "accessKeyId"),
        ),
        (
            make.REGISTER_SPACE,
            {
                "name": "gen",
                "provider": "GENERIC",
                "config": {**make.generic_config(), "clusterName": "prod\n"},
            },
            ("config", "clusterName"),
        ),
        (
            make.REGISTER_SPACE,
            {
                "name": "tok",
                "provider": "GENERIC",
                "config": {**make.generic_config(), "serviceAccountToken": "abc\n"},
            },
            ("config", "serviceAccountToken"),
        ),
    ]
    for mutation, values, path in attacks:
        payload = await org.admin.mutate(mutation, {"input": values})
        assert (("input", *path), "INVALID") in make.error_fields(payload), path
    # "prod" itself is free: the refused "prod\n" took nothing.
    await make.register_generic_space(org.admin, name="prod")


@pytest.mark.parametrize("tail", ["\n", "\x00", "\r\n"], ids=["lf", "nul", "crlf"])
async def test_a_token_with_a_trailing_control_character_is_refused(
    server: Server, org: Org, tail: str
) -> None:
    init = {
        "type": "connection_init",
        "payload": {"Authorization": f"Bearer {org.tokens['viewer']}{tail}"},
    }
    talk = await converse(server, [json.dumps(init)])
    assert talk.close_code == 4403
    # The token itself still works.
    assert (await org.viewer.data("{ viewer { role } }")) == {"viewer": {"role": "VIEWER"}}
