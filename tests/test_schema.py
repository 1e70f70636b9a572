"""The schema stays honest: `schema.graphql` is what the code serves, and it keeps the contract.

`schema.graphql` is generated from the code (`spacedock export-schema`); a
test fails as soon as the two drift. Every type, field, argument, interface
and enum value of the shared `contract.graphql` must be in it with the same
type. Parts that later issues deliver are listed in NOT_YET_BY_ISSUE; an item
there that is served with its contract type fails too, so the list only shrinks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInterfaceType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    Undefined,
    build_schema,
    is_specified_scalar_type,
    parse,
    validate,
)

from schema.build import SDL_PATH, schema, sdl

CONTRACT = Path(__file__).resolve().parents[2] / "shared" / "contract.graphql"

# Contract parts still to come, by the issue that delivers them. An entry names a whole type,
# a field, an argument (`Type.field(arg)`) or an enum value; it leaves this list when it is
# served with the contract's type.
NOT_YET_BY_ISSUE: dict[str, set[str]] = {}
NOT_YET: set[str] = set().union(*NOT_YET_BY_ISSUE.values())


def parts(schema: GraphQLSchema) -> dict[str, str]:
    """Every named part of a schema and what it must be: a type's kind, a field's or an
    argument's type as SDL prints it, "implemented" for an interface, "value" for an enum
    value. Keys: `Type`, `Type.field`, `Type.field(arg)`, `Type implements I`, `Enum.VALUE`."""
    found: dict[str, str] = {}
    for name, kind in schema.type_map.items():
        if name.startswith("__") or is_specified_scalar_type(kind):
            continue
        found[name] = type(kind).__name__
        if isinstance(kind, GraphQLObjectType | GraphQLInterfaceType):
            for interface in kind.interfaces:
                found[f"{name} implements {interface.name}"] = "implemented"
            for field_name, field in kind.fields.items():
                found[f"{name}.{field_name}"] = str(field.type)
                for arg_name, arg in field.args.items():
                    found[f"{name}.{field_name}({arg_name})"] = str(arg.type)
        elif isinstance(kind, GraphQLInputObjectType):
            for field_name, input_field in kind.fields.items():
                found[f"{name}.{field_name}"] = str(input_field.type)
        elif isinstance(kind, GraphQLEnumType):
            for value in kind.values:
                found[f"{name}.{value}"] = "value"
    return found


def owner_not_yet(part: str) -> str | None:
    """The NOT_YET entry that covers `part` (itself, its type or its field), if any."""
    for candidate in (part, part.split("(")[0], part.split(".")[0].split(" ")[0]):
        if candidate in NOT_YET:
            return candidate
    return None


def is_required(kind: GraphQLInputType, default: Any) -> bool:
    return isinstance(kind, GraphQLNonNull) and default is Undefined


@pytest.fixture(scope="module")
def served() -> GraphQLSchema:
    return build_schema(SDL_PATH.read_text())


@pytest.fixture(scope="module")
def contract() -> GraphQLSchema:
    if not CONTRACT.is_file():
        missing = f"the shared contract is not at {CONTRACT} (shared/ beside the repo)"
        if os.environ.get("CI"):
            pytest.fail(missing)  # CI always has shared/ beside the clone
        pytest.skip(missing)
    return build_schema(CONTRACT.read_text())


def test_schema_graphql_is_the_export_of_the_code() -> None:
    assert SDL_PATH.read_text() == sdl(), (
        "schema.graphql differs from the code; run `spacedock export-schema`"
    )


def test_every_contract_part_is_served_with_its_type(
    served: GraphQLSchema, contract: GraphQLSchema
) -> None:
    ours = parts(served)
    wrong = {
        part: (expected, ours.get(part, "missing"))
        for part, expected in parts(contract).items()
        if owner_not_yet(part) is None and ours.get(part) != expected
    }
    assert wrong == {}, "contract part: (contract, schema.graphql)"


def test_not_yet_lists_only_contract_parts_that_are_still_missing(
    served: GraphQLSchema, contract: GraphQLSchema
) -> None:
    in_contract = parts(contract)
    assert set(in_contract) >= NOT_YET, "NOT_YET names something the contract lacks"
    ours = parts(served)
    arrived = sorted(part for part in NOT_YET if ours.get(part) == in_contract[part])
    assert arrived == [], f"now served, so take them off NOT_YET: {arrived}"


def test_additions_to_contract_fields_and_inputs_are_optional(
    served: GraphQLSchema, contract: GraphQLSchema
) -> None:
    """The server may add arguments and input fields, but a client written against the
    contract never sends them, so none of them may be required."""
    promised = parts(contract)
    required = []
    for name, kind in served.type_map.items():
        if isinstance(kind, GraphQLObjectType | GraphQLInterfaceType):
            for field_name, field in kind.fields.items():
                if f"{name}.{field_name}" not in promised:
                    continue
                for arg_name, arg in field.args.items():
                    part = f"{name}.{field_name}({arg_name})"
                    if part not in promised and is_required(arg.type, arg.default_value):
                        required.append(part)
        elif isinstance(kind, GraphQLInputObjectType) and name in promised:
            for field_name, input_field in kind.fields.items():
                part = f"{name}.{field_name}"
                if part not in promised and is_required(
                    input_field.type, input_field.default_value
                ):
                    required.append(part)
    assert required == []


def undescribed(schema: GraphQLSchema) -> list[str]:
    """Every type, field, argument, input field and enum value without a description."""
    missing: list[str] = []

    def check(part: str, description: str | None) -> None:
        if not (description or "").strip():
            missing.append(part)

    for name, kind in schema.type_map.items():
        if name.startswith("__") or is_specified_scalar_type(kind):
            continue
        check(name, kind.description)
        if isinstance(kind, GraphQLObjectType | GraphQLInterfaceType):
            for field_name, field in kind.fields.items():
                check(f"{name}.{field_name}", field.description)
                for arg_name, arg in field.args.items():
                    check(f"{name}.{field_name}({arg_name})", arg.description)
        elif isinstance(kind, GraphQLInputObjectType):
            for field_name, input_field in kind.fields.items():
                check(f"{name}.{field_name}", input_field.description)
        elif isinstance(kind, GraphQLEnumType):
            for value_name, value in kind.values.items():
                check(f"{name}.{value_name}", value.description)
    return missing


def test_every_part_of_the_schema_says_what_it_means() -> None:
    """Frontend developers read the schema in GraphiQL: nothing in it goes unexplained."""
    assert undescribed(schema._schema) == [], "add description= to these"


def test_the_description_check_finds_what_lacks_one() -> None:
    bare = build_schema(
        """
        "described" type Query { "described" a(x: Int): E  b: Int }
        "described" enum E { "described" ONE TWO }
        """
    )
    assert undescribed(bare) == ["Query.a(x)", "Query.b", "E.TWO"]


def readme_section(title: str) -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = readme.index(f"\n## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:end]


def test_the_readmes_cloud_examples_are_valid_operations() -> None:
    """Every operation the README's "Connect a cloud account" shows parses and validates
    against the schema as written ("…" and "<uuid>" stand for values)."""
    section = readme_section("Connect a cloud account")
    blocks = section.split("```graphql\n")[1:]
    operations = [
        operation
        for block in blocks
        for operation in block.split("```")[0].split("\n\n")
        if operation.strip()
    ]
    assert len(operations) == 12, "four steps for each of the three clouds"
    for operation in operations:
        problems = validate(schema._schema, parse(operation))
        assert not problems, (operation, problems)
    providers = " ".join(op for op in operations if "registerSpace" in op)
    for provider in ("AWS", "GCP", "AZURE"):
        assert f"provider: {provider}" in providers
