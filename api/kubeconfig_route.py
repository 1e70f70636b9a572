"""GET /api/v1/cloudspaces/{id}/vclusters/{name}/kubeconfig: a tenant kubeconfig as YAML.

Same bearer auth and policy as `VCluster.kubeconfig`: 401 without a valid token,
404 for an unknown or foreign CloudSpace (or vCluster name), 403 without
`cloudspace:kubeconfig`, 409 while the vCluster is not up, 502 when a cluster
cannot give one. Errors are GraphQL-shaped JSON with `extensions.code`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.graphql_view import unauthenticated
from core.auth import Unauthenticated, authenticate
from core.errors import ApiError
from core.services import Services
from resolvers import cloudspaces
from resolvers.context import Context

STATUS_OF = {"FORBIDDEN": 403, "PRECONDITION_FAILED": 409, "PROVIDER_ERROR": 502}


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"errors": [{"message": message, "extensions": {"code": code}}]}, status_code=status
    )


def kubeconfig_endpoint(services: Services) -> Callable[[Request], Awaitable[Response]]:
    async def download(request: Request) -> Response:
        try:
            viewer = await authenticate(services, request.headers.get("authorization"))
        except Unauthenticated as refused:
            return unauthenticated(refused.message)
        context = Context(services=services, viewer=viewer)
        try:
            minted = await cloudspaces.kubeconfig_download(
                context, request.path_params["id"], request.path_params["name"]
            )
        except ApiError as refused:
            return _error(STATUS_OF.get(refused.code, 400), refused.code, refused.message)
        if minted is None:
            return _error(404, "NOT_FOUND", "No such CloudSpace or vCluster.")
        return Response(
            minted.text,
            media_type="application/yaml",
            headers={
                "Cache-Control": "no-store",
                "X-Kubeconfig-Expires-At": minted.expires_at.isoformat(),
            },
        )

    return download
