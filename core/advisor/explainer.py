"""Plain-language explanations of findings from a chat-completions model, when one is
configured (SPACEDOCK_ADVISOR_MODEL_URL, _MODEL, _API_KEY).

It runs beside the analyzers on a loop of its own, so a slow or absent model never
delays a run: each new finding is due for an explanation; the explainer claims due
ones (most severe first is not promised; oldest due first), at most `concurrency` calls
at once and `calls_per_hour` in any hour (per process), each within `timeout_s` and
tried up to `attempts` times with backoff. What is sent is the finding with its names
masked (core.advisor.anonymize) and without the evidence an application wrote; the
answer gets the names back and is stored with the finding, so a finding is explained
once (and findings that mask to the same words share one answer, from a cache).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

from core.advisor import findings as advice
from core.advisor.anonymize import Masks
from core.advisor.settings import ModelSettings
from core.common.loops import STOP_GRACE_S, Loop, LoopStats, describe, metric
from core.common.services import Services
from db import advisor as advice_rows
from db import claims
from db.advisor_tables import AdvisorFinding
from providers.chat import ChatEndpoint, complete
from providers.errors import PermanentError, ProviderError, TemporaryError, backoff_s

log = logging.getLogger("spacedock.advisor.explainer")

HOUR_S = 3600.0
LOOK_FOR_DUE_S = 2.0
CACHE_KEPT = 1024
MAX_EXPLANATION_CHARS = 4000
GIVE_UP_AFTER = 5  # failed explanations of one finding; then it keeps the rules' text only
SYSTEM_PROMPT = (
    "You are a Kubernetes site reliability engineer. A rule-based advisor found a problem "
    "in a team's cluster. Explain it in plain language to the team that owns the workload: "
    "what is wrong, why it matters, and how to fix it, in at most 150 words. Names are "
    "replaced by placeholders such as <object-1> or <namespace-1>: keep them exactly as "
    "written and invent no names."
)
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass
class ExplainStats(LoopStats):
    loop: ClassVar[str] = "advisor_explain"

    calls: int = metric(
        "counter", "spacedock_advisor_model_calls_total", "Calls made to the explaining model."
    )
    explained: int = metric(
        "counter", "spacedock_advisor_explained_total", "Findings given an explanation."
    )
    cached: int = metric(
        "counter",
        "spacedock_advisor_explanations_cached_total",
        "Explanations taken from the cache (a finding that masks to the same words).",
    )
    failed: int = metric(
        "counter",
        "spacedock_advisor_explain_failures_total",
        "Findings whose explanation failed after every attempt (tried again later).",
    )


def cleaned(text: str) -> str:
    """A model's answer as stored: no control or direction characters, bounded."""
    text = _CONTROL.sub(" ", text.replace("\r\n", "\n")).strip()
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text if len(text) <= MAX_EXPLANATION_CHARS else text[: MAX_EXPLANATION_CHARS - 1] + "…"


def prompt_of(row: AdvisorFinding) -> tuple[Masks, str]:
    """The masks of a finding and what the model is told about it."""
    names, images = advice.names_of(row)
    masks = Masks(namespaces=[row.namespace], objects=[row.name], images=images, names=names)
    shared = [text for text, ok in advice.evidence_of(row) if ok]
    lines = [
        f"Rule: {row.rule_id} ({row.severity})",
        f"Object: {row.kind} <object-1> in namespace <namespace-1>",
        f"Finding: {row.title}",
        "Evidence:",
        *(f"- {text}" for text in shared),
        f"Suggested fix: {row.suggestion}",
    ]
    if row.patch:
        lines += ["Suggested patch (strategic merge, YAML):", row.patch]
    return masks, masks.mask("\n".join(lines))


