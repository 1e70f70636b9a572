"""Spaces: registration with exact validation, the operator hold, deregistration and
the status history every transition leaves behind."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from core.common.errors import Problems, UserErrors
from core.common.events import SPACE_STATUS
from core.common.ids import new_id
from core.common.names import check_new_name, cloud_name_problem, name_key
from core.common.rbac import Viewer
from core.common.secrets import SecretBox
from core.common.services import Unit
from core.spaces import clouds, cluster_endpoints
from core.spaces.clouds import GENERIC_SECRETS
from core.spaces.health import stored_status
from core.spaces.reasons import StatusReasonCode
from core.spaces.status_rules import DEREGISTERED, HOLD_LIFTED, OPERATOR_HOLD, REGISTERED, Reason
from core.spaces.statuses import SpaceStatus
from db import cloud_accounts as account_rows
from db import cloudspaces as cloudspace_rows
from db import owned
from db import spaces as space_rows
from db.tables import CloudAccount, Space, SpaceStatusEvent
from providers.clouds import ClusterLocation

PUBLIC_CONFIG = ("clusterName", "region", "projectId", "resourceGroup", "subscriptionId", "server")


@dataclass(frozen=True)
class RegisterSpaceRequest:
    name: str
    provider: str
    space_type: str
    cloud_account_id: str | None
    config: dict[str, str]  # SpaceConfigInput fields that were given, by contract name
    synthetic: bool


def _check_server(problems: Problems, server: str, deny: tuple[Any, ...]) -> str | None:
    return cluster_endpoints.check_server(problems, server, deny)


def _check_generic_secrets(problems: Problems, config: dict[str, str]) -> None:
    ca_cert = config.get("caCert", "")
    if ca_cert.strip():  # a missing caCert is already reported as required
        try:
            x509.load_pem_x509_certificates(ca_cert.encode())
        except ValueError:
            problems.add(["config", "caCert"], "caCert must be a PEM CA bundle")
    token = config.get("serviceAccountToken")
    certificate, key = config.get("clientCertificate"), config.get("clientKey")
    if token is None and certificate is None and key is None:
        problems.add(
            ["config", "serviceAccountToken"],
            "serviceAccountToken, or clientCertificate with clientKey, is required",
        )
    if token is not None and (certificate is not None or key is not None):
        problems.add(
            ["config", "serviceAccountToken"],
            "give serviceAccountToken or a client certificate, not both",
        )
    if token is not None and (not token.strip() or any(c.isspace() for c in token.strip())):
        problems.add(
            ["config", "serviceAccountToken"],
            "serviceAccountToken must be a bearer token without spaces",
        )
    if (certificate is None) != (key is None):
        missing = "clientKey" if key is None else "clientCertificate"
        problems.add(["config", missing], "clientCertificate and clientKey go together")
    if certificate is not None:
        try:
            x509.load_pem_x509_certificate(certificate.encode())
        except ValueError:
            problems.add(
                ["config", "clientCertificate"], "clientCertificate must be a PEM certificate"
            )
    if key is not None:
        try:
            serialization.load_pem_private_key(key.encode(), password=None)
        except (ValueError, TypeError):
            problems.add(
                ["config", "clientKey"], "clientKey must be an unencrypted PEM private key"
            )
    if certificate is not None and key is not None:
        cluster_endpoints.check_client_pair(problems, certificate, key)


def _check_config(
    problems: Problems, provider: clouds.Provider, config: dict[str, str], deny: tuple[Any, ...]
) -> None:
    for field in sorted(set(config) - provider.config_allowed):
        owner = "GENERIC spaces" if field in ("server", *GENERIC_SECRETS) else "other providers"
        problems.add(
            ["config", field], f"{field} does not apply to {provider.name}; it is for {owner}"
        )
    for field in ("clusterName", *provider.config_required):
        if not config.get(field, "").strip():
            problems.add(["config", field], f"{field} is required for {provider.name}")
    for field in ("clusterName", "resourceGroup"):
        if config.get(field) and (why := cloud_name_problem(config[field])) is not None:
            problems.add(["config", field], f"{field} {why}")
    region = config.get("region")
    if region and not provider.region_pattern.fullmatch(region):
        problems.add(["config", "region"], f"region must be {provider.region_example}")
    formats = {
        "projectId": (clouds.GCP_PROJECT, "a GCP project id"),
        "subscriptionId": (clouds.UUID, "a UUID"),
    }
    for field, (pattern, what) in formats.items():
        given = config.get(field)
        if field in provider.config_allowed and given and not pattern.fullmatch(given):
            problems.add(["config", field], f"{field} must be {what}")
    if not provider.cloud and config.get("server"):
        normalized = _check_server(problems, config["server"], deny)
        if normalized:
            config["server"] = normalized
    if not provider.cloud:
        _check_generic_secrets(problems, config)


class HasConfig(Protocol):
    @property
    def config_json(self) -> str: ...


class OwnedSpace(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def org_id(self) -> str: ...


def public_config(space: HasConfig) -> dict[str, str]:
    config: dict[str, str] = json.loads(space.config_json)
    return config


@dataclass(frozen=True)
class Registration:
    """A registration that passed every check the database can answer."""

    name: str  # canonical (core.common.names)
    config: dict[str, str]
    identity: str
    account: CloudAccount | None


async def _account_for(
    unit: Unit,
    viewer: Viewer,
    problems: Problems,
    provider: clouds.Provider,
    cloud_account_id: str | None,
) -> CloudAccount | None:
    """The cloud account a registration names, when the provider takes one and it is the
    caller's and of that provider; each fault a problem on cloudAccountId."""
    if not provider.cloud:
        if cloud_account_id is not None:
            problems.add(["cloudAccountId"], f"{provider.name} spaces have no cloud account")
        return None
    if cloud_account_id is None:
        problems.add(["cloudAccountId"], f"cloudAccountId is required for {provider.name}")
        return None
    found = await owned.by_id(unit.session, CloudAccount, viewer.org_id, cloud_account_id)
    if found is None:
        problems.add(["cloudAccountId"], "no such cloud account", "NOT_FOUND")
        return None
    if found.provider != provider.name:
        problems.add(["cloudAccountId"], f"this is a {found.provider} account, not {provider.name}")
        return None
    return found


