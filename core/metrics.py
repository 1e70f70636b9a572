"""What /metrics shows: every source of numbers (the process, each background loop) hands
over its samples through one protocol, and they are rendered in Prometheus text format.

A new loop exports its counters by adding its stats object to the sources the app
collects; nothing else lists metric names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

MetricKind = Literal["counter", "gauge"]


@dataclass(frozen=True)
class Sample:
    name: str
    kind: MetricKind
    help: str
    value: int | float


class MetricSource(Protocol):
    def samples(self) -> list[Sample]:
        """The source's current values, one sample per metric."""
        ...


def exposition(sources: Iterable[MetricSource]) -> str:
    """Prometheus text format (version 0.0.4) of every source's samples."""
    lines: list[str] = []
    for source in sources:
        for sample in source.samples():
            lines += [
                f"# HELP {sample.name} {sample.help}",
                f"# TYPE {sample.name} {sample.kind}",
                f"{sample.name} {sample.value}",
            ]
    return "\n".join(lines) + "\n"
