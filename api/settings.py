"""Settings from SPACEDOCK_* environment variables (see the README's table): one typed
model (pydantic-settings), each field read from the variable it names, an empty value
read as unset. A value spacedock cannot use is refused with the variable's name.

Here the server's own (address, database, keys, transport limits, clusters and probes,
access, logs, apps); the CloudSpaces' and the App Advisor's are parts of the same model
in settings_cloudspaces and settings_advisor, and how a value is read and refused is in
settings_values.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path
from typing import Annotated, Any

import sqlalchemy as sa
from pydantic import ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from api.settings_advisor import AdvisorVariables
from api.settings_cloudspaces import RETIRED, CloudSpaceVariables
from api.settings_values import SettingsError, address, listed, origin, refusal, setting
from core.apps.settings import AppSettings
from core.common.secrets import SecretBox

log = logging.getLogger("spacedock")

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./spacedock.db"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Settings(CloudSpaceVariables, AdvisorVariables, BaseSettings):
    model_config = SettingsConfigDict(
        frozen=True,
        case_sensitive=True,
        env_ignore_empty=True,  # an empty value means unset
        extra="ignore",
        validate_by_name=True,  # Settings(port=...) in code and tests
        validate_by_alias=True,
    )

    host: str = setting("127.0.0.1", "SPACEDOCK_HOST")
    port: int = setting(8000, "SPACEDOCK_PORT", 0)
    database_url: str = setting(DEFAULT_DATABASE_URL, "SPACEDOCK_DATABASE_URL")
    secret_key: str | None = setting(None, "SPACEDOCK_SECRET_KEY")
    probe_interval_s: float = setting(60.0, "SPACEDOCK_PROBE_INTERVAL_S", 0)
    probe_timeout_s: float = setting(5.0, "SPACEDOCK_PROBE_TIMEOUT_S", 0)
    probe_failure_threshold: int = setting(3, "SPACEDOCK_PROBE_FAILURE_THRESHOLD", 0)
    probe_concurrency: int = setting(256, "SPACEDOCK_PROBE_CONCURRENCY", 0)
    cluster_deny_cidrs: Annotated[tuple[IPNetwork, ...], NoDecode] = setting(
        (), "SPACEDOCK_CLUSTER_DENY_CIDRS"
    )
    # Orgs whose cloud accounts may use the server's own cloud identity ("ambient": true).
    ambient_credential_orgs: Annotated[frozenset[str], NoDecode] = setting(
        frozenset(), "SPACEDOCK_AMBIENT_CREDENTIAL_ORGS"
    )
    # Transport limits (issue 7): a request body or WebSocket message, a request's head and
    # body sent too slowly, subscriptions one credential holds across its connections, and
    # the bearer token /metrics asks for (unset: /metrics is open, as before).
    max_body_bytes: int = setting(1024 * 1024, "SPACEDOCK_MAX_BODY_BYTES", 0)
    request_read_timeout_s: float = setting(5.0, "SPACEDOCK_REQUEST_READ_TIMEOUT_S", 0)
    max_subscriptions_per_token: int = setting(500, "SPACEDOCK_MAX_SUBSCRIPTIONS_PER_TOKEN", 0)
    metrics_token: str | None = setting(None, "SPACEDOCK_METRICS_TOKEN")
    # Frontends (issue 10): browser origins allowed to call the API (unset: none), and how
    # long a live field such as Space.namespaces may wait on one cluster.
    cors_origins: Annotated[tuple[str, ...], NoDecode] = setting((), "SPACEDOCK_CORS_ORIGINS")
    live_field_timeout_s: float = setting(2.0, "SPACEDOCK_LIVE_FIELD_TIMEOUT_S", 0)
    # issue 19: how often the LISTEN connection (Postgres) is checked with a cheap query, and
    # how long that query may take; a link that stops answering counts as a gap in hearing.
    event_listen_keepalive_s: float = setting(5.0, "SPACEDOCK_EVENT_LISTEN_KEEPALIVE_S", 0)
    # issue 25: how long a replica told to stop (SIGTERM) takes at most to hand its work
    # over and exit (below Kubernetes' terminationGracePeriodSeconds, 30 by default).
    shutdown_grace_s: float = setting(20.0, "SPACEDOCK_SHUTDOWN_GRACE_S", 0)
    # issue 7 (hostile clusters): how much of one cluster answer is read.
    cluster_max_body_bytes: int = setting(4 * 2**20, "SPACEDOCK_CLUSTER_MAX_BODY_BYTES", 0)
    # issue 11 (access): how long audit events are kept, and SSO with bearer JWTs.
    audit_retention_days: float = setting(90.0, "SPACEDOCK_AUDIT_RETENTION_DAYS", 0)
    # issue 18: refused calls recorded one by one per credential and minute (the rest are
    # counted in one summary event; core.common.refused_calls).
    audit_refused_per_minute: int = setting(30, "SPACEDOCK_AUDIT_REFUSED_PER_MINUTE", 0)
    oidc_issuer: str | None = setting(None, "SPACEDOCK_OIDC_ISSUER")
    oidc_audience: str | None = setting(None, "SPACEDOCK_OIDC_AUDIENCE")
    oidc_org_claim: str = setting("org", "SPACEDOCK_OIDC_ORG_CLAIM")
    oidc_role_claim: str = setting("spacedock_role", "SPACEDOCK_OIDC_ROLE_CLAIM")
    live_calls_per_request: int = setting(20, "SPACEDOCK_LIVE_CALLS_PER_REQUEST", 0)
    live_call_concurrency: int = setting(5, "SPACEDOCK_LIVE_CALL_CONCURRENCY", 0)
    live_calls_per_server: int = setting(64, "SPACEDOCK_LIVE_CALLS_PER_SERVER", 0)
    live_items_per_request: int = setting(5_000, "SPACEDOCK_LIVE_ITEMS_PER_REQUEST", 0)
    # issue 12: how long a verified API token is held in memory (core.common.token_cache); also
    # how long an open WebSocket's verification holds (core.access.sessions).
    token_cache_ttl_s: float = setting(2.0, "SPACEDOCK_TOKEN_CACHE_TTL_S", 0.1)
    # issue 25: logs as text or JSON lines (api.logs), spacedock's level, and the cloud SDKs'.
    log_format: str = setting("text", "SPACEDOCK_LOG_FORMAT")
    log_level: str = setting("INFO", "SPACEDOCK_LOG_LEVEL")
    sdk_log_level: str = setting("WARNING", "SPACEDOCK_SDK_LOG_LEVEL")
    # Where people and their scripts reach spacedock (exec-plugin kubeconfigs call it);
    # unset: the address a download was asked at.
    public_url: str | None = setting(None, "SPACEDOCK_PUBLIC_URL")
    # Apps (issue 23; core.apps.settings.AppSettings, built by `apps`).
    app_status_interval_s: float = setting(30.0, "SPACEDOCK_APP_STATUS_INTERVAL_S", 0)
    app_retry_interval_s: float = setting(60.0, "SPACEDOCK_APP_RETRY_INTERVAL_S", 0)

    @field_validator("cluster_deny_cidrs", mode="before")
    @classmethod
    def _networks(cls, raw: Any) -> Any:
        try:
            return tuple(
                part if not isinstance(part, str) else ipaddress.ip_network(part)
                for part in listed(raw)
            )
        except ValueError as error:
            raise ValueError(f"must be comma-separated CIDRs: {error}") from None

    @field_validator("ambient_credential_orgs", mode="before")
    @classmethod
    def _names(cls, raw: Any) -> Any:
        return frozenset(listed(raw))

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, raw: Any) -> Any:
        return tuple(origin(given) for given in listed(raw))

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, given: str) -> str:
        if given.lower() not in ("text", "json"):
            raise ValueError(f"must be text or json, got {given!r}")
        return given.lower()

    @field_validator("log_level", "sdk_log_level")
    @classmethod
    def _log_level(cls, given: str) -> str:
        if given.upper() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {given!r}")
        return given.upper()

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, url: str | None) -> str | None:
        return address(url, ("http", "https"))

    @model_validator(mode="after")
    def _audience_with_issuer(self) -> Settings:
        if self.oidc_issuer is not None and self.oidc_audience is None:
            raise ValueError(
                "SPACEDOCK_OIDC_AUDIENCE must be set with SPACEDOCK_OIDC_ISSUER: the audience "
                "(client id) your identity provider puts in the tokens it issues for spacedock"
            )
        return self

    @classmethod
    def from_env(cls) -> Settings:
        """The settings the environment gives; SettingsError names a variable it refuses,
        or a retired one still set."""
        for retired, instead in RETIRED.items():
            if os.environ.get(retired):
                raise SettingsError(f"{retired} is no longer read: {instead}")
        try:
            return cls()
        except ValidationError as error:
            raise refusal(error) from None

    @property
    def apps(self) -> AppSettings:
        return AppSettings(
            status_interval_s=self.app_status_interval_s,
            retry_interval_s=self.app_retry_interval_s,
        )

    def secret_box(self) -> SecretBox:
        """The keys that seal credentials (the first seals, all open); in development one
        is generated beside the database, with a warning when it is made."""
        if self.secret_key is not None:
            keys = [key.strip() for key in self.secret_key.split(",") if key.strip()]
            bad = [place for place, key in enumerate(keys, 1) if not SecretBox.is_valid_key(key)]
            if not keys or bad:
                which = f" (key {bad[0]} of {len(keys)} is not)" if len(keys) > 1 and bad else ""
                raise SettingsError(
                    "SPACEDOCK_SECRET_KEY must be a Fernet key (urlsafe base64 of 32 bytes), or "
                    f"several separated by commas, the first sealing{which}; make one with: "
                    'python -c "from cryptography.fernet import Fernet; '
                    'print(Fernet.generate_key().decode())"'
                )
            return SecretBox(keys)
        path = self.development_key_path()
        if path.exists():
            return SecretBox(path.read_text().strip())
        key = SecretBox.generate_key()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(key + "\n")
        log.warning(
            "SPACEDOCK_SECRET_KEY is unset: development mode, credentials are sealed with a new "
            "key written to %s. Set SPACEDOCK_SECRET_KEY in production.",
            path,
        )
        return SecretBox(key)

    def development_key_path(self) -> Path:
        url = sa.make_url(self.database_url)
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            return Path(url.database).resolve().with_suffix(".key")
        return Path("spacedock.key").resolve()
