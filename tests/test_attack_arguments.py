"""Issue 18, defect 5 and 7: every argument of every field, walked from the schema itself.

The schema is read by introspection; for each field that takes arguments (queries,
mutations, subscriptions, fields of objects reached through `node`), each argument and
each field of its input objects, however deep, is sent holding a NUL, a lone surrogate,
an escape sequence or another control character, as a variable and as a literal, and
each Int an integer past any limit. Nothing may answer INTERNAL_SERVER_ERROR (on
Postgres a NUL used to fail in the driver); text is BAD_USER_INPUT naming the argument on
reads and INVALID on the field at fault on mutations; an id names nothing (null, nothing
matched, NOT_FOUND); and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    build_client_schema,
    get_introspection_query,
    get_named_type,
)

from core.common.names import MULTILINE_FIELDS
from sim.host_standin import HostStandIn
from tests.conftest import Org
from tests.support import apps
from tests.support import factories as make
from tests.support.attack import converse, send, subscribe
from tests.support.cloudspaces import CREATE as CREATE_CLOUD_SPACE
from tests.support.server import Server

BAD_TEXT = ["\x00", "a\x00b", "\ud800", "\x1b[2J", "x\n"]
# In a document: JSON escapes become GraphQL escapes (a lone surrogate cannot be sent so).
BAD_LITERALS = ["\x00", "a\x00b", "\x07"]
# 5,000 digits: past Python's 4,300-digit limit for int().
HUGE_INT = "9" * 5000
PLACEHOLDER_ID = f"spc_{'0' * 30}"  # well-formed, names nothing


@dataclass(frozen=True)
class Attack:
    """One field with one leaf of its arguments spoilt."""

    root: str  # query, mutation or subscription
    owner: str  # the type the field is on
    field: str
    path: tuple[str, ...]  # the argument, then input fields down to the spoilt leaf
    leaf: str  # the leaf's type name (String, ID, Int, JSON, DateTime)
    arguments: dict[str, Any]  # every argument, with the spoilt leaf in it
    literal: bool  # sent in the document rather than as a variable


async def introspected(server: Server, token: str) -> GraphQLSchema:
    answer = await send(server, json_body={"query": get_introspection_query()}, token=token)
    return build_client_schema(answer.body["data"])


def plain(kind: GraphQLInputType, depth: int = 0) -> Any:
    """A harmless value of a type, for the arguments and fields not under attack."""
    if isinstance(kind, GraphQLNonNull):
        return plain(kind.of_type, depth)
    if isinstance(kind, GraphQLList):
        return [plain(kind.of_type, depth)]
    if isinstance(kind, GraphQLEnumType):
        return next(iter(kind.values))
    if isinstance(kind, GraphQLInputObjectType):
        return {
            name: plain(field.type, depth + 1)
            for name, field in kind.fields.items()
            if isinstance(field.type, GraphQLNonNull)
        }
    assert isinstance(kind, GraphQLScalarType)
    return {
        "String": "x",
        "ID": PLACEHOLDER_ID,
        "Int": 1,
        "Float": 1.0,
        "Boolean": False,
        "DateTime": "2020-01-01T00:00:00+00:00",
        "JSON": {},
    }[kind.name]


def leaves(kind: GraphQLInputType, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every scalar position inside an argument's type: (path, scalar name)."""
    named = get_named_type(kind)
    if isinstance(named, GraphQLInputObjectType):
        for name, field in named.fields.items():
            yield from leaves(field.type, (*path, name))
    elif isinstance(named, GraphQLScalarType) and named.name != "Boolean":
        yield path, named.name


def is_list(kind: GraphQLInputType) -> bool:
    return isinstance(kind.of_type if isinstance(kind, GraphQLNonNull) else kind, GraphQLList)


def spoilt(field: GraphQLField, path: tuple[str, ...], bad: Any) -> dict[str, Any]:
    """Every required argument plain, the one under attack holding `bad` at `path`."""
    arguments = {
        name: plain(argument.type)
        for name, argument in field.args.items()
        if isinstance(argument.type, GraphQLNonNull)
    }
    first = path[0]
    arguments[first] = put(arguments.get(first), field.args[first].type, path[1:], bad)
    return arguments


def put(current: Any, kind: GraphQLInputType, rest: tuple[str, ...], bad: Any) -> Any:
    """`current` (a value of `kind`, or None) with `bad` at the path `rest` inside it."""
    if not rest:
        return [bad] if is_list(kind) else bad
    named = get_named_type(kind)
    assert isinstance(named, GraphQLInputObjectType)
    base = current[0] if isinstance(current, list) and current else current
    holder = dict(base) if isinstance(base, dict) else plain(named)
    holder[rest[0]] = put(holder.get(rest[0]), named.fields[rest[0]].type, rest[1:], bad)
    return [holder] if is_list(kind) else holder


