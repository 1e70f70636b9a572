"""POST /api/v1/admission/{id}/{vcluster}/{secret}: the strict-quota webhook a CloudSpace's
vClusters call (core.cloudspaces.admission).

It answers an AdmissionReview v1 for its uid, allowed or refused with the numbers. A
body that is no AdmissionReview is 400; a path whose secret is not that vCluster's is a
refusal that changes nothing. It answers within 80% of the `?timeout=` the API server
sends: past that, a refusal to try again. While the database is away it answers 503 and
the webhook's failurePolicy (Ignore) applies, as when spacedock cannot be reached at all.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from cross_web import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.http_requests import TransportLimits, error_response, read_body
from core.cloudspaces import admission
from core.cloudspaces.admission_review import MalformedReview, response
from core.common.services import Services

log = logging.getLogger("spacedock.admission")

# A review holds the object and its old state; etcd keeps objects up to 1.5 MiB each.
LIMITS = TransportLimits(max_body_bytes=4 * 2**20, read_timeout_s=5.0)
SHARE_OF_TIMEOUT = 0.8


def _deadline_s(request: Request) -> float:
    """80% of the API server's `?timeout=5s` (10 s when absent, as its default)."""
    given = request.query_params.get("timeout", "")
    try:
        seconds = float(given.removesuffix("s")) if given.endswith("s") else 10.0
    except ValueError:
        seconds = 10.0
    return SHARE_OF_TIMEOUT * min(max(seconds, 1.0), 30.0)


def admission_endpoint(
    services: Services, admissions: admission.Admissions
) -> Callable[[Request], Awaitable[Response]]:
    async def review(request: Request) -> Response:
        try:
            body = await read_body(request, LIMITS)
        except HTTPException as refused:
            return error_response(refused.status_code, "BAD_REQUEST", refused.reason)
        try:
            asked = admission.review(admissions, orjson.loads(body))
        except orjson.JSONDecodeError:
            admissions.stats.malformed += 1
            return error_response(400, "BAD_REQUEST", "The body is not JSON.")
        except MalformedReview as malformed:
            return error_response(400, "BAD_REQUEST", str(malformed))
        params = request.path_params
        verdict = await admission.answer(
            services,
            admissions,
            params["id"],
            params["vcluster"],
            params["secret"],
            asked,
            _deadline_s(request),
        )
        if verdict is admission.TOO_LATE:
            log.warning("an admission review of CloudSpace %s took too long", params["id"])
        return JSONResponse(response(asked.uid, verdict))

    return review
