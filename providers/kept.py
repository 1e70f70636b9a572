"""In-memory caches bounded by size and by age (issue 19).

A server meant to run for months must not hold more because it has seen more: every
cache keyed by what arrives (servers, tokens, events, credentials) keeps at most `size`
entries, the least recently used dropped first, and drops an entry not used for `idle_s`
(a deregistered space's TLS session, a revoked token's verdict, an event long delivered).
Expired entries are swept at most every quarter of `idle_s`, so a sweep costs nothing per
use. Whether a kept value is still true (a TTL, a credential's expiry) stays each
caller's own rule; this only bounds what is held.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Kept(Generic[K, V]):
    """A least-recently-used map of at most `size` entries, none idle for `idle_s`."""

    def __init__(
        self, size: int, idle_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.size = size
        self.idle_s = idle_s
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()  # (last used, value)
        self._next_sweep = clock() + idle_s / 4

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    def items(self) -> Iterator[tuple[K, V]]:
        return ((key, value) for key, (_, value) in self._entries.items())

    def values(self) -> Iterator[V]:
        return (value for _, value in self._entries.values())

    def get(self, key: K) -> V | None:
        """The value, marked used; None when absent or idle too long."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        now = self._clock()
        if now - entry[0] >= self.idle_s:
            del self._entries[key]
            return None
        self._entries[key] = (now, entry[1])
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: K, value: V) -> None:
        now = self._clock()
        self._entries[key] = (now, value)
        self._entries.move_to_end(key)
        if now >= self._next_sweep:
            self._sweep(now)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def pop(self, key: K) -> V | None:
        entry = self._entries.pop(key, None)
        return None if entry is None else entry[1]

    def clear(self) -> None:
        self._entries.clear()

    def _sweep(self, now: float) -> None:
        """Drops every entry idle for `idle_s`: they sit oldest first, so it stops at the
        first one used since."""
        self._next_sweep = now + self.idle_s / 4
        while self._entries:
            key, (used, _) = next(iter(self._entries.items()))
            if now - used < self.idle_s:
                break
            del self._entries[key]
