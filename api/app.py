"""The Starlette application: GraphQL, GraphiQL assets, health and metrics, and the
lifespan that migrates the database and runs the background loops."""

from __future__ import annotations

import contextlib
import gc
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import graphiql
from api.admission_route import admission_endpoint
from api.cors import Cors
from api.graphql_view import GraphQLView
from api.hand_over import HandOver
from api.http_requests import (
    INTERNAL_SERVER_ERROR,
    TransportLimits,
    database_unavailable,
    error_response,
)
from api.kubeconfig_route import credential_endpoint, kubeconfig_endpoint
from api.logs import RequestIds, logged_path
from api.settings import Settings
from api.shared_subscriptions import SharedSubscriptions
from core.access.housekeeping import Housekeeping
from core.advisor.loop import Advisor
from core.apps.delivery import Delivery
from core.apps.targets import Reaches
from core.apps.watch import StatusLoop
from core.cloudspaces.admission import Admissions
from core.cloudspaces.reconciler import Reconciler
from core.common.event_replay import DatabaseEventLog
from core.common.events import EventBus, InProcessBus
from core.common.live_calls import LiveCallLimits, LiveCalls
from core.common.metrics import Exposition, MetricSource, Sample
from core.common.postgres_bus import PostgresBus
from core.common.refused_calls import RefusedCalls
from core.common.services import Services
from core.common.token_cache import TokenCache
from core.probing.loop import ProbeLoop, ProbeSettings
from core.spaces.health import HealthRule
from db.engine import Database
from db.notify import PostgresNotifier
from db.outages import is_unavailable, outages
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
        else PostgresBus(
            lambda hearing: PostgresNotifier(
                database,
                hearing.deliver,
                hearing.lost,
                hearing.resumed,
                keepalive_s=settings.event_listen_keepalive_s,
            ),
            DatabaseEventLog(lambda: database.transaction(read_only=True)),
        )
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
            OidcVerifier(settings.oidc_issuer, settings.oidc_audience, settings.cluster_deny_cidrs),
            settings.oidc_org_claim,
            settings.oidc_role_claim,
        ),
        live_field_timeout_s=settings.live_field_timeout_s,
        # A revocation waits out the TTL when another process may hold the token: always
        # for a command beside the server, and on Postgres, whose replicas share the data.
        refused_calls=RefusedCalls(settings.audit_refused_per_minute),
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


class Failures:
    """Every HTTP route answers a failure the way GraphQL does: while the database is
    unreachable a 503 SERVICE_UNAVAILABLE (one log warning per outage, no traceback), and a
    bug a JSON 500 INTERNAL_SERVER_ERROR, logged once. Before, a route other than /graphql
    (the kubeconfig download) answered an outage with Starlette's plain 500 and a
    traceback per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        def sending(message: Message) -> Awaitable[None]:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            return send(message)  # the server's own awaitable: no coroutine of ours per send

        try:
            await self.app(scope, receive, sending)
        except Exception as error:
            if started:  # too late to answer otherwise; the server closes the connection
                raise
            if is_unavailable(error):
                outages.failed(error)
                response: Response = database_unavailable()
            else:
                log.exception(
                    "unexpected error answering %s %s", scope["method"], logged_path(scope["path"])
                )
                response = error_response(500, INTERNAL_SERVER_ERROR, "Internal server error")
            await response(scope, receive, send)


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
    advisor = Advisor(services, settings.advisor)
    admissions = Admissions()
    # Apps: the delivery worker and the status loop share the way to each target cluster.
    reaches = Reaches(services, timeout_s=20.0)
    delivery = Delivery(services, settings.apps, reaches)
    app_status = StatusLoop(services, settings.apps, reaches)
    metric_sources: list[MetricSource] = [
        ProcessMetrics(services, view.shared),
        probes.stats,
        reconciler.stats,
        housekeeping.stats,
        advisor.stats,
        admissions.stats,
        delivery.stats,
        app_status.stats,
    ]
    if advisor.explainer is not None:
        metric_sources.append(advisor.explainer.stats)
    exposition = Exposition(metric_sources)

    hand_over = HandOver(
        [probes, reconciler, delivery, app_status, advisor], settings.shutdown_grace_s
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await services.database.migrate()
        probes.start()
        housekeeping.start()
        reconciler.start()
        advisor.start()
        delivery.start()
        app_status.start()
        # What is loaded by now lives as long as the process. Out of the collector's reach,
        # it no longer makes every full collection pause requests for ~250 ms
        # (bench/graphql_reads.py: p95 of a 100-space read 280 ms before, ~70 ms after).
        gc.collect()
        gc.freeze()
        if settings.secret_key is None:
            log.info(
                "development mode: credentials are sealed with the key in %s",
                settings.development_key_path(),
            )
        log.info("spacedock ready: GraphQL and GraphiQL at /graphql")
        try:
            yield
        finally:
            await hand_over.run()  # done already when a signal started the shutdown
            await housekeeping.stop()
            await services.database.dispose()

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if hand_over.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
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
        text, content_type = exposition.render(request.headers.get("accept"))
        return Response(text, headers={"Content-Type": content_type})

    routes = [
        # Every method reaches the view, so that even a PUT is answered in JSON (405).
        Route("/graphql", view),
        WebSocketRoute("/graphql", view),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        Route(
            "/api/v1/cloudspaces/{id}/vclusters/{name}/kubeconfig",
            kubeconfig_endpoint(services, settings.public_url),
            methods=["GET"],
        ),
        Route(
            "/api/v1/cloudspaces/{id}/vclusters/{name}/credential",
            credential_endpoint(services),
            methods=["GET"],
        ),
        # Called by the vClusters' API servers, never by browsers (no CORS needed).
        Route(
            "/api/v1/admission/{id}/{vcluster}/{secret}",
            admission_endpoint(services, admissions),
            methods=["POST"],
        ),
    ]
    if graphiql.ASSETS.is_dir():
        routes.append(Mount("/graphiql", StaticFiles(directory=graphiql.ASSETS), name="graphiql"))
    # Browsers on listed origins get CORS answers on every HTTP route (GraphQL, the REST
    # kubeconfig routes); others a refusal that says why (api.cors). WebSockets check their
    # Origin in the GraphQL view, since browsers do not preflight them. Every request runs
    # in a request scope of its own first (api.logs).
    middleware = [
        Middleware(RequestIds),
        Middleware(Cors, allowed=settings.cors_origins),
        Middleware(Failures),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.services = services
    app.state.hand_over = hand_over
    return app
