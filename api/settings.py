"""Settings from SPACEDOCK_* environment variables (see the README's table)."""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from strawberry.http.websocket_origin import normalize_origin

from core.secrets import SecretBox
from core.vclusters import DEFAULT_FLUX_MANIFESTS, DEFAULT_IMAGE, CloudSpaceSettings

log = logging.getLogger("spacedock")

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./spacedock.db"


class SettingsError(ValueError):
    """A setting has a value spacedock cannot use; the message names it."""


def _number(name: str, default: float, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if value <= minimum:
        raise SettingsError(f"{name} must be greater than {minimum:g}, got {raw!r}")
    return value


def _networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    raw = os.environ.get(name, "")
    try:
        return tuple(ipaddress.ip_network(part.strip()) for part in raw.split(",") if part.strip())
    except ValueError as error:
        raise SettingsError(f"{name} must be comma-separated CIDRs: {error}") from None


def _oidc_settings() -> dict[str, Any]:
    issuer = os.environ.get("SPACEDOCK_OIDC_ISSUER") or None
    audience = os.environ.get("SPACEDOCK_OIDC_AUDIENCE") or None
    if issuer is not None and audience is None:
        raise SettingsError(
            "SPACEDOCK_OIDC_AUDIENCE must be set with SPACEDOCK_OIDC_ISSUER: the audience "
            "(client id) your identity provider puts in the tokens it issues for spacedock"
        )
    return {
        "oidc_issuer": issuer,
        "oidc_audience": audience,
        "oidc_org_claim": os.environ.get("SPACEDOCK_OIDC_ORG_CLAIM") or "org",
        "oidc_role_claim": os.environ.get("SPACEDOCK_OIDC_ROLE_CLAIM") or "spacedock_role",
    }


def _origins(name: str) -> tuple[str, ...]:
    """Browser origins, written as browsers send them (lowercase, no default port)."""
    origins = []
    for given in (part.strip() for part in os.environ.get(name, "").split(",")):
        if not given:
            continue
        parts = urlsplit(given)
        origin = normalize_origin(given)
        if (
            origin is None
            or parts.scheme not in ("http", "https")
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or parts.username
        ):
            raise SettingsError(
                f"{name} must be comma-separated origins such as http://localhost:5173 "
                f"(scheme://host[:port], no path), got {given!r}"
            )
        origins.append(origin)
    return tuple(origins)


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    database_url: str = DEFAULT_DATABASE_URL
    secret_key: str | None = None
    probe_interval_s: float = 60.0
    probe_timeout_s: float = 5.0
    probe_failure_threshold: int = 3
    probe_concurrency: int = 256
    cluster_deny_cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(
        default=()
    )
    # Orgs whose cloud accounts may use the server's own cloud identity ("ambient": true).
    ambient_credential_orgs: frozenset[str] = frozenset()
    cloudspaces: CloudSpaceSettings = field(default_factory=CloudSpaceSettings)
    # Transport limits (issue 7): a request body or WebSocket message, a request's head and
    # body sent too slowly, subscriptions one credential holds across its connections, and
    # the bearer token /metrics asks for (unset: /metrics is open, as before).
    max_body_bytes: int = 1024 * 1024
    request_read_timeout_s: float = 5.0
    max_subscriptions_per_token: int = 500
    metrics_token: str | None = None
    # Frontends (issue 10): browser origins allowed to call the API (unset: none), and how
    # long a live field such as Space.namespaces may wait on one cluster.
    cors_origins: tuple[str, ...] = ()
    live_field_timeout_s: float = 2.0
    # issue 7 (hostile clusters): how much of one cluster answer is read.
    cluster_max_body_bytes: int = 4 * 2**20
    # issue 11 (access): how long audit events are kept, and SSO with bearer JWTs.
    audit_retention_days: float = 90.0
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_org_claim: str = "org"
    oidc_role_claim: str = "spacedock_role"
    live_calls_per_request: int = 20
    live_call_concurrency: int = 5
    live_calls_per_server: int = 64
    live_items_per_request: int = 5_000
    # issue 12: how long a verified API token is held in memory (core.token_cache).
    token_cache_ttl_s: float = 2.0

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            host=os.environ.get("SPACEDOCK_HOST", "127.0.0.1"),
            port=int(_number("SPACEDOCK_PORT", 8000)),
            database_url=os.environ.get("SPACEDOCK_DATABASE_URL") or DEFAULT_DATABASE_URL,
            secret_key=os.environ.get("SPACEDOCK_SECRET_KEY") or None,
            probe_interval_s=_number("SPACEDOCK_PROBE_INTERVAL_S", 60.0),
            probe_timeout_s=_number("SPACEDOCK_PROBE_TIMEOUT_S", 5.0),
            probe_failure_threshold=int(_number("SPACEDOCK_PROBE_FAILURE_THRESHOLD", 3)),
            probe_concurrency=int(_number("SPACEDOCK_PROBE_CONCURRENCY", 256)),
            cluster_deny_cidrs=_networks("SPACEDOCK_CLUSTER_DENY_CIDRS"),
            ambient_credential_orgs=frozenset(
                name.strip()
                for name in os.environ.get("SPACEDOCK_AMBIENT_CREDENTIAL_ORGS", "").split(",")
                if name.strip()
            ),
            cloudspaces=_cloudspace_settings(),
            max_body_bytes=int(_number("SPACEDOCK_MAX_BODY_BYTES", 1024 * 1024)),
            request_read_timeout_s=_number("SPACEDOCK_REQUEST_READ_TIMEOUT_S", 5.0),
            max_subscriptions_per_token=int(_number("SPACEDOCK_MAX_SUBSCRIPTIONS_PER_TOKEN", 500)),
            metrics_token=os.environ.get("SPACEDOCK_METRICS_TOKEN") or None,
            cors_origins=_origins("SPACEDOCK_CORS_ORIGINS"),
            live_field_timeout_s=_number("SPACEDOCK_LIVE_FIELD_TIMEOUT_S", 2.0),
            cluster_max_body_bytes=int(_number("SPACEDOCK_CLUSTER_MAX_BODY_BYTES", 4 * 2**20)),
            audit_retention_days=_number("SPACEDOCK_AUDIT_RETENTION_DAYS", 90.0),
            **_oidc_settings(),
            live_calls_per_request=int(_number("SPACEDOCK_LIVE_CALLS_PER_REQUEST", 20)),
            live_call_concurrency=int(_number("SPACEDOCK_LIVE_CALL_CONCURRENCY", 5)),
            live_calls_per_server=int(_number("SPACEDOCK_LIVE_CALLS_PER_SERVER", 64)),
            live_items_per_request=int(_number("SPACEDOCK_LIVE_ITEMS_PER_REQUEST", 5_000)),
            token_cache_ttl_s=_number("SPACEDOCK_TOKEN_CACHE_TTL_S", 2.0),
        )

    def secret_box(self) -> SecretBox:
        """The key that seals credentials; in development one is generated beside the database."""
        if self.secret_key is not None:
            if not SecretBox.is_valid_key(self.secret_key):
                raise SettingsError(
                    "SPACEDOCK_SECRET_KEY must be a Fernet key (urlsafe base64 of 32 bytes); "
                    'make one with: python -c "from cryptography.fernet import Fernet; '
                    'print(Fernet.generate_key().decode())"'
                )
            return SecretBox(self.secret_key)
        path = self.development_key_path()
        if path.exists():
            key = path.read_text().strip()
        else:
            key = SecretBox.generate_key()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(key + "\n")
        log.warning(
            "SPACEDOCK_SECRET_KEY is unset: development mode, credentials are sealed with the key "
            "in %s. Set SPACEDOCK_SECRET_KEY in production.",
            path,
        )
        return SecretBox(key)

    def development_key_path(self) -> Path:
        url = sa.make_url(self.database_url)
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            return Path(url.database).resolve().with_suffix(".key")
        return Path("spacedock.key").resolve()


