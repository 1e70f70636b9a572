"""A test's call into a stand-in that runs its own event loop in a thread.

The call waits for the stand-in's loop to run it. On a machine busy with a whole test
suite (four workers on two cores) a stand-in's loop can be behind by seconds, e.g. while
its Flux installs into a vCluster, so the wait is long: a control call (a fault to
inject, an object to read) that gives up early fails a test that would have passed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# How long a test waits for a stand-in's loop to run one of its calls.
CONTROL_WAIT_S = 60.0


def call_on(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs `coroutine` on the stand-in's `loop` from another thread; its result."""
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=CONTROL_WAIT_S)
