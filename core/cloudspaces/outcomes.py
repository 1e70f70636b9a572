"""What a reconciler step comes to (done, waiting, failed), and the changes to a
CloudSpace's vClusters it brings, which the reconciler persists with it."""

from __future__ import annotations

from dataclasses import dataclass

from core.cloudspaces.tenant import Used


@dataclass(frozen=True)
class Change:
    """One vCluster after a step: written only if it is still at `read_step`."""

    id: str
    name: str
    read_step: str
    # Its phase and message as read: an event goes out when they change.
    previous: tuple[str, str | None]
    step: str
    phase: str
    message: str | None
    removed: bool = False
    # The phases it went through on the way to `phase` in this one run: each gets its
    # event, as the CloudSpace's own phases do.
    passed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Done:
    usage: Used | None = None
    vclusters: tuple[Change, ...] = ()


@dataclass(frozen=True)
class Wait:
    message: str | None = None
    usage: Used | None = None
    vclusters: tuple[Change, ...] = ()


@dataclass(frozen=True)
class Failed:
    reason: str
    # The soonest a retry is worth it, when the failure says (providers.errors.TemporaryError).
    retry_after_s: float | None = None
    vclusters: tuple[Change, ...] = ()


Outcome = Done | Wait | Failed
