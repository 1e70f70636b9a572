"""The App Advisor's settings (SPACEDOCK_ADVISOR_*), read once per process by api.settings."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelSettings:
    """An OpenAI-compatible chat-completions endpoint that explains findings."""

    url: str  # the API's base, e.g. http://127.0.0.1:8080/v1 (…/chat/completions is added)
    model: str
    api_key: str = field(repr=False)  # never logged, never returned
    concurrency: int = 2
    timeout_s: float = 30.0
    calls_per_hour: int = 120
    attempts: int = 3  # a call that fails for a passing reason is tried this often


@dataclass(frozen=True)
class AdvisorSettings:
    interval_s: float = 300.0
    concurrency: int = 4  # CloudSpaces read at once
    read_timeout_s: float = 60.0  # one run's reading of a vCluster, all lists together
    # Items per chunk of a list: an answer under a quarter MiB is decoded on the event loop by
    # the C parser (providers.kube.json_answer); a larger one slowly, off it (bench/advisor.py).
    page_size: int = 100
    max_objects: int = 10_000  # per kind: a list past it is cut, and the run resolves nothing
    model: ModelSettings | None = None
