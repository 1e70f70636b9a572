"""Settings from SPACEDOCK_* environment variables (see the README's table): one typed
model (pydantic-settings), each field read from the variable it names, an empty value
read as unset. A value spacedock cannot use is refused with the variable's name.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from strawberry.http.websocket_origin import normalize_origin

from core.advisor.settings import AdvisorSettings, ModelSettings
from core.apps.settings import AppSettings
from core.cloudspaces.settings import (
    DEFAULT_CHART_URL,
    DEFAULT_CHART_VERSION,
    DEFAULT_FLUX_MANIFESTS_TAG,
    DEFAULT_FLUX_MANIFESTS_URL,
    CloudSpaceSettings,
    image_registry,
)
from core.common.secrets import SecretBox

log = logging.getLogger("spacedock")

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./spacedock.db"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


# Settings spacedock no longer reads, and what replaced them: one still set is refused at
# start, so an operator does not believe it still applies.
RETIRED = {
    "SPACEDOCK_FLUX_MANIFESTS": (
        "Flux is installed into each vCluster by the host's Flux from an OCI artifact; set "
        "SPACEDOCK_FLUX_MANIFESTS_URL (an oci:// URL, default "
        f"{DEFAULT_FLUX_MANIFESTS_URL}) and SPACEDOCK_FLUX_MANIFESTS_TAG (default "
        f"{DEFAULT_FLUX_MANIFESTS_TAG}) instead, and unset it"
    ),
    "SPACEDOCK_VCLUSTER_IMAGE": (
        "the vCluster comes from its Helm chart, which pins its images; set "
        f"SPACEDOCK_VCLUSTER_CHART_VERSION (default {DEFAULT_CHART_VERSION}) and "
        "SPACEDOCK_VCLUSTER_CHART_URL instead, and unset it"
    ),
}


class SettingsError(ValueError):
    """A setting has a value spacedock cannot use; the message names it."""


def _setting(default: Any, name: str, greater_than: float | None = None) -> Any:
    """A field read from the variable `name`; numbers must be above `greater_than`."""
    return Field(default, validation_alias=name, gt=greater_than)


def _listed(raw: Any) -> Any:
    """A comma-separated value's parts, blanks dropped (values given in code pass as they are)."""
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


def _origin(given: str) -> str:
    """A browser origin, written as browsers send it (lowercase, no default port)."""
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
        raise ValueError(
            "must be comma-separated origins such as http://localhost:5173 "
            f"(scheme://host[:port], no path), got {given!r}"
        )
    return origin


