"""The planned executor (schema.engine.execution) against graphql-core's own on spacedock's real
schema over a seeded database: interfaces (node, nodes), async resolvers, view policies,
@include and @skip, aliases across fragments, variables, answers read ahead for a page of
spaces, and selections Hypothesis draws over the Space/CloudAccount/Environment graph.
The data and the errors must be the same.

The two executors run in this process (a server runs only one); the database is the real
one of the backend, seeded through core's own functions.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from graphql import (
    GraphQLField,
    GraphQLInterfaceType,
    GraphQLNonNull,
    GraphQLObjectType,
    get_named_type,
    is_leaf_type,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from core.common.events import InProcessBus
from core.common.ids import new_id
from core.common.names import name_key
from core.common.rbac import CustomRole, Role, Viewer
from core.common.secrets import SecretBox
from core.common.services import Services
from core.orgs.bootstrap import create_token
from core.spaces.health import HealthRule
from core.spaces.lifecycle import RegisterSpaceRequest, register, set_status
from db.engine import Database
from db.tables import CloudAccount, Environment, Space
from resolvers.common.context import Context
from schema.build import schema as planned
from schema.cloud_accounts import types as account_types
from schema.spaces import pages, types
from schema.spaces import query as query_module
from tests.support.factories import generic_config, unique
from tests.support.server import Backend

# The same schema (types, extensions, limits) with graphql-core's executor.
plain = copy.copy(planned)
plain.execution_context_class = StrawberryGraphQLCoreExecutionContext


@dataclass
class World:
    loop: asyncio.AbstractEventLoop
    services: Services
    admin: Viewer
    # space:view only: cloud accounts and environments are refused to it.
    spaces_only: Viewer
    space_ids: list[str]
    environment_ids: list[str]
    account_id: str
    foreign_space_id: str


async def _seed(services: Services) -> World:
    await services.database.migrate()
    async with services.unit() as unit:
        org, _ = await create_token(unit, unique("org"), "ADMIN")
        other, _ = await create_token(unit, unique("org"), "ADMIN")
    admin = Viewer(org.id, org.name, Role.ADMIN)
    spaces_only = Viewer(
        org.id, org.name, Role.CUSTOM, CustomRole("role_spaces", "spaces-only", ("space:view",))
    )
    outsider = Viewer(other.id, other.name, Role.ADMIN)

    async def space(viewer: Viewer) -> str:
        request = RegisterSpaceRequest(
            unique("space"), "GENERIC", "KUBERNETES", None, generic_config(), False
        )
        async with services.unit() as unit:
            return (await register(unit, viewer, services.secrets, request, ())).id

    space_ids = [await space(admin) for _ in range(4)]
    foreign_space_id = await space(outsider)
    account_id = new_id("ca")
    async with services.unit() as unit:
        name = unique("account")
        unit.session.add(
            CloudAccount(
                id=account_id,
                org_id=org.id,
                name=name,
                name_key=name_key(name),
                provider="AWS",
                credentials_ciphertext=services.secrets.seal({}),
                created_at=unit.now,
            )
        )
        environment_ids = []
        for index, space_id in enumerate(space_ids[:3]):
            name = unique("env")
            environment = Environment(
                id=new_id("env"),
                org_id=org.id,
                name=name,
                name_key=name_key(name),
                space_id=space_id,
                namespace=f"ns-{index}",
                created_at=unit.now,
            )
            unit.session.add(environment)
            environment_ids.append(environment.id)
    async with services.unit() as unit:  # two spaces on the account, one with history
        await unit.session.execute(
            sa.update(Space)
            .where(sa.column("id").in_(space_ids[:2]))
            .values(cloud_account_id=account_id)
        )
    async with services.unit() as unit:
        await set_status(unit, admin, space_ids[0], "INACTIVE")
    async with services.unit() as unit:
        await set_status(unit, admin, space_ids[0], "ACTIVE")
    loop = asyncio.get_running_loop()
    return World(
        loop,
        services,
        admin,
        spaces_only,
        space_ids,
        environment_ids,
        account_id,
        foreign_space_id,
    )


@pytest.fixture(scope="module")
def world(backend: Backend) -> Iterator[World]:
    """One event loop for the module: the database's pool lives on it, and the
    Hypothesis test below (synchronous) runs each example on it."""
    loop = asyncio.new_event_loop()
    services = Services(
        database=Database(backend.url),
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(3600),
    )
    try:
        yield loop.run_until_complete(_seed(services))
    finally:
        loop.run_until_complete(services.database.dispose())
        loop.close()


Answer = tuple[Any, list[tuple[str, str, Any]]]


async def _answer(
    executor: Any, world: World, document: str, variables: dict[str, Any], viewer: Viewer
) -> Answer:
    result = await executor.execute(
        document, variable_values=variables, context_value=Context(world.services, viewer)
    )
    errors = sorted(
        (str(e.path), e.message, (e.extensions or {}).get("code")) for e in result.errors or []
    )
    return result.data, errors


def both(
    world: World, document: str, variables: dict[str, Any], viewer: Viewer
) -> tuple[Answer, Answer]:
    async def run() -> tuple[Answer, Answer]:
        ours = await _answer(planned, world, document, variables, viewer)
        theirs = await _answer(plain, world, document, variables, viewer)
        return ours, theirs

    return world.loop.run_until_complete(run())


SPACE = """
    id name provider spaceType synthetic consecutiveFailures createdAt deregisteredAt
    status statusReason statusReasonCode held
    config { clusterName server }
    lastProbe { __typename }