class Explainer:
    def __init__(self, services: Services, settings: ModelSettings) -> None:
        self.services = services
        self.settings = settings
        self.endpoint = ChatEndpoint(settings.url, settings.model, settings.api_key)
        self.stats = ExplainStats()
        self.loop = Loop("advisor-explain", self.stats, settings.concurrency)
        self.wanted = asyncio.Event()
        self._calls: deque[float] = deque()
        self._cache: OrderedDict[str, str] = OrderedDict()

    def start(self) -> None:
        self.loop.run("claims", self._claim_step)

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Calls still waiting after `grace_s` are cut; their findings fall due again when
        their claims run out."""
        await self.loop.stop(grace_s)

    def _budget_left(self) -> int:
        now = time.monotonic()
        while self._calls and self._calls[0] <= now - HOUR_S:
            self._calls.popleft()
        return self.settings.calls_per_hour - len(self._calls)

    async def _claim_step(self) -> None:
        await self.loop.wait_for_free(1, LOOK_FOR_DUE_S)
        room = min(self.loop.free, self._budget_left())
        if room <= 0:
            wait = HOUR_S - (time.monotonic() - self._calls[0]) if self._calls else LOOK_FOR_DUE_S
            await self.loop.nap(max(wait, 0.01) if self.loop.free > 0 else LOOK_FOR_DUE_S)
            return
        self.wanted.clear()
        lease = timedelta(seconds=self.settings.timeout_s * self.settings.attempts + 60)
        async with self.services.unit() as unit:
            rows = await claims.claim_due(
                unit.session,
                advice_rows.EXPLAIN_QUEUE,
                now=unit.now,
                due_again=unit.now + lease,
                limit=room,
            )
        for row in rows:
            self.loop.spawn(row.id, self._explain(row))
        if len(rows) < room:
            await self.loop.nap(LOOK_FOR_DUE_S, self.wanted)

    async def _explain(self, row: AdvisorFinding) -> None:
        masks, prompt = prompt_of(row)
        key = hashlib.sha256(prompt.encode()).hexdigest()
        try:
            answer = self._cache.get(key)
            if answer is None:
                answer = await self._ask(prompt)
                self._cache[key] = answer
                if len(self._cache) > CACHE_KEPT:
                    self._cache.popitem(last=False)
            else:
                self.stats.cached += 1
                self._cache.move_to_end(key)
        except ProviderError as failed:
            self.stats.failed += 1
            log.warning("finding %s not explained: %s", row.id, failed.reason)
            await self._failed(row)
            return
        await self._store(row, cleaned(masks.unmask(answer)))

    async def _ask(self, prompt: str) -> str:
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        attempt = 0
        while True:
            attempt += 1
            if self._budget_left() <= 0:
                raise TemporaryError("the hourly budget of model calls is spent")
            self._calls.append(time.monotonic())
            self.stats.calls += 1
            try:
                return await complete(
                    self.endpoint,
                    messages,
                    deny=self.services.deny_networks,
                    timeout_s=self.settings.timeout_s,
                )
            except TemporaryError as failed:
                if attempt >= self.settings.attempts:
                    raise
                wait = max(backoff_s(attempt, 1.0, 8.0), failed.retry_after_s or 0.0)
                await asyncio.sleep(min(wait, self.settings.timeout_s))
            except PermanentError:
                raise

    async def _store(self, row: AdvisorFinding, explanation: str) -> None:
        async with self.services.unit() as unit:
            stored = await advice_rows.explained(unit.session, row.id, explanation, unit.now)
            if stored:
                await advice.publish(
                    unit, row.org_id, row.cloud_space_id, [(row.id, advice.Change.EXPLAINED)]
                )
        if stored:
            self.stats.explained += 1

    async def _failed(self, row: AdvisorFinding) -> None:
        attempts = row.explain_attempts + 1
        try:
            async with self.services.unit() as unit:
                later = None
                if attempts < GIVE_UP_AFTER:
                    later = unit.now + timedelta(seconds=backoff_s(attempts, 60.0, 6 * HOUR_S))
                await advice_rows.explain_later(unit.session, row.id, attempts, later)
        except Exception as error:  # it falls due again when its claim runs out
            log.warning("finding %s: explanation retry not recorded (%s)", row.id, describe(error))


def describe_settings(settings: ModelSettings) -> str:
    """The model as the log may name it: endpoint host and model, never the key."""
    return json.dumps(
        {"endpoint": ChatEndpoint(settings.url, settings.model, "").host, "model": settings.model}
    )