def bad_values(leaf: str, literal: bool) -> list[Any]:
    if leaf == "Int":
        return [HUGE_INT] if literal else [2**40]
    if leaf == "Float":
        return [HUGE_INT + "e999"] if literal else [1e308]
    if leaf == "JSON":
        return (
            [{"k\x00": "v"}, {"k": "v\x00"}, {"k": ["\ud800"]}] if not literal else [{"k": "\x00"}]
        )
    return BAD_LITERALS if literal else BAD_TEXT


def attacks(schema: GraphQLSchema) -> Iterator[Attack]:
    roots = {
        "query": schema.query_type,
        "mutation": schema.mutation_type,
        "subscription": schema.subscription_type,
    }
    owners: list[tuple[str, GraphQLObjectType]] = [
        (root, kind) for root, kind in roots.items() if kind is not None
    ]
    owners += [
        ("query", kind)
        for name, kind in schema.type_map.items()
        if isinstance(kind, GraphQLObjectType)
        and kind not in roots.values()
        and not name.startswith("__")
        and any(field.args for field in kind.fields.values())
    ]
    for root, owner in owners:
        for name, field in owner.fields.items():
            for argument, argument_field in field.args.items():
                for path, leaf in leaves(argument_field.type, (argument,)):
                    for literal in (False, True):
                        for bad in bad_values(leaf, literal):
                            if bad == "x\n" and path[-1] in MULTILINE_FIELDS:
                                continue  # lines are what a key file or YAML has
                            yield Attack(
                                root,
                                owner.name,
                                name,
                                path,
                                leaf,
                                spoilt(field, path, bad),
                                literal,
                            )


