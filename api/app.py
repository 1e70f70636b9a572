"""The Starlette application: GraphQL, GraphiQL assets, health and metrics, and the
lifespan that migrates the database and runs the background loops."""

from __future__ import annotations

import contextlib
import gc
import hmac
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from api import graphiql
from api.graphql_view import GraphQLView, TransportLimits
from api.kubeconfig_route import kubeconfig_endpoint
from api.settings import Settings
from core.events import EventBus, InProcessBus, PostgresBus
from core.health import HealthRule
from core.probe_loop import ProbeLoop, ProbeSettings, ProbeStats
from core.services import Services
from db.engine import Database
from db.notify import PostgresNotifier
from providers.probe import VersionProber

log = logging.getLogger("spacedock")


def build_services(settings: Settings) -> Services:
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
        cloudspaces=settings.cloudspaces,
    )


def build_probe_loop(settings: Settings, services: Services) -> ProbeLoop:
    return ProbeLoop(
        services,
        VersionProber(settings.probe_timeout_s, services.deny_networks),
        ProbeSettings(
            interval_s=settings.probe_interval_s,
            timeout_s=settings.probe_timeout_s,
            failure_threshold=max(1, settings.probe_failure_threshold),
            concurrency=max(1, settings.probe_concurrency),
        ),
    )


Sample = tuple[str, str, str, int]  # name, type, help, value


def exposition(samples: list[Sample]) -> str:
    """Prometheus text format."""
    lines: list[str] = []
    for name, kind, help_text, value in samples:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return "\n".join(lines) + "\n"


def samples(services: Services, stats: ProbeStats) -> list[Sample]:
    return [
        (
            "spacedock_sql_statements_total",
            "counter",
            "SQL statements sent to the database.",
            services.database.statement_count,
        ),
        (
            "spacedock_event_subscribers",
            "gauge",
            "Event-bus subscriptions open in this process.",
            services.bus.subscriber_count,
        ),
        ("spacedock_probes_total", "counter", "Probes that gave a result.", stats.probes),
        ("spacedock_probe_failures_total", "counter", "Probes that failed.", stats.failures),
        (
            "spacedock_probe_transitions_total",
            "counter",
            "Status transitions the probes caused.",
            stats.transitions,
        ),
        (
            "spacedock_probe_loop_errors_total",
            "counter",
            "Probe loop steps or probes that failed for a reason other than the cluster.",
            stats.errors,
        ),
        ("spacedock_probes_in_flight", "gauge", "Probes running now.", stats.in_flight),
    ]


def metrics_allowed(request: Request, token: str | None) -> bool:
    """/metrics is open unless SPACEDOCK_METRICS_TOKEN is set; then it needs that bearer token."""
    if token is None:
        return True
    given = request.headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def create_app(settings: Settings) -> Starlette:
    services = build_services(settings)
    view = GraphQLView(
        services,
        TransportLimits(
            max_body_bytes=settings.max_body_bytes,
            read_timeout_s=settings.request_read_timeout_s,
            max_subscriptions_per_token=settings.max_subscriptions_per_token,
        ),
    )
    probes = build_probe_loop(settings, services)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await services.database.migrate()
        probes.start()
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
        return PlainTextResponse(
            exposition(samples(services, probes.stats)), media_type="text/plain; version=0.0.4"
        )

    routes = [
        Route("/graphql", view, methods=["GET", "POST"]),
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
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.services = services
    return app
