"""The states things in spacedock can be in, as enums shared by core, db and the GraphQL
schema, instead of string literals spread over layers.

Spaces have a status; a CloudSpace has a phase, which follows its reconciler step
(`core.cloudspaces.lifecycle.Step`, `PHASE_OF`). Both are stored as these values; the schema's
CloudSpacePhase is this enum itself (schema.common.enums.contract_enum), SpaceStatus names
these values.
"""

from __future__ import annotations

from enum import StrEnum


class SpaceStatus(StrEnum):
    """Whether a space's cluster answers: ACTIVE, INACTIVE, or UNKNOWN (not yet known, or
    no recent probe result)."""

    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    UNKNOWN = "UNKNOWN"


class CloudSpacePhase(StrEnum):
    """Where a CloudSpace stands: the phase of its reconciler step
    (`core.cloudspaces.lifecycle.PHASE_OF`), FAILED after a step failed, and DELETED, the phase of
    the last event only (the row is gone)."""

    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    INSTALLING_FLUX = "INSTALLING_FLUX"
    READY = "READY"
    FAILED = "FAILED"
    DELETING = "DELETING"
    DELETED = "DELETED"