"""

QUERIES: dict[str, str] = {
    "page with links": f"""{{ spaces {{ totalCount nodes {{ {SPACE}
        cloudAccount {{ id name provider }} environments {{ id name namespace gate }}
        recent: statusEvents(first: 1) {{ id status previous reasonCode }}
        statusEvents {{ id status space {{ id name }} }} }} }} }}""",
    "edges and nodes, aliased across fragments": """
        query { spaces(first: 3) { edges { cursor node { ...A ... on Space { n: name } } }
            nodes { ...B } pageInfo { hasNextPage endCursor } } }
        fragment A on Space { n: name a: cloudAccount { id } e: environments { id } }
        fragment B on Space { n: name ...A }""",
    "include false and skip": """query($yes: Boolean!) { spaces { nodes {
        id name @include(if: false) status @skip(if: $yes)
        cloudAccount @include(if: $yes) { id } environments @skip(if: true) { id }
        statusEvents(first: 2) @include(if: $yes) { id } } } }""",
    "node and nodes": """query($id: ID!, $ids: [ID!]!) {
        node(id: $id) { __typename id ... on Space { name environments { id space { id } } } }
        nodes(ids: $ids) { __typename id ... on Space { name cloudAccount { name } }
            ... on Environment { name namespace space { name } }
            ... on CloudAccount { name provider } } }""",
    "roots": """{ cloudAccounts { totalCount nodes { id name provider createdAt } }
        environments { nodes { id name space { id status cloudAccount { id } } gate } }
        statusEvents { edges { node { id status previous reasonCode space { id } } } } }""",
    "out-of-range first": "{ spaces { nodes { id statusEvents(first: 101) { id } } } }",
}


def _variables(world: World) -> dict[str, Any]:
    return {
        "yes": True,
        "id": world.space_ids[0],
        "ids": [
            world.space_ids[1],
            world.environment_ids[0],
            world.account_id,
            world.foreign_space_id,
            "spc_unknown",
        ],
    }


@pytest.mark.parametrize("name", QUERIES)
@pytest.mark.parametrize("who", ["admin", "spaces_only"])
def test_the_executors_answer_alike(world: World, name: str, who: str) -> None:
    document = QUERIES[name]
    variables = {key: value for key, value in _variables(world).items() if f"${key}" in document}
    ours, theirs = both(world, document, variables, getattr(world, who))
    assert ours == theirs
    if name == "out-of-range first":  # a refusal in a non-null list nulls the whole answer
        assert ours[0] is None and [code for _, _, code in ours[1]] == ["BAD_USER_INPUT"]
    elif who == "admin":
        assert ours[0] is not None and ours[1] == []
    else:
        assert {code for _, _, code in ours[1]} <= {"FORBIDDEN"}


def test_an_answer_read_ahead_for_a_field_the_caller_may_not_view_is_refused(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-ahead that forgets a field's policy (here: every space gets its account and
    environments, whoever asks) still serves nothing: the field's own policy refuses it,
    null or an empty list with FORBIDDEN, as graphql-core's executor answers."""

    async def rows() -> tuple[CloudAccount, list[Environment]]:
        async with world.services.read() as session:
            account = await session.get(CloudAccount, world.account_id)
            environments = (await session.execute(sa.select(Environment))).scalars().all()
        assert account is not None
        return account, list(environments)

    account, environments = world.loop.run_until_complete(rows())
    prepare = pages.prepare_spaces

    def careless(context: Any, spaces: Any, links: Any, status: bool, account_of: Any) -> None:
        prepare(context, spaces, links, status, account_of)
        for space in spaces:
            answers: dict[Hashable, Any] = dict(space.prepared or {})
            answers["cloudAccount"] = account_types.CloudAccount.from_row(account)
            answers["environments"] = [
                types.Environment.from_row(e) for e in environments if e.space_id == space.id
            ]
            space.prepared = answers

    monkeypatch.setattr(query_module, "prepare_spaces", careless)
    document = "{ spaces { nodes { id cloudAccount { id name } environments { id } } } }"
    ours, theirs = both(world, document, {}, world.spaces_only)
    assert ours == theirs
    data, errors = ours
    assert data is not None
    assert [space["cloudAccount"] for space in data["spaces"]["nodes"]] == [None] * 4
    assert [space["environments"] for space in data["spaces"]["nodes"]] == [[]] * 4
    assert {code for _, _, code in errors} == {"FORBIDDEN"}
    assert len(errors) == 8  # each space's two fields

    # The admin, holding both policies, is served what was read ahead.
    ours, theirs = both(world, document, {}, world.admin)
    assert ours[1] == [] and ours[0] is not None
    served = ours[0]["spaces"]["nodes"]
    assert sum(space["cloudAccount"] is not None for space in served) == 4


