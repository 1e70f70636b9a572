"""Enums of the public contract, each value described for the frontends that switch on it."""

from __future__ import annotations

import enum
from typing import TypeVar

import strawberry
from strawberry.types.enum import StrawberryEnumDefinition

from core.common.rbac import CredentialKind as CredentialKind
from core.common.rbac import Role as Role
from core.spaces import statuses
from core.spaces.reasons import StatusReasonCode as StatusReasonCode
from core.spaces.statuses import CloudSpacePhase as CloudSpacePhase

E = TypeVar("E", bound=type[enum.Enum])


def contract_enum(core: E, description: str, values: dict[str, str], name: str | None = None) -> E:
    """Core's enum as the contract's (named `name`, or as core names it): its members, in
    its order, are the GraphQL values, each with the description given here. A member
    without one, or a description of no member, fails at import."""
    names = [member.name for member in core]
    assert list(values) == names, f"{core.__name__}: described {list(values)}, members {names}"
    strawberry.enum(core, name=name, description=description)
    definition: StrawberryEnumDefinition = core.__strawberry_definition__  # type: ignore[attr-defined]
    for value in definition.values:
        value.description = values[value.name]
    return core


@strawberry.enum(description="What kind of cluster a space or cloud account is.")
class Provider(enum.Enum):
    AWS = strawberry.enum_value("AWS", description="Amazon EKS, reached through a cloud account.")
    GCP = strawberry.enum_value("GCP", description="Google GKE, reached through a cloud account.")
    AZURE = strawberry.enum_value(
        "AZURE", description="Azure AKS, reached through a cloud account."
    )
    GENERIC = strawberry.enum_value(
        "GENERIC",
        description=(
            "Any conformant cluster reached by API server URL, CA and a token or client "
            "certificate (on-prem, k3s, kind)."
        ),
    )


@strawberry.enum(description="What runs in a space.")
class SpaceType(enum.Enum):
    KUBERNETES = strawberry.enum_value("KUBERNETES", description="A Kubernetes cluster.")


@strawberry.enum(
    description=(
        "A space's health as the reachability probe, an operator hold and staleness give it."
    )
)
class SpaceStatus(enum.Enum):
    # The values are core's (core.spaces.statuses), which core and the probe loop use.
    ACTIVE = strawberry.enum_value(
        statuses.SpaceStatus.ACTIVE.value,
        description="The latest probe reached the cluster's API server.",
    )
    INACTIVE = strawberry.enum_value(
        statuses.SpaceStatus.INACTIVE.value,
        description=(
            "Failing probes reached the failure threshold, an operator hold is in force, "
            "or the space is deregistered."
        ),
    )
    UNKNOWN = strawberry.enum_value(
        statuses.SpaceStatus.UNKNOWN.value,
        description=(
            "Not yet known: a new space below the failure threshold, or no probe result "
            "for 3 probe intervals."
        ),
    )


contract_enum(
    Role,
    "A caller's role in its org; it grants policies.",
    {
        "ADMIN": "Every policy, including deletions and cloud accounts.",
        "EDITOR": "Reads, and creates or changes spaces, namespaces and environments.",
        "VIEWER": "Reads only.",
        "CUSTOM": "A role defined by the org; Viewer.customRole says which.",
    },
)


contract_enum(
    CredentialKind,
    "How a caller authenticated.",
    {
        "API_TOKEN": "An API token (spacedock token create, createApiToken).",
        "OIDC": "A bearer JWT from the configured OIDC issuer (SSO).",
        "OS_USER": "An operator's `spacedock` command (token create, token revoke, space "
        "import-kubeconfig, secrets reseal) run on the server's database; the actor is the "
        "OS user. Audit events only: no API caller authenticates this way.",
    },
)


@strawberry.enum(description="What kind of expected failure a userErrors entry reports.")
class UserErrorCode(enum.Enum):
    INVALID = strawberry.enum_value(
        "INVALID", description="The input at `field` is malformed or not allowed."
    )
    NOT_FOUND = strawberry.enum_value(
        "NOT_FOUND",
        description="No such object in the caller's org (another org's objects read the same).",
    )
    CONFLICT = strawberry.enum_value(
        "CONFLICT",
        description="Clashes with an existing object (a taken name, a cluster registered twice).",
    )
    FORBIDDEN = strawberry.enum_value(
        "FORBIDDEN", description="The caller's role lacks the policy this call needs."
    )
    PRECONDITION_FAILED = strawberry.enum_value(
        "PRECONDITION_FAILED",
        description="The object is not in a state that allows this call (e.g. deregistered).",
    )
    QUOTA_EXCEEDED = strawberry.enum_value(
        "QUOTA_EXCEEDED", description="The request is beyond a quota or the host's capacity."
    )
    PROVIDER_ERROR = strawberry.enum_value(
        "PROVIDER_ERROR",
        description="The cloud or cluster could not be reached or refused; the message says why.",
    )


