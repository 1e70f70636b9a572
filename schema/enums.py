"""Enums of the public contract, each value described for the frontends that switch on it."""

from __future__ import annotations

import enum

import strawberry

from core import statuses


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
    # The values are core's (core.statuses), which core and the probe loop use.
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


@strawberry.enum(name="Role", description="A caller's role in its org; it grants policies.")
class Role(enum.Enum):
    ADMIN = strawberry.enum_value(
        "ADMIN", description="Every policy, including deletions and cloud accounts."
    )
    EDITOR = strawberry.enum_value(
        "EDITOR", description="Reads, and creates or changes spaces, namespaces and environments."
    )
    VIEWER = strawberry.enum_value("VIEWER", description="Reads only.")
    CUSTOM = strawberry.enum_value(
        "CUSTOM", description="A role defined by the org; Viewer.customRole says which."
    )


@strawberry.enum(description="How a caller authenticated.")
class CredentialKind(enum.Enum):
    API_TOKEN = strawberry.enum_value(
        "API_TOKEN", description="An API token (spacedock token create, createApiToken)."
    )
    OIDC = strawberry.enum_value(
        "OIDC", description="A bearer JWT from the configured OIDC issuer (SSO)."
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
        "STATUS", description="The status as shown, alphabetically: ACTIVE, INACTIVE, UNKNOWN."
    )
    CREATED_AT = strawberry.enum_value("CREATED_AT", description="When the space was registered.")
    LAST_PROBE_AT = strawberry.enum_value(
        "LAST_PROBE_AT",
        description="When the latest probe finished; never-probed spaces count as oldest.",
    )


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


@strawberry.enum(
    description="Why a space has its status, for programs (icons, filters). statusReason has "
    "the words."
)
class StatusReasonCode(enum.Enum):
    REGISTERED = strawberry.enum_value(
        "REGISTERED", description="Just registered; no probe has answered yet."
    )
    PROBE_OK = strawberry.enum_value(
        "PROBE_OK", description="A probe reached the API server and read its version."
    )
    DNS = strawberry.enum_value("DNS", description="The API server's host name does not resolve.")
    CONNECTION_REFUSED = strawberry.enum_value(
        "CONNECTION_REFUSED",
        description="No connection to the API server (refused, unreachable or not allowed).",
    )
    TLS = strawberry.enum_value(
        "TLS", description="The TLS handshake failed, e.g. a certificate not signed by the CA."
    )
    UNAUTHORIZED = strawberry.enum_value(
        "UNAUTHORIZED", description="The cluster answered 401: it rejects the credential."
    )
    FORBIDDEN = strawberry.enum_value(
        "FORBIDDEN", description="The cluster answered 403: the credential lacks permission."
    )
    TIMEOUT = strawberry.enum_value(
        "TIMEOUT", description="No answer within the probe timeout (SPACEDOCK_PROBE_TIMEOUT_S)."
    )
    HTTP_ERROR = strawberry.enum_value(
        "HTTP_ERROR",
        description="The cluster answered another non-200 status (the words say which).",
    )
    BAD_RESPONSE = strawberry.enum_value(
        "BAD_RESPONSE", description="A 200 answer that is not a Kubernetes version."
    )
    ACCESS_REVOKED = strawberry.enum_value(
        "ACCESS_REVOKED", description="The cloud account's access to the cluster was revoked."
    )
    CREDENTIALS_UNAVAILABLE = strawberry.enum_value(
        "CREDENTIALS_UNAVAILABLE", description="No credential could be minted for the cluster."
    )
    OPERATOR_HOLD = strawberry.enum_value(
        "OPERATOR_HOLD", description="An operator hold (setSpaceStatus INACTIVE) is in force."
    )
    HOLD_LIFTED = strawberry.enum_value(
        "HOLD_LIFTED", description="The operator hold was lifted (setSpaceStatus ACTIVE)."
    )
    PROBE_STALE = strawberry.enum_value(
        "PROBE_STALE", description="No probe result for 3 probe intervals: the status is unknown."
    )
    DEREGISTERED = strawberry.enum_value("DEREGISTERED", description="The space was deregistered.")
