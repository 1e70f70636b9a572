"""Enums of the public contract."""

from __future__ import annotations

import enum

import strawberry

from core.rbac import Role

strawberry.enum(Role)


@strawberry.enum
class Provider(enum.Enum):
    AWS = "AWS"
    GCP = "GCP"
    AZURE = "AZURE"
    GENERIC = strawberry.enum_value(
        "GENERIC",
        description=(
            "Any conformant cluster reached by API server URL, CA and a token or client "
            "certificate (on-prem, k3s, kind)."
        ),
    )


@strawberry.enum
class SpaceType(enum.Enum):
    KUBERNETES = "KUBERNETES"


@strawberry.enum
class SpaceStatus(enum.Enum):
    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    UNKNOWN = "UNKNOWN"


@strawberry.enum(description="Where a CloudSpace stands in its lifecycle.")
class CloudSpacePhase(enum.Enum):
    PENDING = strawberry.enum_value("PENDING", description="Created; waiting for the reconciler.")
    PROVISIONING = strawberry.enum_value(
        "PROVISIONING",
        description="The host namespace, its quota and the vCluster are being set up.",
    )
    INSTALLING_FLUX = strawberry.enum_value(
        "INSTALLING_FLUX",
        description="The vCluster is up; its tenant account, quotas and Flux are being installed.",
    )
    READY = strawberry.enum_value(
        "READY", description="Healthy and ready for apps; re-checked every reconcile interval."
    )
    FAILED = strawberry.enum_value(
        "FAILED",
        description="A step failed (the reason is in message); retried with backoff from that step.",
    )
    DELETING = strawberry.enum_value(
        "DELETING",
        description="Being removed; message names what blocks the removal while it lingers.",
    )
    DELETED = strawberry.enum_value(
        "DELETED",
        description="Terminal: the CloudSpace and its vClusters are gone; sent once as the last event.",
    )
