"""The Starlette application: GraphQL, GraphiQL assets, health and metrics, and the
lifespan that migrates the database and runs the background loops."""

from __future__ import annotations

import contextlib
import gc
import hmac
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from api import graphiql
from api.graphql_view import GraphQLView, TransportLimits
from api.kubeconfig_route import kubeconfig_endpoint
from api.settings import Settings
from api.shared_subscriptions import SharedSubscriptions
from core.events import EventBus, InProcessBus, PostgresBus
from core.health import HealthRule
from core.housekeeping import Housekeeping
from core.live_calls import LiveCallLimits, LiveCalls
from core.metrics import MetricSource, Sample, exposition
from core.probe_loop import ProbeLoop, ProbeSettings
from core.reconciler import Reconciler
from core.services import Services
from core.token_cache import TokenCache
from db.engine import Database
from db.notify import PostgresNotifier
from providers.oidc import OidcVerifier, Sso
from providers.probe import VersionProber

log = logging.getLogger("spacedock")


def build_services(settings: Settings, serving: bool = True) -> Services:
    """`serving`: for the server; False for a one-off command beside it (api.cli)."""
    database = Database(settings.database_url)
    # On Postgres, replicas share events through LISTEN/NOTIFY; SQLite means one process.
    bus: EventBus = (
        InProcessBus()
        if database.is_sqlite
        else PostgresBus(lambda deliver: PostgresNotifier(database, deliver))
    )
    return Services(
        database=database,
        bus=bus,
        secrets=settings.secret_box(),
        health=HealthRule(settings.probe_interval_s),
        deny_networks=settings.cluster_deny_cidrs,
        ambient_credential_orgs=settings.ambient_credential_orgs,
        cluster_max_body_bytes=settings.cluster_max_body_bytes,
        live_calls=LiveCalls(
            LiveCallLimits(
                per_request=settings.live_calls_per_request,
                concurrency_per_request=settings.live_call_concurrency,
                concurrency_per_server=settings.live_calls_per_server,
                items_per_request=settings.live_items_per_request,
            )
        ),
        cloudspaces=settings.cloudspaces,
        sso=None
        if settings.oidc_issuer is None or settings.oidc_audience is None
        else Sso(
            OidcVerifier(settings.oidc_issuer, settings.oidc_audience),
            settings.oidc_org_claim,
            settings.oidc_role_claim,
        ),
        live_field_timeout_s=settings.live_field_timeout_s,
        # A revocation waits out the TTL when another process may hold the token: always
        # for a command beside the server, and on Postgres, whose replicas share the data.
        token_cache=TokenCache(
            settings.token_cache_ttl_s, others_may_cache=not (serving and database.is_sqlite)
        ),
    )


def build_probe_loop(settings: Settings, services: Services) -> ProbeLoop:
    probe_settings = ProbeSettings(
        interval_s=settings.probe_interval_s,
        timeout_s=settings.probe_timeout_s,
        failure_threshold=max(1, settings.probe_failure_threshold),
        concurrency=max(1, settings.probe_concurrency),
    )
    prober = VersionProber(probe_settings.timeout_s, services.deny_networks)
    return ProbeLoop(services, prober, probe_settings)


@dataclass(frozen=True)
class ProcessMetrics:
    """What the process itself counts: SQL statements and event subscriptions."""

    services: Services
    shared: SharedSubscriptions

    def samples(self) -> list[Sample]:
        return [
            Sample(
                "spacedock_sql_statements_total",
                "counter",
                "SQL statements sent to the database.",
                self.services.database.statement_count,
            ),
            Sample(
                "spacedock_event_subscribers",
                "gauge",
                "Subscriptions receiving events in this process.",
                self.shared.listening_members,
            ),
            Sample(
                "spacedock_subscription_groups",
                "gauge",
                "Subscriptions run once for all who would see the same (one per group).",
                self.shared.group_count,
            ),
        ]


def metrics_allowed(request: Request, token: str | None) -> bool:
    """/metrics is open unless SPACEDOCK_METRICS_TOKEN is set; then it needs that bearer token."""
    if token is None:
        return True
    given = request.headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def cors(origins: tuple[str, ...]) -> list[Middleware]:
    """Browsers on these origins may call every HTTP route (GraphQL, the REST kubeconfig
    routes) with a bearer token; none when unset. WebSockets check their Origin in the
    GraphQL view, since browsers do not preflight them."""
    if not origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=list(origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            max_age=600,
        )
    ]


def create_app(settings: Settings) -> Starlette:
    services = build_services(settings)
    view = GraphQLView(
        services,
        TransportLimits(
            max_body_bytes=settings.max_body_bytes,
            read_timeout_s=settings.request_read_timeout_s,
            max_subscriptions_per_token=settings.max_subscriptions_per_token,
        ),
        allowed_origins=settings.cors_origins,
    )
    probes = build_probe_loop(settings, services)
    # Every background loop's stats join here; /metrics renders whatever is listed.
    housekeeping = Housekeeping(services, settings.audit_retention_days, view.sessions)
    reconciler = Reconciler(services)
    metric_sources: list[MetricSource] = [
        ProcessMetrics(services, view.shared),
        probes.stats,
        reconciler.stats,
        housekeeping.stats,
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await services.database.migrate()
        probes.start()
        housekeeping.start()
        reconciler.start()
        # What is loaded by now lives as long as the process. Out of the collector's reach,
        # it no longer makes every full collection pause requests for ~250 ms
        # (bench/graphql_reads.py: p95 of a 100-space read 280 ms before, ~70 ms after).
        gc.collect()
        gc.freeze()
        log.info("spacedock ready: GraphQL and GraphiQL at /graphql")
        try:
            yield
        finally:
            await probes.stop()
            await housekeeping.stop()
            await reconciler.stop()
            await services.database.dispose()

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        try:
            await services.database.ping()
        except Exception as error:  # any failure means "not ready"; the reason is logged
            log.warning("readiness check failed: %s", type(error).__name__)
            return JSONResponse(
                {"status": "unavailable", "database": "unreachable"}, status_code=503
            )
        return JSONResponse({"status": "ok", "database": "reachable"})

    async def metrics(request: Request) -> Response:
        if not metrics_allowed(request, settings.metrics_token):
            return JSONResponse(
                {
                    "errors": [
                        {
                            "message": "Send Authorization: Bearer <SPACEDOCK_METRICS_TOKEN>.",
                            "extensions": {"code": "UNAUTHENTICATED"},
                        }
                    ]
                },
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="spacedock-metrics"'},
            )
        return PlainTextResponse(exposition(metric_sources), media_type="text/plain; version=0.0.4")

    routes = [
        # Every method reaches the view, so that even a PUT is answered in JSON (405).
        Route("/graphql", view),
        WebSocketRoute("/graphql", view),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        Route(
            "/api/v1/cloudspaces/{id}/vclusters/{name}/kubeconfig",
            kubeconfig_endpoint(services),
            methods=["GET"],
        ),
    ]
    if graphiql.ASSETS.is_dir():
        routes.append(Mount("/graphiql", StaticFiles(directory=graphiql.ASSETS), name="graphiql"))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=cors(settings.cors_origins))
    app.state.services = services
    return app
