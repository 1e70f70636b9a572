"""An AWS stand-in for EKS: moto's server (EKS, STS, IAM) in this process,
with real IAM authentication, EKS clusters whose endpoint and CA point at a
Kubernetes stand-in, a throttling switch, and a checker of EKS bearer tokens.

Use (see tests/test_standin_clouds.py):

    with EksStandIn() as aws:
        key = aws.user()                                   # IAM user + access key
        aws.add_cluster("eu-west-1", "prod", kube.url, kube.ca_pem)
        kube.accept_tokens_when(aws.token_check("prod"))
    # spacedock: env AWS_ENDPOINT_URL=aws.url (see `aws.env`), key.access_key_id /
    # key.secret_access_key as the account's credentials

- moto runs as its own WSGI server thread on 127.0.0.1 (what moto's
  `ThreadedMotoServer` does, plus a throttling wrapper), plain http at
  `aws.url`; point every AWS client there with `AWS_ENDPOINT_URL` (or the
  per-service `AWS_ENDPOINT_URL_EKS` / `_STS`). Backends live in this process,
  so tests set clusters up directly and a spacedock server process sees them.
- IAM authentication is on while the stand-in runs: every call must be
  SigV4-signed by a live access key (unknown or deleted key:
  `InvalidClientTokenId`; wrong secret: `SignatureDoesNotMatch`) whose
  policies allow the action (else `AccessDenied`; `sts:GetCallerIdentity` is
  always allowed, as on AWS). `user()` allows `EKS_READ` (eks:ListClusters,
  eks:DescribeCluster, sts:AssumeRole); `role(account_id)` makes a role
  (any principal may assume it) with the same rights in another account, so
  an assumed role sees that account's clusters. (moto verifies the signature
  of a GET wrongly; `start()` corrects that one method.)
- moto's backends and settings are process-wide: several stand-ins may run at
  once (a session-wide one and a module's own), authentication stays on until
  the last one stops, and `stop()` removes only the users, roles and clusters
  that stand-in made. `aws.env` also points `AWS_CONFIG_FILE` and
  `AWS_SHARED_CREDENTIALS_FILE` at /dev/null and disables the instance
  metadata service, so a server's default chain finds only what a test sets.
- `add_cluster(region, name, server_url, ca_pem, account_id=…)`: an ACTIVE
  cluster whose `endpoint` is `server_url` and `certificateAuthority.data`
  is base64 of the CA PEM, as EKS answers.
- Switches: `throttle(times)` answers the next `times` EKS calls with 429
  `ThrottlingException` "Rate exceeded" (default: until `heal()`; botocore
  retries throttling itself, so each retry takes one); `revoke(key)` deletes
  an access key.
- Tokens: `token_problem(token, cluster)` says why a bearer token is not an
  EKS token for `cluster`, or None when it is. It checks the structure as
  aws-iam-authenticator does (the `k8s-aws-v1.` prefix, base64url without
  padding, an https URL on an STS host, `sts.amazonaws.com` or
  `sts.<region>.amazonaws.com`, presigning `GetCallerIdentity` with
  `X-Amz-Expires`, a `X-Amz-Date` less than 15 minutes old, `host` and
  `x-k8s-aws-id` among the signed headers), then recomputes the SigV4
  signature with the secret moto holds for the URL's access key and
  `x-k8s-aws-id: <cluster>`, which is what makes the token name this very
  cluster (AWS checks it by calling STS with that header). No STS call is
  made; a token from a deleted key fails. `aws.token_check(cluster)` wraps it
  for `KubeStandIn.accept_tokens_when`; `aws.token_check()` accepts a token
  naming any cluster moto holds (for one Kubernetes stand-in playing many
  clusters, where the binding to one cluster is not checked).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from moto import settings
from moto.eks.models import eks_backends
from moto.iam import access_control
from moto.iam.models import get_account_id_from, iam_backends
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

from sim import server_name
from sim.ports import HeldPort

DEFAULT_ACCOUNT = "123456789012"
EKS_READ = ("eks:ListClusters", "eks:DescribeCluster", "sts:AssumeRole")
TOKEN_PREFIX = "k8s-aws-v1."
STS_HOST = re.compile(r"^sts(\.[a-z0-9-]+)?\.amazonaws\.com$")
TOKEN_LIFETIME = dt.timedelta(minutes=15)
CLOCK_SKEW = dt.timedelta(minutes=5)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class AccessKey:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    user_name: str
    account_id: str


def _policy(actions: Iterable[str]) -> str:
    statement = {"Effect": "Allow", "Action": list(actions), "Resource": "*"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def _create_aws_request_fixed(self: Any) -> AWSRequest:
    """moto's own method, except that a GET signs an empty payload (moto puts the
    parsed query there, so every signed GET fails)."""
    request: AWSRequest = _ORIGINAL_CREATE_AWS_REQUEST(self)
    if self._method == "GET":
        request.data = b""
    return request


_ORIGINAL_CREATE_AWS_REQUEST = access_control.IAMRequestBase._create_aws_request
_RUNNING: list[EksStandIn] = []  # moto's settings are process-wide: set while any runs
_AUTH_COUNT_BEFORE: list[float] = []


class _NamedHandler(MotoRequestHandler):  # type: ignore[misc]
    server_version = server_name.header("EksStandIn")
    sys_version = ""


class EksStandIn:
    def __init__(self) -> None:
        self._port = HeldPort()
        self.port = self._port.number
        self.throttled_calls = 0
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._undo: list[Callable[[], None]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """For a spacedock server process: every AWS call goes to moto, and the
        default credential chain never reads this machine's files nor asks the
        instance metadata service."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    # -- lifecycle -------------------------------------------------------
    def start(self) -> EksStandIn:
        app = DomainDispatcherApplication(create_backend_app)
        held = self._port.take()
        assert held is not None, "an EKS stand-in starts once"
        with held:  # werkzeug serves a duplicate of it
            held.listen()
            self._server = make_server(
                "127.0.0.1",
                self.port,
                self._throttling(app),
                threaded=True,
                request_handler=_NamedHandler,
                fd=held.fileno(),
            )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="eks-standin", daemon=True
        )
        self._thread.start()
        if not _RUNNING:
            _AUTH_COUNT_BEFORE[:] = [settings.INITIAL_NO_AUTH_ACTION_COUNT]
            access_control.IAMRequestBase._create_aws_request = _create_aws_request_fixed  # type: ignore[method-assign]
            settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        _RUNNING.append(self)
        return self

    def stop(self) -> None:
        """Stops serving and removes what this stand-in made (users, roles,
        clusters); moto's backends are shared by every stand-in of the process."""
        self._port.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for undo in reversed(self._undo):
            undo()
        _RUNNING.remove(self)
        if not _RUNNING:
            settings.INITIAL_NO_AUTH_ACTION_COUNT = _AUTH_COUNT_BEFORE[0]
            access_control.IAMRequestBase._create_aws_request = _ORIGINAL_CREATE_AWS_REQUEST  # type: ignore[method-assign]

    def __enter__(self) -> EksStandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _throttling(self, app: WsgiApp) -> WsgiApp:
        def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if self.throttled_calls > 0 and environ.get("PATH_INFO", "").startswith("/clusters"):
                self.throttled_calls -= 1
                start_response(
                    "429 Too Many Requests",
                    [
                        ("Content-Type", "application/json"),
                        ("x-amzn-ErrorType", "ThrottlingException"),
                    ],
                )
                return [json.dumps({"message": "Rate exceeded"}).encode()]
            return app(environ, start_response)

        return wrapped

    # -- what tests set up ------------------------------------------------
    def user(
        self,
        name: str | None = None,
        account_id: str = DEFAULT_ACCOUNT,
        actions: Iterable[str] = EKS_READ,
    ) -> AccessKey:
        """An IAM user allowed `actions`, with a fresh access key."""
        iam = iam_backends[account_id]["aws"]
        user_name = name or f"spacedock-{uuid.uuid4().hex[:8]}"
        iam.create_user(region_name="us-east-1", user_name=user_name)
        iam.put_user_policy(user_name, "spacedock", _policy(actions))
        key = iam.create_access_key(user_name)

        def delete_user() -> None:
            for left in iam.list_access_keys(user_name):
                iam.delete_access_key(left.access_key_id, user_name)
            iam.delete_user_policy(user_name, "spacedock")
            iam.delete_user(user_name)

        self._undo.append(delete_user)
        return AccessKey(key.access_key_id, key.secret_access_key, user_name, account_id)

    def role(
        self, account_id: str, name: str | None = None, actions: Iterable[str] = EKS_READ
    ) -> str:
        """A role in `account_id` that any principal may assume; its ARN."""
        iam = iam_backends[account_id]["aws"]
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
            ],
        }
        role = iam.create_role(
            role_name=name or f"spacedock-{uuid.uuid4().hex[:8]}",
            assume_role_policy_document=json.dumps(trust),
            path="/",
            permissions_boundary=None,
            description="spacedock discovery",
            tags=[],
            max_session_duration=None,
        )
        iam.put_role_policy(role.name, "spacedock", _policy(actions))

        def delete_role() -> None:
            iam.delete_role_policy(role.name, "spacedock")
            iam.delete_role(role.name)

        self._undo.append(delete_role)
        arn: str = role.arn
        return arn

    def revoke(self, key: AccessKey) -> None:
        iam_backends[key.account_id]["aws"].delete_access_key(key.access_key_id, key.user_name)

    def add_cluster(
        self,
        region: str,
        name: str,
        server_url: str,
        ca_pem: str,
        account_id: str = DEFAULT_ACCOUNT,
        version: str = "1.31",
    ) -> None:
        cluster = eks_backends[account_id][region].create_cluster(
            name=name,
            role_arn=f"arn:aws:iam::{account_id}:role/eks-cluster",
            resources_vpc_config={"subnetIds": [], "endpointPublicAccess": True},
            version=version,
        )
        cluster.endpoint = server_url.rstrip("/")
        cluster.certificate_authority = {"data": base64.b64encode(ca_pem.encode()).decode()}
        self._undo.append(lambda: self.remove_cluster(region, name, account_id))

    def remove_cluster(self, region: str, name: str, account_id: str = DEFAULT_ACCOUNT) -> None:
        eks_backends[account_id][region].clusters.pop(name, None)

    def throttle(self, times: int = sys.maxsize) -> None:
        self.throttled_calls = times

    def heal(self) -> None:
        self.throttled_calls = 0

    # -- tokens ---------------------------------------------------------------
    def token_check(self, cluster: str | None = None) -> Callable[[str], bool]:
        """Yes to an EKS token naming `cluster`, or any cluster moto holds when None."""
        if cluster is not None:
            return lambda token: token_problem(token, cluster) is None
        return lambda token: any(token_problem(token, name) is None for name in _cluster_names())