async def _checked_registration(
    unit: Unit,
    viewer: Viewer,
    secrets: SecretBox,
    request: RegisterSpaceRequest,
    deny: tuple[Any, ...],
) -> Registration:
    viewer.require("space:create")
    problems = Problems("input")
    provider = clouds.provider(request.provider)
    config = {k: v for k, v in request.config.items() if v is not None}
    name = await check_new_name(
        problems,
        request.name,
        lambda key: space_rows.live_space_where(unit.session, viewer.org_id, name_key=key),
        "a registered space",
    )
    # The checks below need a well-formed config and account; faults of the name alone
    # must not hide theirs, since every fault of one call is reported together.
    name_faults = len(problems.errors)
    account = await _account_for(unit, viewer, problems, provider, request.cloud_account_id)
    scope: dict[str, str] = {}
    if account is not None:
        scope = clouds.account_scope(provider.name, secrets.open(account.credentials_ciphertext))
        for field, own in scope.items():  # a GCP project, an Azure subscription: the account's
            config.setdefault(field, own)
    _check_config(problems, provider, config, deny)
    if len(problems.errors) > name_faults:
        problems.raise_if_any()

    if account is not None:
        for field, own in scope.items():
            if config[field].lower() != own.lower():
                problems.add(["config", field], f"{field} must be the account's own ({own})")
        if (
            await account_rows.grant(unit.session, account.id, provider.grant_key_of(config))
            is None
        ):
            problems.add(
                ["config", "clusterName"],
                "the cloud account has no access to this cluster; grantClusterAccess first",
                "PRECONDITION_FAILED",
            )
    identity = provider.identity_key(request.cloud_account_id, config)
    if await space_rows.live_space_where(unit.session, viewer.org_id, identity_key=identity):
        at = ["config", "clusterName"] if provider.cloud else ["config", "server"]
        problems.add(at, "this cluster is already registered as a space", "CONFLICT")
    problems.raise_if_any()
    return Registration(name, config, identity, account)


async def registration_check(
    unit: Unit,
    viewer: Viewer,
    secrets: SecretBox,
    request: RegisterSpaceRequest,
    deny: tuple[Any, ...],
) -> clouds.CloudTarget | None:
    """Every check registerSpace makes before it asks the cloud whether the cluster exists;
    what to ask it (None: GENERIC, nothing to ask)."""
    checked = await _checked_registration(unit, viewer, secrets, request, deny)
    if checked.account is None:
        return None
    return clouds.CloudTarget(
        provider=checked.account.provider,
        credentials=secrets.open(checked.account.credentials_ciphertext),
        location=ClusterLocation(
            checked.config.get("region"),
            checked.config["clusterName"],
            checked.config.get("resourceGroup"),
        ),
    )


