"""How the transport runs a subscription operation: every subscription resolver of every
domain reads it from the root value (api.shared_subscriptions runs each subscription once
per subscriber to admit it, and once per group of subscribers to stream)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SubscriptionMode:
    """How the transport runs a subscription operation (its root value)."""

    # Make the subscription's checks (errors as usual), then end without streaming.
    admit_only: bool = False
    # Called once events published from then on will reach the stream.
    on_listening: Callable[[], None] | None = None

    @classmethod
    def of(cls, root_value: Any) -> SubscriptionMode:
        return root_value if isinstance(root_value, SubscriptionMode) else cls()