class UnreadableSpace(types.Space):
    """A space whose `deregisteredAt` (a plain attribute) raises on reading."""

    @property  # type: ignore[override]
    def deregistered_at(self) -> Any:
        raise RuntimeError("deregisteredAt cannot be read")

    @deregistered_at.setter
    def deregistered_at(self, value: Any) -> None:
        pass


def test_an_attribute_that_raises_nulls_that_field_not_its_space(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = types.Space.from_row

    def unreadable(row: Any) -> types.Space:
        return UnreadableSpace(**vars(made(row)))

    monkeypatch.setattr(types.Space, "from_row", staticmethod(unreadable))
    document = "{ spaces { nodes { id name deregisteredAt } } }"
    ours, theirs = both(world, document, {}, world.admin)
    assert ours == theirs
    data, errors = ours
    assert data is not None
    assert [space["deregisteredAt"] for space in data["spaces"]["nodes"]] == [None] * 4
    assert all(space["name"] for space in data["spaces"]["nodes"])
    assert errors == [  # our exception, so masked (schema.engine.errors)
        (
            f"['spaces', 'nodes', {index}, 'deregisteredAt']",
            "Internal server error",
            "INTERNAL_SERVER_ERROR",
        )
        for index in range(4)
    ]


# -- Selections drawn by Hypothesis --------------------------------------------------------

# Fields that call a cluster or a cloud: not the executor's business, and slow.
LIVE = {("Space", "namespaces"), ("CloudAccount", "clusters")}
GRAPH = ("Space", "CloudAccount", "Environment")
MAX_DEPTH = 3
DIRECTIVES = [
    "",
    "",
    "",
    " @include(if: false)",
    " @skip(if: true)",
    " @include(if: $yes)",
    " @skip(if: $yes)",
]


def _arguments(field: GraphQLField) -> list[str] | None:
    """The arguments a drawn selection may give: `first` only; None when the field needs others."""
    for name, argument in field.args.items():
        if isinstance(argument.type, GraphQLNonNull) and name != "first":
            return None
    return [name for name in field.args if name == "first"]


@st.composite
def selection(draw: st.DrawFn, type_name: str, depth: int, fragments: list[str]) -> str:
    graphql_schema = planned._schema
    named = graphql_schema.get_type(type_name)
    assert isinstance(named, (GraphQLObjectType, GraphQLInterfaceType))
    candidates = [
        name
        for name, field in named.fields.items()
        if (type_name, name) not in LIVE
        and _arguments(field) is not None
        and (is_leaf_type(get_named_type(field.type)) or depth < MAX_DEPTH)
    ]
    chosen = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=5, unique=True))
    parts = []
    for index, name in enumerate(chosen):
        field = named.fields[name]
        alias = draw(st.sampled_from(["", f"x{depth}_{index}: "]))
        arguments = ""
        if _arguments(field):
            first = draw(st.sampled_from([None, 0, 1, 2, 101]))
            arguments = "" if first is None else f"(first: {first})"
        directive = draw(st.sampled_from(DIRECTIVES))
        inner = get_named_type(field.type)
        below = ""
        if isinstance(inner, GraphQLInterfaceType):
            kinds = [k for k in GRAPH if inner in graphql_schema.get_type(k).interfaces]  # type: ignore[union-attr]
            spreads = [
                f"... on {kind} {{ {draw(selection(kind, depth + 1, fragments))} }}"
                for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, unique=True))
            ]
            below = "{ __typename " + " ".join(spreads) + " }"
        elif not is_leaf_type(inner):
            below = "{ " + draw(selection(inner.name, depth + 1, fragments)) + " }"
        parts.append(f"{alias}{name}{arguments}{directive} {below}")
    body = " ".join(parts)
    how = draw(st.sampled_from(["plain", "inline", "fragment"]))
    if how == "inline" and isinstance(named, GraphQLObjectType):
        return f"id ... on {type_name} {{ {body} }}" if "id" in named.fields else body
    if how == "fragment" and isinstance(named, GraphQLObjectType):
        fragments.append(f"fragment F{len(fragments)} on {type_name} {{ {body} }}")
        return f"...F{len(fragments) - 1}"
    return body


