"""GET /api/v1/cloudspaces/{id}/vclusters/{name}/kubeconfig: a tenant kubeconfig of the
CloudSpace's vCluster `name` (its first is named like the CloudSpace) as YAML,
and GET …/credential: an ExecCredential for `spacedock kubeconfig-token`.

The kubeconfig comes as a file to keep (`Content-Disposition: attachment`, named like its
context). `?credential=token` (the default) carries a short-lived token, its expiry in
`X-Kubeconfig-Expires-At`; `?credential=exec` carries instead the exec plugin that runs
`spacedock kubeconfig-token` whenever kubectl needs a token, with `&tokenFile=PATH` naming
where the person keeps their API token (else SPACEDOCK_TOKEN or the default file).

Same bearer auth and policy as `VCluster.kubeconfig`: 401 without a valid token,
404 for an unknown or foreign CloudSpace (or vCluster name), 403 without
`cloudspace:kubeconfig`, 409 while the vCluster is not up, 502 when a cluster
cannot give one, 400 for a query parameter it cannot use. Errors are GraphQL-shaped
JSON with `extensions.code`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.http_requests import error_response, unauthenticated
from core.access.auth import Unauthenticated, authenticate
from core.cloudspaces.host_access import MintedKubeconfig
from core.cloudspaces.kubeconfigs import ExecPlugin, exec_credential, kubeconfig_names
from core.common.errors import ApiError
from core.common.services import Services
from resolvers.cloudspaces import vclusters as vcluster_reads
from resolvers.common.context import Context
from schema.common.scalars import datetime_text

STATUS_OF = {"FORBIDDEN": 403, "PRECONDITION_FAILED": 409, "PROVIDER_ERROR": 502}
MAX_PATH_CHARS = 1024


class BadQuery(ValueError):
    """A query parameter the route cannot use; the message says which and why."""


def plugin_of(request: Request, spacedock_url: str | None) -> ExecPlugin | None:
    """The exec plugin form asked for, or None for the token form; BadQuery otherwise."""
    query = request.query_params
    credential = query.get("credential", "token")
    if credential not in ("token", "exec"):
        raise BadQuery(f"credential must be token or exec, not {credential[:40]!r}")
    token_file = query.get("tokenFile")
    if credential == "token":
        if token_file is not None:
            raise BadQuery("tokenFile goes with credential=exec")
        return None
    if token_file is not None and (
        not token_file or len(token_file) > MAX_PATH_CHARS or not token_file.isprintable()
    ):
        raise BadQuery(f"tokenFile must be a file path of at most {MAX_PATH_CHARS} characters")
    return ExecPlugin(spacedock_url or str(request.base_url).rstrip("/"), token_file)


async def _context(services: Services, request: Request) -> Context | Response:
    try:
        viewer = await authenticate(services, request.headers.get("authorization"))
    except Unauthenticated as refused:
        return unauthenticated(refused.message, "authorization" in request.headers)
    return Context(services=services, viewer=viewer)


async def _minted(
    context: Context, request: Request, plugin: ExecPlugin | None
) -> MintedKubeconfig | Response:
    """The kubeconfig for the route's CloudSpace and vCluster, or the refusal to answer."""
    try:
        minted = await vcluster_reads.kubeconfig_download(
            context, request.path_params["id"], request.path_params["name"], plugin
        )
    except ApiError as refused:
        return error_response(STATUS_OF.get(refused.code, 400), refused.code, refused.message)
    if minted is None:
        return error_response(404, "NOT_FOUND", "No such CloudSpace or vCluster.")
    return minted


def kubeconfig_endpoint(
    services: Services, spacedock_url: str | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """`spacedock_url`: the address exec plugins call (SPACEDOCK_PUBLIC_URL); None: the
    address the download was asked at."""

    async def download(request: Request) -> Response:
        context = await _context(services, request)
        if isinstance(context, Response):
            return context
        try:
            plugin = plugin_of(request, spacedock_url)
        except BadQuery as bad:
            return error_response(400, "BAD_REQUEST", str(bad))
        minted = await _minted(context, request, plugin)
        if isinstance(minted, Response):
            return minted
        _, _, named = kubeconfig_names(request.path_params["id"], request.path_params["name"])
        headers = {
            "Cache-Control": "no-store",
            "Content-Disposition": f'attachment; filename="{named}.kubeconfig"',
        }
        if minted.expires_at is not None:
            headers["X-Kubeconfig-Expires-At"] = datetime_text(minted.expires_at)
        return Response(minted.text, media_type="application/yaml", headers=headers)

    return download


def credential_endpoint(services: Services) -> Callable[[Request], Awaitable[Response]]:
    async def credential(request: Request) -> Response:
        context = await _context(services, request)
        if isinstance(context, Response):
            return context
        minted = await _minted(context, request, None)
        if isinstance(minted, Response):
            return minted
        assert minted.token is not None and minted.expires_at is not None
        body: dict[str, Any] = exec_credential(minted.token, minted.expires_at)
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    return credential