def _cloudspace_settings() -> CloudSpaceSettings:
    template = os.environ.get("SPACEDOCK_VCLUSTER_URL_TEMPLATE") or None
    if template is not None:
        if not template.startswith("https://"):
            raise SettingsError("SPACEDOCK_VCLUSTER_URL_TEMPLATE must be an https:// URL template")
        try:
            template.format(name="n", namespace="ns", id="id")
        except (KeyError, IndexError, ValueError):
            raise SettingsError(
                "SPACEDOCK_VCLUSTER_URL_TEMPLATE may only use {name}, {namespace} and {id}"
            ) from None
    return CloudSpaceSettings(
        default_host_space=os.environ.get("SPACEDOCK_DEFAULT_HOST_SPACE") or None,
        default_cpu=_number("SPACEDOCK_DEFAULT_CLOUDSPACE_CPU", 2.0),
        default_memory_mib=int(_number("SPACEDOCK_DEFAULT_CLOUDSPACE_MEMORY_MIB", 4096)),
        control_plane_cpu=_number("SPACEDOCK_VCLUSTER_CONTROL_PLANE_CPU", 0.5),
        control_plane_memory_mib=int(_number("SPACEDOCK_VCLUSTER_CONTROL_PLANE_MEMORY_MIB", 512)),
        vcluster_image=os.environ.get("SPACEDOCK_VCLUSTER_IMAGE") or DEFAULT_IMAGE,
        vcluster_url_template=template,
        flux_manifests=os.environ.get("SPACEDOCK_FLUX_MANIFESTS") or DEFAULT_FLUX_MANIFESTS,
        reconcile_interval_s=_number("SPACEDOCK_RECONCILE_INTERVAL_S", 30.0),
        # The API server refuses TokenRequests shorter than 10 minutes.
        kubeconfig_ttl_s=int(_number("SPACEDOCK_KUBECONFIG_TTL_S", 3600, minimum=599)),
    )