ROOTS = {
    "Space": "spaces(first: 3) {{ nodes {{ {0} }} edges {{ node {{ {0} }} }} }}",
    "CloudAccount": "cloudAccounts {{ nodes {{ {0} }} }}",
    "Environment": "environments {{ nodes {{ {0} }} }}",
}


@st.composite
def document(draw: st.DrawFn) -> str:
    fragments: list[str] = []
    root = draw(st.sampled_from(GRAPH))
    body = ROOTS[root].format(draw(selection(root, 1, fragments)))
    if draw(st.booleans()):
        body += (
            " one: node(id: $id) { __typename ... on Space { "
            + draw(selection("Space", 2, fragments))
            + " } }"
        )
    text = " ".join([body, *fragments])
    declared = [
        declaration
        for name, declaration in (("$yes", "$yes: Boolean!"), ("$id", "$id: ID!"))
        if name in text
    ]
    operation = f"query({', '.join(declared)})" if declared else "query"
    return " ".join([f"{operation} {{ {body} }}", *fragments])


def _any_item(errors: list[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    return sorted((re.sub(r"\b\d+\b", "*", path), message, code) for path, message, code in errors)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=document(), who=st.sampled_from(["admin", "spaces_only"]), yes=st.booleans())
def test_drawn_selections_answer_alike(world: World, drawn: str, who: str, yes: bool) -> None:
    variables: dict[str, Any] = {}
    if "$yes" in drawn:
        variables["yes"] = yes
    if "$id" in drawn:
        variables["id"] = world.space_ids[0]
    ours, theirs = both(world, drawn, variables, getattr(world, who))
    if ours != theirs and ours[0] is None and theirs[0] is None:
        # Several items failed at once and the null rules dropped the whole answer: which
        # item's error is kept is the first to settle, and answers read ahead settle with
        # fewer event-loop turns than the loaders they stand in for. The same error, at
        # the same field of another item, is the same answer.
        assert _any_item(ours[1]) == _any_item(theirs[1]), drawn
    else:
        assert ours == theirs, drawn
    codes = {code for _, _, code in ours[1]}
    assert "INTERNAL_SERVER_ERROR" not in codes and None not in codes, (drawn, ours[1])