@strawberry.enum(description="Which way a list is sorted.")
class OrderDirection(enum.Enum):
    ASC = strawberry.enum_value("ASC", description="Smallest first (A to Z, oldest first).")
    DESC = strawberry.enum_value("DESC", description="Largest first (Z to A, newest first).")


@strawberry.enum(description="What a list of spaces is sorted by; ties are broken by id.")
class SpaceOrderField(enum.Enum):
    NAME = strawberry.enum_value("NAME", description="The space's name (the database's collation).")
    STATUS = strawberry.enum_value(
        "STATUS",
        description="The status as shown, by severity: ASC puts what needs a look first "
        "(INACTIVE, then UNKNOWN, then ACTIVE), DESC the healthy first.",
    )
    CREATED_AT = strawberry.enum_value("CREATED_AT", description="When the space was registered.")
    LAST_PROBE_AT = strawberry.enum_value(
        "LAST_PROBE_AT",
        description="When the latest probe finished; never-probed spaces count as oldest.",
    )


@strawberry.enum(description="What a list of CloudSpaces is sorted by; ties are broken by id.")
class CloudSpaceOrderField(enum.Enum):
    NAME = strawberry.enum_value(
        "NAME", description="The CloudSpace's name (the database's collation)."
    )
    CREATED_AT = strawberry.enum_value("CREATED_AT", description="When it was created.")
    PHASE = strawberry.enum_value(
        "PHASE",
        description="The phase in lifecycle order: ASC is PENDING, PROVISIONING, "
        "INSTALLING_FLUX, READY, FAILED, DELETING (as CloudSpacePhase lists them).",
    )


contract_enum(
    CloudSpacePhase,
    "Where a CloudSpace stands in its lifecycle.",
    {
        "PENDING": "Created; waiting for the reconciler.",
        "PROVISIONING": "The host namespace, its quota and the vCluster are being set up.",
        "INSTALLING_FLUX": "The vCluster is up; its tenant account, quotas and Flux are being installed.",
        "READY": "Healthy and ready for apps; re-checked every reconcile interval.",
        "FAILED": "A step failed (the reason is in message); retried with backoff from that step.",
        "DELETING": "Being removed; message names what blocks the removal while it lingers.",
        "DELETED": "Terminal: the CloudSpace and its vClusters are gone; sent once as the last event.",
    },
)


contract_enum(
    StatusReasonCode,
    "Why a space has its status, for programs (icons, filters). statusReason has the words.",
    {
        "REGISTERED": "Just registered; no probe has answered yet.",
        "PROBE_OK": "A probe reached the API server and read its version.",
        "DNS": "The API server's host name does not resolve.",
        "CONNECTION_REFUSED": "No connection to the API server (refused, unreachable or not allowed).",
        "TLS": "The TLS handshake failed, e.g. a certificate not signed by the CA.",
        "UNAUTHORIZED": "The cluster answered 401: it rejects the credential.",
        "FORBIDDEN": "The cluster answered 403: the credential lacks permission.",
        "TIMEOUT": "No answer within the probe timeout (SPACEDOCK_PROBE_TIMEOUT_S).",
        "HTTP_ERROR": "The cluster answered another non-200 status (the words say which).",
        "BAD_RESPONSE": "A 200 answer that is not a Kubernetes version.",
        "ACCESS_REVOKED": "The cloud account's access to the cluster was revoked.",
        "CREDENTIALS_UNAVAILABLE": "No credential could be minted for the cluster.",
        "OPERATOR_HOLD": "An operator hold (setSpaceStatus INACTIVE) is in force.",
        "HOLD_LIFTED": "The operator hold was lifted (setSpaceStatus ACTIVE).",
        "PROBE_STALE": "No probe result for 3 probe intervals: the status is unknown.",
        "DEREGISTERED": "The space was deregistered.",
    },
)