async def register(
    unit: Unit,
    viewer: Viewer,
    secrets: SecretBox,
    request: RegisterSpaceRequest,
    deny: tuple[Any, ...],
) -> Space:
    checked = await _checked_registration(unit, viewer, secrets, request, deny)
    config, identity = dict(checked.config), checked.identity
    secret = {k: config.pop(k) for k in GENERIC_SECRETS if k in config}
    space = Space(
        id=new_id("spc"),
        org_id=viewer.org_id,
        name=checked.name,
        name_key=name_key(checked.name),
        provider=request.provider,
        space_type=request.space_type,
        cloud_account_id=request.cloud_account_id,
        config_json=json.dumps({k: config[k] for k in PUBLIC_CONFIG if k in config}),
        identity_key=identity,
        secret_ciphertext=secrets.seal(secret) if secret else None,
        synthetic=request.synthetic,
        next_probe_at=unit.now,
        created_at=unit.now,
    )
    # A concurrent registration of the same name or cluster fails this insert; the
    # mutation is then retried and the checks above answer CONFLICT.
    await owned.add(unit.session, space)
    await record_transition(
        unit, space, None, SpaceStatus.UNKNOWN, Reason(REGISTERED, StatusReasonCode.REGISTERED)
    )
    unit.probe_soon = True
    return space


async def space_in_org(unit: Unit, viewer: Viewer, space_id: str, field: list[str]) -> Space:
    space = await owned.by_id(unit.session, Space, viewer.org_id, space_id)
    if space is None:
        raise UserErrors.one(field, "no such space", "NOT_FOUND")
    return space


async def record_transition(
    unit: Unit, space: OwnedSpace, previous: str | None, status: str, reason: Reason
) -> None:
    await record_transitions(unit, [Transition(space, previous, status, reason)])


@dataclass(frozen=True)
class Transition:
    """A visible status change of one space, to be recorded as a SpaceStatusEvent."""

    space: OwnedSpace
    previous: str | None
    status: str
    reason: Reason


async def record_transitions(unit: Unit, transitions: Sequence[Transition]) -> None:
    """Records the events in one statement and publishes them in id order after commit."""
    events = [
        SpaceStatusEvent(
            space_id=change.space.id,
            org_id=change.space.org_id,
            previous=change.previous,
            status=change.status,
            reason=change.reason.words,
            reason_code=change.reason.code,
            at=unit.now,
        )
        for change in transitions
    ]
    ids = await space_rows.add_events(unit.session, events)
    for event_id, event in zip(ids, events, strict=True):
        unit.publish(
            SPACE_STATUS, {"event_id": event_id, "space_id": event.space_id, "org_id": event.org_id}
        )


async def set_status(unit: Unit, viewer: Viewer, space_id: str, status: str) -> Space:
    viewer.require("space:update")
    problems = Problems("input")
    if status not in (SpaceStatus.ACTIVE, SpaceStatus.INACTIVE):
        problems.add(["status"], "status must be ACTIVE (lift a hold) or INACTIVE (hold)")
    space = await owned.by_id(unit.session, Space, viewer.org_id, space_id)
    if space is None:
        problems.add(["id"], "no such space", "NOT_FOUND")
    elif space.deregistered_at is not None:
        problems.add(["id"], "the space is deregistered", "PRECONDITION_FAILED")
    problems.raise_if_any()
    assert space is not None
    previous = stored_status(space)
    if status == SpaceStatus.INACTIVE:
        space.held = True
        reason = Reason(OPERATOR_HOLD, StatusReasonCode.OPERATOR_HOLD)
    else:
        space.held = False
        space.next_probe_at = unit.now  # take the probes' verdict, starting with a fresh one
        unit.probe_soon = True
        reason = Reason(HOLD_LIFTED, StatusReasonCode.HOLD_LIFTED)
    unit.session.add(space)
    await unit.session.flush()
    if stored_status(space) != previous:
        await record_transition(unit, space, previous, stored_status(space), reason)
    return space


async def deregister(unit: Unit, viewer: Viewer, space_id: str) -> Space:
    viewer.require("space:delete")
    space = await space_in_org(unit, viewer, space_id, ["input", "id"])
    if space.deregistered_at is not None:
        raise UserErrors.one(
            ["input", "id"], "the space is already deregistered", "PRECONDITION_FAILED"
        )
    if hosted := await cloudspace_rows.count_on_space(unit.session, space.id):
        raise UserErrors.one(
            ["input", "id"],
            f"{hosted} CloudSpace{'s' if hosted > 1 else ''} live on this space; "
            "delete them before deregistering it",
            "PRECONDITION_FAILED",
        )
    # Deregistration is a transition: the space reads INACTIVE from now on, and its
    # subscribers hear so.
    previous = stored_status(space)
    space.deregistered_at = unit.now
    unit.session.add(space)
    await record_transition(
        unit,
        space,
        previous,
        stored_status(space),
        Reason(DEREGISTERED, StatusReasonCode.DEREGISTERED),
    )
    if space.cloud_account_id is not None:
        config = public_config(space)
        key = clouds.provider(space.provider).grant_key_of(config)
        grant = await account_rows.grant(unit.session, space.cloud_account_id, key)
        if grant is not None:
            await owned.remove(unit.session, grant)
    await unit.session.flush()
    return space
