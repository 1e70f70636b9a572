"""The planned executor (schema.engine.execution) answers exactly as graphql-core's own: the same
data, the same errors at the same paths, the same nulls, for plain fields read in place,
for answers prepared ahead and for everything that still goes the resolver's way."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from typing import Any

import pytest
import strawberry

from schema.engine.execution import Executor
from schema.engine.field_plans import assert_type_checks_ignore_info, prepared_key


@strawberry.enum
class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class OtherColor(enum.Enum):  # not the schema's enum: coerced by graphql-core's rules
    RED = "red"


@strawberry.type
class Item:
    id: strawberry.ID
    name: str
    color: Color
    maybe: str | None
    must: str  # set to None on purpose in some items: an error, not a fast answer
    count: int

    @strawberry.field
    def upper(self) -> str:
        return self.name.upper()

    @strawberry.field
    def repeat(self, times: int = 2) -> str:
        return self.name * times


def items() -> list[Item]:
    return [
        Item(id=strawberry.ID("1"), name="a", color=Color.RED, maybe=None, must="x", count=1),
        Item(id=strawberry.ID("2"), name="b", color=Color.BLUE, maybe="m", must="y", count=2),
    ]


BROKEN: dict[str, Any] = {
    "must": None,  # non-null field holding null
    "count": "many",  # not an Int
    "color": OtherColor.RED,  # another enum's member
    "name": 12,  # an int where a String is declared: graphql-core coerces it
}


@strawberry.type
class Shelf:
    items: list[Item]
    loose: list[Item | None]
    first: Item | None
    top: Item
    others: list[Item]  # sometimes not a list of Items at all


def shelf(attribute: str | None) -> Shelf:
    found = items()
    if attribute is not None:
        setattr(found[1], attribute, BROKEN[attribute])
    return Shelf(
        items=found,
        loose=[found[1], None, found[0]],
        first=found[1],
        top=found[1],
        others=[found[0], "not an item"],  # type: ignore[list-item]
    )


class UnreadableItem(Item):
    """An item whose `maybe` raises on reading (not AttributeError): graphql-core nulls
    that field with an error at its path, and the object stays."""

    @property  # type: ignore[override]
    def maybe(self) -> str | None:
        raise RuntimeError("maybe cannot be read")

    @maybe.setter
    def maybe(self, value: str | None) -> None:
        pass


CALLS: list[str] = []  # the Box resolvers that ran


@strawberry.type
class Box:
    id: strawberry.ID
    prepared: strawberry.Private[dict[Hashable, Any] | None] = None

    @strawberry.field
    def label(self) -> str:
        CALLS.append("label")
        return f"box {self.id}"

    @strawberry.field
    def items(self, first: int = 2) -> list[Item]:
        CALLS.append(f"items {first}")
        return items()[:first]

    @strawberry.field
    def tagged(self, tags: list[str]) -> str:
        return ",".join(tags)


def boxes(prepare: bool) -> list[Box]:
    found = [Box(id=strawberry.ID("b1")), Box(id=strawberry.ID("b2"))]
    if prepare:  # what the resolvers would answer, for the first box only
        found[0].prepared = {
            "label": "box b1",
            prepared_key("items", {"first": 1}): items()[:1],
        }
    return found


@strawberry.type
class Query:
    @strawberry.field
    def items(self) -> list[Item]:
        return items()

    @strawberry.field
    def boxes(self, info: strawberry.Info) -> list[Box]:
        return boxes(prepare=info.context["prepare"])

    @strawberry.field
    def broken(self, attribute: str) -> list[Item | None]:
        found: list[Item | None] = list(items())
        setattr(found[1], attribute, BROKEN[attribute])
        return found

    @strawberry.field
    def shelf(self, attribute: str | None = None) -> Shelf | None:
        return shelf(attribute)

    @strawberry.field
    def unreadable(self) -> list[Item]:
        return [items()[0], UnreadableItem(**vars(items()[1]))]

    @strawberry.field
    def missing(self) -> list[Item]:
        item = items()[0]
        del item.name  # an object without the attribute: graphql-core's error
        return [item]


planned = strawberry.Schema(query=Query, execution_context_class=Executor)
plain = strawberry.Schema(query=Query)

QUERIES = [
    "{ items { id name color maybe must count upper repeat(times: 3) } }",
    "{ items { n: name name ...F ... on Item { c: color } __typename } } "
    "fragment F on Item { id name }",
    "query($skip: Boolean!) { items { id name @skip(if: $skip) color @include(if: $skip) } }",
    '{ broken(attribute: "must") { id must } }',
    '{ broken(attribute: "count") { id count } }',
    '{ broken(attribute: "color") { id color } }',
    '{ broken(attribute: "name") { id name } }',
    "{ missing { id name } }",
    "{ unreadable { id maybe count } }",
    "{ shelf { items { id name color } loose { id } first { name } top { id } } }",
    '{ shelf(attribute: "must") { items { id must } } }',
    '{ shelf(attribute: "must") { loose { id must } } }',
    '{ shelf(attribute: "must") { first { id must } } }',
    '{ shelf(attribute: "must") { top { id must } } }',
    '{ shelf(attribute: "count") { loose { count } first { count } } }',
    "{ shelf { others { id } } }",
]


@pytest.mark.parametrize("query", QUERIES)
async def test_answers_match_graphql_core(query: str) -> None:
    variables = {"skip": True}
    ours = await planned.execute(query, variable_values=variables, context_value={"prepare": True})
    theirs = await plain.execute(query, variable_values=variables, context_value={"prepare": True})
    assert ours.data == theirs.data
    assert [(e.message, e.path) for e in ours.errors or []] == [
        (e.message, e.path) for e in theirs.errors or []
    ]


async def test_a_null_in_a_non_null_field_still_errors_at_its_path() -> None:
    result = await planned.execute('{ broken(attribute: "must") { id must } }')
    assert result.data == {"broken": [{"id": "1", "must": "x"}, None]}
    (error,) = result.errors or []
    assert error.path == ["broken", 1, "must"]
    assert "Cannot return null for non-nullable field Item.must" in error.message


async def test_an_attribute_that_raises_nulls_that_field_not_its_object() -> None:
    result = await planned.execute("{ unreadable { id maybe count } }")
    assert result.data == {
        "unreadable": [
            {"id": "1", "maybe": None, "count": 1},
            {"id": "2", "maybe": None, "count": 2},
        ]
    }
    (error,) = result.errors or []
    assert error.path == ["unreadable", 1, "maybe"]
    assert error.message == "maybe cannot be read"


async def test_enum_members_answer_their_names() -> None:
    result = await planned.execute("{ items { color } }")
    assert result.data == {"items": [{"color": "RED"}, {"color": "BLUE"}]}


BOXES = "query($n: Int!) { boxes { id label items(first: $n) { id name } all: items { id } } }"


async def test_prepared_answers_stand_in_for_their_resolvers() -> None:
    CALLS.clear()
    ours = await planned.execute(BOXES, {"n": 1}, context_value={"prepare": True})
    assert CALLS == ["items 2", "label", "items 1", "items 2"], "b1's prepared fields ran"
    theirs = await plain.execute(BOXES, {"n": 1}, context_value={"prepare": False})
    assert ours.errors is None and ours.data == theirs.data
    assert ours.data is not None
    assert ours.data["boxes"][0] == {
        "id": "b1",
        "label": "box b1",
        "items": [{"id": "1", "name": "a"}],
        "all": [{"id": "1"}, {"id": "2"}],
    }


async def test_answers_prepared_for_other_arguments_are_not_used() -> None:
    CALLS.clear()
    result = await planned.execute(BOXES, {"n": 2}, context_value={"prepare": True})
    assert "items 2" in CALLS[:2] and CALLS.count("items 2") == 4
    assert result.data is not None
    assert result.data["boxes"][0]["items"] == [{"id": "1", "name": "a"}, {"id": "2", "name": "b"}]


@strawberry.type
class Checked:
    x: int

    @classmethod
    def is_type_of(cls, obj: Any, info: Any) -> bool:
        return isinstance(obj, cls)


@strawberry.type
class CheckedQuery:
    checked: Checked


def test_a_type_with_its_own_type_check_is_refused() -> None:
    """The fast path passes type checks no ResolveInfo; a check that might read one is
    refused when the schema is built (schema.build runs this on spacedock's schema)."""
    with pytest.raises(AssertionError, match="Checked has its own is_type_of"):
        assert_type_checks_ignore_info(strawberry.Schema(query=CheckedQuery)._schema)
    assert_type_checks_ignore_info(planned._schema)


async def test_arguments_that_cannot_key_an_answer_go_to_the_resolver() -> None:
    query = '{ boxes { id tagged(tags: ["a", "b"]) } }'
    result = await planned.execute(query, context_value={"prepare": True})
    assert result.errors is None
    assert result.data == {"boxes": [{"id": "b1", "tagged": "a,b"}, {"id": "b2", "tagged": "a,b"}]}
