"""Plain graphql-core (no Strawberry, no spacedock): a subscription's per-event executors
share the memo of the subscription's executor, so every event leaves its collected fields
behind for as long as the subscription lives (issue 19). For reporting upstream.

`Executor.build_per_event_executor` is `copy(self)`, a shallow copy: `_relevant_sub_fields`
is the same dict for every event. `collect_subfields` memoises under
`(return_type, id(field_details_list))`, and the root field lists are collected anew for
each event, so each event adds entries (and keeps the lists alive with them) that no
later event can hit. With one subscription and 2,000 events the memo holds one entry per
event per nested object field, and the gc-tracked `CollectedFields` / `FieldDetails`
counts grow linearly while the subscription is open.

Run: `.venv/bin/python bench/subscription_memo.py [--events 2000]`; it prints the counts
after 100 events and after all of them, with a per-event executor that gets fresh memos
(the workaround in schema/engine/execution.py) as the baseline in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import graphql
from graphql import build_schema, parse, subscribe
from graphql.execution.collect_fields import CollectedFields, FieldDetails
from graphql.execution.executor import Executor

SDL = """
type Query { noop: String }
type Inner { label: String weight: Float }
type Tick { number: Int name: String inner: Inner items: [Inner] }
type Subscription { ticks: Tick }
"""
DOCUMENT = parse("subscription { ticks { number name inner { label weight } items { label } } }")


class FreshMemos(Executor[Any]):
    """The workaround: each event's executor gets memos of its own."""

    def build_per_event_executor(self, payload: Any) -> Executor[Any]:
        executor = super().build_per_event_executor(payload)
        executor._relevant_sub_fields = {}
        return executor


def counts() -> dict[str, int]:
    gc.collect()
    found = {"CollectedFields": 0, "FieldDetails": 0}
    for thing in gc.get_objects():
        if isinstance(thing, CollectedFields):
            found["CollectedFields"] += 1
        elif isinstance(thing, FieldDetails):
            found["FieldDetails"] += 1
    return found


async def run(
    executor_class: type[Executor[Any]], events: int
) -> tuple[dict[str, int], dict[str, int]]:
    schema = build_schema(SDL)

    async def ticks(_root: Any, _info: Any) -> AsyncIterator[dict[str, Any]]:
        for number in range(events):
            inner = {"label": f"i{number}", "weight": number / 2}
            yield {
                "ticks": {"number": number, "name": f"t{number}", "inner": inner, "items": [inner]}
            }

    schema.subscription_type.fields["ticks"].subscribe = ticks  # type: ignore[union-attr]
    stream: Any = subscribe(schema, DOCUMENT, executor_class=executor_class)
    if asyncio.iscoroutine(stream):
        stream = await stream
    early: dict[str, int] = {}
    late: dict[str, int] = {}
    async for result in stream:
        assert not result.errors, result.errors
        number = result.data["ticks"]["number"]
        if number == 100:
            early = counts()
        if number == events - 1:
            late = counts()  # the subscription is still open
    return early, late


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    events = parser.parse_args().events
    print(f"graphql-core {graphql.__version__}, one subscription, {events} events")
    print(f"{'executor':<28} {'kind':<16} {'after 100':>10} {f'after {events}':>12}")
    for name, executor_class in (
        ("graphql-core's", Executor),
        ("fresh memos per event", FreshMemos),
    ):
        early, late = asyncio.run(run(executor_class, events))
        for kind in early:
            print(f"{name:<28} {kind:<16} {early[kind]:>10} {late[kind]:>12}")


if __name__ == "__main__":
    main()
