"""The states things in spacedock can be in, as enums shared by core, db and the GraphQL
schema (which maps its enums to these), instead of string literals spread over layers.

Spaces have a status; the phase of a CloudSpace follows its reconciler step
(`core.cloudspaces.PHASE_OF`).
"""

from __future__ import annotations

from enum import StrEnum


class SpaceStatus(StrEnum):
    """Whether a space's cluster answers: ACTIVE, INACTIVE, or UNKNOWN (not yet known, or
    no recent probe result)."""

    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    UNKNOWN = "UNKNOWN"