def _cluster_names() -> set[str]:
    return {
        name
        for regions in list(eks_backends.values())
        for backend in list(regions.values())
        for name in list(backend.clusters)
    }


def token_problem(token: str, cluster: str, now: dt.datetime | None = None) -> str | None:
    """Why `token` is not a valid EKS bearer token for `cluster`; None if it is."""
    if not token.startswith(TOKEN_PREFIX):
        return f"no {TOKEN_PREFIX} prefix"
    encoded = token.removeprefix(TOKEN_PREFIX)
    if "=" in encoded:
        return "base64url padding in the token"
    try:
        url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return "not base64url"
    parts = urlsplit(url)
    if parts.scheme != "https" or not STS_HOST.match(parts.netloc):
        return "not an STS host"
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if query.get("Action") != "GetCallerIdentity" or query.get("Version") != "2011-06-15":
        return "not an STS GetCallerIdentity URL"
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" or "X-Amz-Signature" not in query:
        return "not a presigned SigV4 URL"
    if not query.get("X-Amz-Expires", "").isdigit():
        return "no X-Amz-Expires"
    signed_headers = query.get("X-Amz-SignedHeaders", "").split(";")
    if "x-k8s-aws-id" not in signed_headers or "host" not in signed_headers:
        return "x-k8s-aws-id is not a signed header"
    try:
        signed_at = dt.datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(
            tzinfo=dt.UTC
        )
        access_key_id, _, region, service, _ = query["X-Amz-Credential"].split("/")
    except (KeyError, ValueError):
        return "malformed X-Amz-Date or X-Amz-Credential"
    now = now or dt.datetime.now(dt.UTC)
    if not now - TOKEN_LIFETIME <= signed_at <= now + CLOCK_SKEW:
        return "expired"
    if service != "sts":
        return "not signed for STS"
    if not _signature_matches(parts, query, access_key_id, region, cluster):
        return "signature does not match this cluster's name or a live key"
    return None


def _signature_matches(
    parts: SplitResult, query: dict[str, str], access_key_id: str, region: str, cluster: str
) -> bool:
    headers = (
        {"X-Amz-Security-Token": query["X-Amz-Security-Token"]}
        if "X-Amz-Security-Token" in query
        else {}
    )
    try:
        key = access_control.create_access_key(
            account_id=get_account_id_from(access_key_id),
            partition="aws",
            access_key_id=access_key_id,
            headers=headers,
        )
    except access_control.CreateAccessKeyFailure:
        return False
    unsigned = urlencode([(k, v) for k, v in query.items() if k != "X-Amz-Signature"])
    request = AWSRequest(
        method="GET",
        url=urlunsplit((parts.scheme, parts.netloc, parts.path, unsigned, "")),
        headers={"x-k8s-aws-id": cluster},
    )
    request.context["timestamp"] = query["X-Amz-Date"]
    auth = SigV4QueryAuth(key.create_credentials(), "sts", region, int(query["X-Amz-Expires"]))
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    return bool(expected == query["X-Amz-Signature"])
