"""How often apps are looked at, and how revisions are retried."""

from __future__ import annotations

from dataclasses import dataclass

# The seed's rule: a queued revision is tried this many times against an unavailable
# target, then dead-lettered until someone requeues it.
MAX_TRIES = 3


@dataclass(frozen=True)
class AppSettings:
    # SPACEDOCK_APP_STATUS_INTERVAL_S: how often each app's Flux objects are read.
    status_interval_s: float = 30.0
    # SPACEDOCK_APP_RETRY_INTERVAL_S: between tries of a revision whose target is unavailable.
    retry_interval_s: float = 60.0

    @property
    def poll_s(self) -> float:
        """How soon a revision waiting for a target that is coming up looks again."""
        return min(5.0, self.retry_interval_s)