def _address(url: str | None, schemes: tuple[str, ...]) -> str | None:
    """A base URL, without its trailing slash; ValueError saying what is wrong with it."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.hostname:
        raise ValueError(f"must be a {' or '.join(f'{s}://' for s in schemes)} URL, got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"must have no query, fragment or user information, got {url!r}")
    return url.rstrip("/")


def _pem_of(path: str) -> str:
    """The PEM certificates in a file; ValueError saying why it cannot be used."""
    try:
        text = Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(
            f"cannot be read ({path}): {getattr(error, 'strerror', None) or error}"
        ) from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError(f"must name a PEM file of CA certificates; {path} holds none")
    return text


# Pydantic's error kinds, in the words the variables' errors use.
_WORDS = {
    "float_parsing": "must be a number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "greater_than": "must be greater than {gt:g}",
}


def _refusal(error: ValidationError) -> SettingsError:
    """The first problem, naming its variable."""
    problem = error.errors()[0]
    name = ".".join(str(part) for part in problem["loc"])
    if problem["type"] == "value_error":
        said = str(problem["ctx"]["error"])
        return SettingsError(f"{name} {said}" if name else said)
    words = _WORDS.get(problem["type"], problem["msg"]).format(**problem.get("ctx", {}))
    return SettingsError(f"{name} {words}, got {problem['input']!r}")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        frozen=True,
        case_sensitive=True,
        env_ignore_empty=True,  # an empty value means unset
        extra="ignore",
        validate_by_name=True,  # Settings(port=...) in code and tests
        validate_by_alias=True,
    )

    host: str = _setting("127.0.0.1", "SPACEDOCK_HOST")
    port: int = _setting(8000, "SPACEDOCK_PORT", 0)
    database_url: str = _setting(DEFAULT_DATABASE_URL, "SPACEDOCK_DATABASE_URL")
    secret_key: str | None = _setting(None, "SPACEDOCK_SECRET_KEY")
    probe_interval_s: float = _setting(60.0, "SPACEDOCK_PROBE_INTERVAL_S", 0)
    probe_timeout_s: float = _setting(5.0, "SPACEDOCK_PROBE_TIMEOUT_S", 0)
    probe_failure_threshold: int = _setting(3, "SPACEDOCK_PROBE_FAILURE_THRESHOLD", 0)
    probe_concurrency: int = _setting(256, "SPACEDOCK_PROBE_CONCURRENCY", 0)
    cluster_deny_cidrs: Annotated[tuple[IPNetwork, ...], NoDecode] = _setting(
        (), "SPACEDOCK_CLUSTER_DENY_CIDRS"
    )
    # Orgs whose cloud accounts may use the server's own cloud identity ("ambient": true).
    ambient_credential_orgs: Annotated[frozenset[str], NoDecode] = _setting(
        frozenset(), "SPACEDOCK_AMBIENT_CREDENTIAL_ORGS"
    )
    # Transport limits (issue 7): a request body or WebSocket message, a request's head and
    # body sent too slowly, subscriptions one credential holds across its connections, and
    # the bearer token /metrics asks for (unset: /metrics is open, as before).
    max_body_bytes: int = _setting(1024 * 1024, "SPACEDOCK_MAX_BODY_BYTES", 0)
    request_read_timeout_s: float = _setting(5.0, "SPACEDOCK_REQUEST_READ_TIMEOUT_S", 0)
    max_subscriptions_per_token: int = _setting(500, "SPACEDOCK_MAX_SUBSCRIPTIONS_PER_TOKEN", 0)
    metrics_token: str | None = _setting(None, "SPACEDOCK_METRICS_TOKEN")
    # Frontends (issue 10): browser origins allowed to call the API (unset: none), and how
    # long a live field such as Space.namespaces may wait on one cluster.
    cors_origins: Annotated[tuple[str, ...], NoDecode] = _setting((), "SPACEDOCK_CORS_ORIGINS")
    live_field_timeout_s: float = _setting(2.0, "SPACEDOCK_LIVE_FIELD_TIMEOUT_S", 0)
    # issue 19: how often the LISTEN connection (Postgres) is checked with a cheap query, and
    # how long that query may take; a link that stops answering counts as a gap in hearing.
    event_listen_keepalive_s: float = _setting(5.0, "SPACEDOCK_EVENT_LISTEN_KEEPALIVE_S", 0)
    # issue 25: how long a replica told to stop (SIGTERM) takes at most to hand its work
    # over and exit (below Kubernetes' terminationGracePeriodSeconds, 30 by default).
    shutdown_grace_s: float = _setting(20.0, "SPACEDOCK_SHUTDOWN_GRACE_S", 0)
    # issue 7 (hostile clusters): how much of one cluster answer is read.
    cluster_max_body_bytes: int = _setting(4 * 2**20, "SPACEDOCK_CLUSTER_MAX_BODY_BYTES", 0)
    # issue 11 (access): how long audit events are kept, and SSO with bearer JWTs.
    audit_retention_days: float = _setting(90.0, "SPACEDOCK_AUDIT_RETENTION_DAYS", 0)
    # issue 18: refused calls recorded one by one per credential and minute (the rest are
    # counted in one summary event; core.common.refused_calls).
    audit_refused_per_minute: int = _setting(30, "SPACEDOCK_AUDIT_REFUSED_PER_MINUTE", 0)
    oidc_issuer: str | None = _setting(None, "SPACEDOCK_OIDC_ISSUER")
    oidc_audience: str | None = _setting(None, "SPACEDOCK_OIDC_AUDIENCE")
    oidc_org_claim: str = _setting("org", "SPACEDOCK_OIDC_ORG_CLAIM")
    oidc_role_claim: str = _setting("spacedock_role", "SPACEDOCK_OIDC_ROLE_CLAIM")
    live_calls_per_request: int = _setting(20, "SPACEDOCK_LIVE_CALLS_PER_REQUEST", 0)
    live_call_concurrency: int = _setting(5, "SPACEDOCK_LIVE_CALL_CONCURRENCY", 0)
    live_calls_per_server: int = _setting(64, "SPACEDOCK_LIVE_CALLS_PER_SERVER", 0)
    live_items_per_request: int = _setting(5_000, "SPACEDOCK_LIVE_ITEMS_PER_REQUEST", 0)
    # issue 12: how long a verified API token is held in memory (core.common.token_cache); also
    # how long an open WebSocket's verification holds (core.access.sessions).
    token_cache_ttl_s: float = _setting(2.0, "SPACEDOCK_TOKEN_CACHE_TTL_S", 0.1)
    # CloudSpaces (core.cloudspaces.vclusters.CloudSpaceSettings, built by `cloudspaces`).
    default_host_space: str | None = _setting(None, "SPACEDOCK_DEFAULT_HOST_SPACE")
    default_cloudspace_cpu: float = _setting(2.0, "SPACEDOCK_DEFAULT_CLOUDSPACE_CPU", 0)
    default_cloudspace_memory_mib: int = _setting(
        4096, "SPACEDOCK_DEFAULT_CLOUDSPACE_MEMORY_MIB", 0
    )
    vcluster_control_plane_cpu: float = _setting(0.5, "SPACEDOCK_VCLUSTER_CONTROL_PLANE_CPU", 0)
    vcluster_control_plane_memory_mib: int = _setting(
        512, "SPACEDOCK_VCLUSTER_CONTROL_PLANE_MEMORY_MIB", 0
    )
    vcluster_url_template: str | None = _setting(None, "SPACEDOCK_VCLUSTER_URL_TEMPLATE")
    # Issue 22: the vCluster chart and Flux's manifests, delivered by the host's Flux; an
    # air-gapped site points them at its mirror.
    vcluster_chart_url: str = _setting(DEFAULT_CHART_URL, "SPACEDOCK_VCLUSTER_CHART_URL")
    vcluster_chart_version: str = _setting(
        DEFAULT_CHART_VERSION, "SPACEDOCK_VCLUSTER_CHART_VERSION"
    )
    flux_manifests_url: str = _setting(DEFAULT_FLUX_MANIFESTS_URL, "SPACEDOCK_FLUX_MANIFESTS_URL")
    vcluster_image_registry: str | None = _setting(None, "SPACEDOCK_VCLUSTER_IMAGE_REGISTRY")
    flux_manifests_tag: str = _setting(DEFAULT_FLUX_MANIFESTS_TAG, "SPACEDOCK_FLUX_MANIFESTS_TAG")
    reconcile_interval_s: float = _setting(30.0, "SPACEDOCK_RECONCILE_INTERVAL_S", 0)
    reconcile_lease_s: float = _setting(30.0, "SPACEDOCK_RECONCILE_LEASE_S", 0.5)
    # The API server refuses TokenRequests shorter than 10 minutes.
    kubeconfig_ttl_s: int = _setting(3600, "SPACEDOCK_KUBECONFIG_TTL_S", 599)
    # The App Advisor (issue 24; core.advisor.settings, built by `advisor`).
    advisor_interval_s: float = _setting(300.0, "SPACEDOCK_ADVISOR_INTERVAL_S", 0)
    advisor_concurrency: int = _setting(4, "SPACEDOCK_ADVISOR_CONCURRENCY", 0)
    advisor_read_timeout_s: float = _setting(60.0, "SPACEDOCK_ADVISOR_READ_TIMEOUT_S", 0)
    advisor_max_objects: int = _setting(10_000, "SPACEDOCK_ADVISOR_MAX_OBJECTS", 0)
    advisor_model_url: str | None = _setting(None, "SPACEDOCK_ADVISOR_MODEL_URL")
    advisor_model: str | None = _setting(None, "SPACEDOCK_ADVISOR_MODEL")
    # Never logged or shown (SecretStr prints as stars).
    advisor_model_api_key: SecretStr | None = _setting(None, "SPACEDOCK_ADVISOR_MODEL_API_KEY")
    advisor_model_concurrency: int = _setting(2, "SPACEDOCK_ADVISOR_MODEL_CONCURRENCY", 0)
    advisor_model_timeout_s: float = _setting(30.0, "SPACEDOCK_ADVISOR_MODEL_TIMEOUT_S", 0)
    advisor_model_calls_per_hour: int = _setting(120, "SPACEDOCK_ADVISOR_MODEL_CALLS_PER_HOUR", 0)
    # issue 25: logs as text or JSON lines (api.logs), spacedock's level, and the cloud SDKs'.
    log_format: str = _setting("text", "SPACEDOCK_LOG_FORMAT")
    log_level: str = _setting("INFO", "SPACEDOCK_LOG_LEVEL")
    sdk_log_level: str = _setting("WARNING", "SPACEDOCK_SDK_LOG_LEVEL")
    # Strict quota at admission (issue 22): spacedock's address as the vClusters reach it
    # (the API server calls webhooks over HTTPS only) and the CA file of its certificate.
    admission_url: str | None = _setting(None, "SPACEDOCK_ADMISSION_URL")
    admission_ca_file: str | None = _setting(None, "SPACEDOCK_ADMISSION_CA_FILE")
    # Where people and their scripts reach spacedock (exec-plugin kubeconfigs call it);
    # unset: the address a download was asked at.
    public_url: str | None = _setting(None, "SPACEDOCK_PUBLIC_URL")
    # Apps (issue 23; core.apps.settings.AppSettings, built by `apps`).
    app_status_interval_s: float = _setting(30.0, "SPACEDOCK_APP_STATUS_INTERVAL_S", 0)
    app_retry_interval_s: float = _setting(60.0, "SPACEDOCK_APP_RETRY_INTERVAL_S", 0)

    @field_validator("cluster_deny_cidrs", mode="before")
    @classmethod
    def _networks(cls, raw: Any) -> Any:
        try:
            return tuple(
                part if not isinstance(part, str) else ipaddress.ip_network(part)
                for part in _listed(raw)
            )
        except ValueError as error:
            raise ValueError(f"must be comma-separated CIDRs: {error}") from None

    @field_validator("ambient_credential_orgs", mode="before")
    @classmethod
    def _names(cls, raw: Any) -> Any:
        return frozenset(_listed(raw))

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, raw: Any) -> Any:
        return tuple(_origin(given) for given in _listed(raw))

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

    @field_validator("vcluster_url_template")
    @classmethod
    def _url_template(cls, template: str | None) -> str | None:
        if template is None:
            return None
        if not template.startswith("https://"):
            raise ValueError("must be an https:// URL template")
        try:
            template.format(name="n", namespace="ns", id="id")
        except (KeyError, IndexError, ValueError):
            raise ValueError("may only use {name}, {namespace} and {id}") from None
        return template

    @field_validator("vcluster_chart_url")
    @classmethod
    def _chart_url(cls, url: str) -> str:
        # What a HelmRepository takes: a Helm repository over http(s), or an OCI registry.
        found = _address(url, ("https", "http", "oci"))
        assert found is not None
        return found

    @field_validator("flux_manifests_url")
    @classmethod
    def _manifests_url(cls, url: str) -> str:
        found = _address(url, ("oci",))  # an OCIRepository's URL
        assert found is not None
        return found

    @field_validator("vcluster_image_registry")
    @classmethod
    def _image_registry(cls, registry: str | None) -> str | None:
        return None if registry is None else image_registry(registry)

    @field_validator("advisor_model_url")
    @classmethod
    def _model_url(cls, url: str | None) -> str | None:
        # The base of an OpenAI-compatible API: /chat/completions is added to it.
        return _address(url, ("http", "https"))

    @model_validator(mode="after")
    def _model_named(self) -> Settings:
        if self.advisor_model_url is not None and not self.advisor_model:
            raise ValueError(
                "SPACEDOCK_ADVISOR_MODEL must be set with SPACEDOCK_ADVISOR_MODEL_URL: the model "
                "the endpoint serves (e.g. gpt-4o-mini, llama3.1)"
            )
        return self

    @field_validator("admission_url")
    @classmethod
    def _admission_url(cls, url: str | None) -> str | None:
        # The API server calls webhooks over HTTPS only.
        return _address(url, ("https",))

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, url: str | None) -> str | None:
        return _address(url, ("http", "https"))

    @field_validator("admission_ca_file")
    @classmethod
    def _admission_ca(cls, path: str | None) -> str | None:
        if path is not None:
            _pem_of(path)
        return path

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
            raise _refusal(error) from None

    @property
    def cloudspaces(self) -> CloudSpaceSettings:
        return CloudSpaceSettings(
            default_host_space=self.default_host_space,
            default_cpu=self.default_cloudspace_cpu,
            default_memory_mib=self.default_cloudspace_memory_mib,
            control_plane_cpu=self.vcluster_control_plane_cpu,
            control_plane_memory_mib=self.vcluster_control_plane_memory_mib,
            vcluster_url_template=self.vcluster_url_template,
            vcluster_chart_url=self.vcluster_chart_url,
            vcluster_chart_version=self.vcluster_chart_version,
            flux_manifests_url=self.flux_manifests_url,
            flux_manifests_tag=self.flux_manifests_tag,
            vcluster_image_registry=self.vcluster_image_registry,
            reconcile_interval_s=self.reconcile_interval_s,
            reconcile_lease_s=self.reconcile_lease_s,
            kubeconfig_ttl_s=self.kubeconfig_ttl_s,
            admission_url=self.admission_url,
            admission_ca_pem=None
            if self.admission_ca_file is None
            else _pem_of(self.admission_ca_file),
        )

    @property
    def apps(self) -> AppSettings:
        return AppSettings(
            status_interval_s=self.app_status_interval_s,
            retry_interval_s=self.app_retry_interval_s,
        )

    @property
    def advisor(self) -> AdvisorSettings:
        model = None
        if self.advisor_model_url is not None and self.advisor_model:
            key = self.advisor_model_api_key
            model = ModelSettings(
                url=self.advisor_model_url,
                model=self.advisor_model,
                api_key="" if key is None else key.get_secret_value(),
                concurrency=self.advisor_model_concurrency,
                timeout_s=self.advisor_model_timeout_s,
                calls_per_hour=self.advisor_model_calls_per_hour,
            )
        return AdvisorSettings(
            interval_s=self.advisor_interval_s,
            concurrency=self.advisor_concurrency,
            read_timeout_s=self.advisor_read_timeout_s,
            max_objects=self.advisor_max_objects,
            model=model,
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