def printed(value: Any, kind: GraphQLInputType) -> str:
    """A value as a GraphQL literal of its type (enums bare, objects unquoted keys)."""
    if isinstance(kind, GraphQLNonNull):
        kind = kind.of_type
    if isinstance(kind, GraphQLList):
        return "[" + ", ".join(printed(item, kind.of_type) for item in value) + "]"
    if isinstance(kind, GraphQLEnumType):
        return str(value)
    if isinstance(kind, GraphQLInputObjectType):
        inner = ", ".join(f"{k}: {printed(v, kind.fields[k].type)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(kind, GraphQLScalarType) and kind.name == "JSON":
        if isinstance(value, dict):
            inner = ", ".join(f"{k}: {printed(v, kind)}" for k, v in value.items())
            return "{" + inner + "}"
        if isinstance(value, list):
            return "[" + ", ".join(printed(v, kind) for v in value) + "]"
    if isinstance(value, str) and kind.name in ("Int", "Float") and value[0].isdigit():
        return value
    return json.dumps(value)


def selection(kind: Any) -> str:
    """A small selection of a field's type: __typename, and a scalar or two."""
    named = get_named_type(kind)
    if not isinstance(named, GraphQLObjectType | GraphQLInterfaceType):
        return ""
    if "userErrors" in named.fields:
        return "{ __typename userErrors { field code message } }"
    return "{ __typename }"


def document(
    schema: GraphQLSchema, attack: Attack, ids: dict[str, str]
) -> tuple[str, dict[str, Any]]:
    """The operation for one attack, and its variables."""
    owner = schema.type_map[attack.owner]
    assert isinstance(owner, GraphQLObjectType)
    field = owner.fields[attack.field]
    if attack.literal:
        call_arguments = ", ".join(
            f"{name}: {printed(value, field.args[name].type)}"
            for name, value in attack.arguments.items()
        )
        declared, variables = "", {}
    else:
        call_arguments = ", ".join(f"{name}: ${name}" for name in attack.arguments)
        declared = ", ".join(f"${name}: {field.args[name].type}" for name in attack.arguments)
        declared = f"({declared})" if declared else ""
        variables = attack.arguments
    call = f"{attack.field}({call_arguments}) {selection(field.type)}"
    if attack.owner in ("Query", "Mutation", "Subscription"):
        return f"{attack.root} {declared} {{ {call} }}", variables
    assert attack.owner in ids, f"no {attack.owner} to reach {attack.owner}.{attack.field} on"
    reach = f'node(id: "{ids[attack.owner]}") {{ ... on {attack.owner} {{ {call} }} }}'
    return f"query {declared} {{ {reach} }}", variables


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    """Room for a CloudSpace, whose fields take arguments too (CloudSpace.advice, .apps)."""
    with HostStandIn() as standin:
        yield standin


@pytest.fixture
async def scene(org: Org, host: HostStandIn) -> dict[str, str]:
    """An object of every type whose fields take arguments."""
    account = await make.create_cloud_account(org.admin)
    space = await make.register_generic_space(org.admin)
    host_space = await make.register_generic_space(
        org.admin, server=host.url, ca=host.ca_pem, token=host.token
    )
    created = await org.editor.mutate(
        CREATE_CLOUD_SPACE,
        {
            "input": {
                "name": "attacked",
                "hostSpaceId": host_space["id"],
                "cpu": 1,
                "memoryMiB": 512,
            }
        },
    )
    assert created["userErrors"] == [], created["userErrors"]
    environment = await make.create_environment(org.admin, space["id"])
    app = await apps.create(
        org.editor,
        "attacked",
        {"environmentId": environment["id"]},
        apps.git_input("https://git.example/attacked.git"),
    )
    return {
        "CloudAccount": account["id"],
        "Space": space["id"],
        "CloudSpace": created["cloudSpace"]["id"],
        "Environment": environment["id"],
        "App": app["app"]["id"],
    }


async def stored(org: Org) -> dict[str, int]:
    data = await org.admin.data(
        "{ cloudAccounts(first: 100) { totalCount } "
        "spaces(first: 100, filter: {includeDeregistered: true}) { totalCount } "
        "environments(first: 100) { totalCount } cloudSpaces(first: 100) { totalCount } "
        "apiTokens(first: 100, includeRevoked: true) { totalCount } roles { name } }"
    )
    return {
        name: len(value) if isinstance(value, list) else value["totalCount"]
        for name, value in data.items()
    }


def problems(attack: Attack, answer: dict[str, Any]) -> list[str]:
    """What is wrong with the answer to one attack; empty when it is right."""
    errors = answer.get("errors") or []
    codes = [(e.get("extensions") or {}).get("code") for e in errors]
    found = []
    if "INTERNAL_SERVER_ERROR" in codes:
        found.append("INTERNAL_SERVER_ERROR")
    text = attack.leaf not in ("ID", "Int", "Float")
    payloads = [
        value
        for value in (answer.get("data") or {}).values()
        if isinstance(value, dict) and "userErrors" in value
    ]
    if attack.root == "mutation" and not errors:
        (payload,) = payloads
        fields = {(tuple(e["field"] or ()), e["code"]) for e in payload["userErrors"]}
        if not payload["userErrors"]:
            found.append("the mutation succeeded")
        elif text and not any(
            path[: len(attack.path)] == attack.path and code == "INVALID" for path, code in fields
        ):
            found.append(f"no INVALID on {attack.path}: {payload['userErrors']}")
    elif text and attack.leaf != "DateTime":
        if codes != ["BAD_USER_INPUT"] and set(codes) != {"GRAPHQL_VALIDATION_FAILED"}:
            found.append(f"codes {codes}")
        elif codes == ["BAD_USER_INPUT"] and ".".join(attack.path) not in errors[0]["message"]:
            found.append(f"the error does not name {'.'.join(attack.path)}: {errors[0]}")
    elif attack.leaf == "ID":
        if not set(codes) <= {"NOT_FOUND"}:
            found.append(f"codes {codes}")
    elif not codes:
        found.append("no error")
    return found


async def answer_of(server: Server, token: str, attack: Attack, query: str, variables: Any) -> Any:
    if attack.root != "subscription":
        body = {"query": query, "variables": variables or None}
        return (await send(server, json_body=body, token=token)).body
    talk = await converse(server, [subscribe(query, variables=variables or None)], token)
    (message,) = talk.messages
    if message["type"] == "error":
        return {"data": None, "errors": message["payload"]}
    return message["payload"]


async def test_every_argument_of_every_field_refuses_control_characters_clearly(
    server: Server, org: Org, scene: dict[str, str]
) -> None:
    schema = await introspected(server, org.tokens["admin"])
    before = await stored(org)
    seen_fields: set[str] = set()
    failures: list[str] = []
    count = 0
    for attack in attacks(schema):
        query, variables = document(schema, attack, scene)
        answer = await answer_of(server, org.tokens["admin"], attack, query, variables)
        count += 1
        seen_fields.add(f"{attack.owner}.{attack.field}")
        for problem in problems(attack, answer):
            failures.append(
                f"{attack.owner}.{attack.field} {'.'.join(attack.path)} "
                f"{'literal' if attack.literal else 'variable'} "
                f"{json.dumps(attack.arguments)[:120]}: {problem} {json.dumps(answer)[:300]}"
            )
    assert not failures, f"{len(failures)} of {count} attacks:\n" + "\n".join(failures[:40])
    # The walk reached the fields the defects were found on, and the nested ones.
    assert {
        "Query.statusEvents",
        "Query.auditEvents",
        "Query.spaces",
        "Query.spaceCounts",
        "Mutation.createApiToken",
        "Subscription.spaceProbed",
        "CloudAccount.clusters",
        "Space.statusEvents",
        "CloudSpace.advice",
        "Subscription.adviceChanged",
        "App.advice",
    } <= seen_fields
    assert await stored(org) == before
    assert "Traceback" not in server.log()
