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
