"""One retry formula (providers.errors.backoff_s) for the loop kit, the reconciler and the
cloud calls, and a TemporaryError's own delay honoured by the loop kit and the reconciler."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.cloudspaces.reconciler import MAX_RETRY_S, Reconciler
from core.common.events import InProcessBus
from core.common.loops import retry_delay_s
from core.common.secrets import SecretBox
from core.common.services import Services
from core.spaces.health import HealthRule
from db.engine import Database
from providers import clouds
from providers.errors import (
    PermanentError,
    TemporaryError,
    backoff_s,
    for_status,
    retry_after_header,
    retry_after_s,
)


def test_the_wait_doubles_from_the_first_up_to_the_longest() -> None:
    assert [backoff_s(n, 0.5, 30) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert backoff_s(0, 0.5, 30) == 0.5  # no failure yet counts as the first


def test_the_loop_kit_waits_as_long_as_a_temporary_error_asks() -> None:
    assert [retry_delay_s(ValueError("ours"), n) for n in (1, 2, 10)] == [0.5, 1, 30]
    assert retry_delay_s(TemporaryError("timeout"), 3) == 2
    assert retry_delay_s(PermanentError("401 unauthorized"), 3) == 2
    assert retry_delay_s(TemporaryError("throttled", retry_after_s=60), 1) == 60
    assert retry_delay_s(TemporaryError("throttled", retry_after_s=0.1), 4) == 4  # never sooner
    assert retry_after_s(PermanentError("x")) is None


def test_the_reconciler_retries_with_the_same_formula_and_the_errors_delay(
    tmp_path: Path,
) -> None:
    services = Services(
        database=Database(f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}"),
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(3600),
    )
    reconciler = Reconciler(services)
    first = min(5.0, services.cloudspaces.reconcile_interval_s)
    assert [reconciler.retry_in(n) for n in (1, 2, 3)] == [first, 2 * first, 4 * first]
    assert reconciler.retry_in(50) == MAX_RETRY_S
    assert reconciler.retry_in(1, at_least_s=60) == max(first, 60)


async def test_a_cloud_that_throttles_every_attempt_says_when_to_try_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clouds, "THROTTLE_BACKOFF_S", 0.001)
    attempts = 0

    async def throttled() -> None:
        nonlocal attempts
        attempts += 1
        raise clouds.Throttled("throttled: ListClusters got 429")

    with pytest.raises(clouds.Throttled) as refused:
        await clouds.retry_throttled(throttled, "listing clusters")
    assert attempts == clouds.THROTTLE_RETRIES + 1
    assert refused.value.retry_after_s == clouds.THROTTLED_RETRY_AFTER_S
    assert "try again in a minute" in refused.value.reason


def test_a_429_is_temporary_and_carries_the_wait_its_retry_after_asks_for() -> None:
    throttled = for_status(429, "Too many requests", retry_after_header({"Retry-After": "7"}))
    assert isinstance(throttled, TemporaryError) and retry_after_s(throttled) == 7
    assert throttled.reason == (
        "HTTP 429 from the API server (too many requests, retry after 7s): Too many requests"
    )
    assert retry_after_s(for_status(429)) is None  # no header: the caller's backoff decides
    # What a server may send: kept within bounds, or ignored when it is no number of seconds.
    assert [
        retry_after_header({"Retry-After": given})
        for given in (
            "0",
            " 2 ",
            "-5",
            "1e9",
            "inf",
            "nan",
            "soon",
            "Wed, 21 Oct 2026 07:28:00 GMT",
        )
    ] == [0, 2, 0, 300, None, None, None, None]
    assert retry_after_header(None) is None and retry_after_header({}) is None
