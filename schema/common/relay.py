"""The Relay shapes every list and object shares: Node, PageInfo, edges and connections."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import strawberry
from strawberry import Private

from db.pages import Page
from resolvers.common.pagination import cursors_of

T = TypeVar("T")


@strawberry.interface(
    description="An object with a globally unique id; node(id:) and nodes(ids:) resolve any of them."
)
class Node:
    id: strawberry.ID = strawberry.field(
        description="Opaque and globally unique; stable for the object's life."
    )


@strawberry.type(description="Where a page sits in its list.")
class PageInfo:
    has_next_page: bool = strawberry.field(description="True when more items follow this page.")
    has_previous_page: bool = strawberry.field(
        description="True when items come before this page (always true after an `after`)."
    )
    start_cursor: str | None = strawberry.field(
        description="The first item's cursor, to pass as `before`; null on an empty page."
    )
    end_cursor: str | None = strawberry.field(
        description="The last item's cursor, to pass as `after`; null on an empty page."
    )


@strawberry.type(description="One item of a page, with the cursor that marks its place.")
class Edge(Generic[T]):
    cursor: str = strawberry.field(
        description="Opaque; pass it as `after` to continue after this item."
    )
    node: T = strawberry.field(description="The item.")


@strawberry.type(
    description="One page of a list (Relay connection): edges with cursors, the items, "
    "paging info and the total."
)
class Connection(Generic[T]):
    page: Private[Page[Any]]

    # Cursors, edges and paging info only when asked: most pages are read through `nodes`.
    def _edges(self) -> list[Edge[T]]:
        cursors = cursors_of(self.page)
        return [Edge(cursor=c, node=n) for c, n in zip(cursors, self.nodes, strict=True)]

    def _page_info(self) -> PageInfo:
        cursors = cursors_of(self.page)
        return PageInfo(
            has_next_page=self.page.has_next,
            has_previous_page=self.page.has_previous,
            start_cursor=cursors[0] if cursors else None,
            end_cursor=cursors[-1] if cursors else None,
        )

    edges: list[Edge[T]] = strawberry.field(
        resolver=_edges, description="The page's items with their cursors."
    )
    nodes: list[T] = strawberry.field(description="The page's items, as in edges.")
    page_info: PageInfo = strawberry.field(
        resolver=_page_info, description="Where this page sits in the list."
    )
    total_count: int = strawberry.field(
        description="How many items the whole list has (every page, filters applied)."
    )

    @classmethod
    def of(cls, page: Page[Any], wrap: type[T]) -> Connection[T]:
        nodes = [wrap.from_row(row) for row in page.items]  # type: ignore[attr-defined]
        return cls(page=page, nodes=nodes, total_count=page.total)
