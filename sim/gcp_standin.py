"""A Google Cloud stand-in: the OAuth2 token endpoint of service accounts and
the GKE Container API, over local HTTPS, checking what Google checks.

Use (the `gcp` fixture style of tests/test_standin_clouds.py):

    with GcpStandIn() as gcp:
        info = gcp.service_account("proj-a")       # a service-account JSON (dict)
        gcp.add_cluster("proj-a", "europe-west1", "prod", kube.url, kube.ca_pem)
        kube.accept_tokens_when(gcp.is_valid_access_token)
    # spacedock server process: env=gcp.env (SPACEDOCK_GCP_CONTAINER_ENDPOINT + trust)

- `service_account(project)` makes a key pair and returns the JSON a user
  downloads from Google (`type`, `project_id`, `private_key_id`,
  `private_key`, `client_email`, `token_uri` = `gcp.token_uri`). The account
  may read the Container API of that project only (403 elsewhere).
- Token endpoint (`POST /token`): the JWT-bearer grant. It verifies the RS256
  signature with the key named by the JWT's `kid` (or, without a `kid`, any
  live key of `iss`), `iss` = the key's `client_email`, `aud` = `token_uri`
  or Google's own `https://oauth2.googleapis.com/token` (google-auth always
  sends the latter, whatever `token_uri` says, and Google accepts it),
  `iat` not in the future and `exp` after now and at most an hour after
  `iat`, and a `scope` holding `https://www.googleapis.com/auth/cloud-platform`.
  It answers `{"access_token", "expires_in", "token_type"}` with
  `expires_in = token_lifetime_s` (settable), or Google's error bodies
  (`invalid_grant`, `invalid_scope`, `unsupported_grant_type`).
- Container API (base URL `gcp.url`, what spacedock reads from
  `SPACEDOCK_GCP_CONTAINER_ENDPOINT`): `GET /v1/projects/{p}/locations/-/clusters`,
  `GET /v1/projects/{p}/locations/{l}/clusters` and
  `GET /v1/projects/{p}/locations/{l}/clusters/{name}`, with a bearer access
  token this stand-in issued and that has not expired (401 UNAUTHENTICATED
  otherwise). A cluster's `endpoint` is, as on GKE, the host without a scheme
  (`127.0.0.1:PORT`, plus any path prefix of the Kubernetes stand-in URL), so
  the server URL is `https://{endpoint}`; `masterAuth.clusterCaCertificate` is
  the base64 of the CA PEM. An empty list is `{}`, as Google answers it.
- Switches: `throttle(times)` answers the next `times` Container API calls
  with 429 RESOURCE_EXHAUSTED (default: until `heal()`);
  `reject_credentials = True` makes the token endpoint answer `invalid_grant`
  to everyone; `revoke_key(info)` deletes one key (its grants fail with
  "Invalid JWT Signature."; tokens issued before stay valid until they expire,
  as at Google).
- Trust: google-auth's sync transport (`google.auth.transport.requests`)
  honours `REQUESTS_CA_BUNDLE` (requests ignores `SSL_CERT_FILE`); the async
  transports (`google.auth.transport._aiohttp_requests`,
  `google.auth.aio.transport.aiohttp`) use aiohttp's default context, which
  aiohttp builds when it is imported, so `SSL_CERT_FILE` counts only if it is
  set before the process starts; in-process, pass a session whose connector
  has `ssl=gcp.client_ssl_context()`.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import sys
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from sim.https_standin import HttpsStandIn

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
MAX_ASSERTION_LIFETIME_S = 3600
CLOCK_SKEW_S = 300


@dataclass
class _Key:
    key_id: str
    client_email: str
    project: str
    public_key: rsa.RSAPublicKey
    revoked: bool = False


@dataclass
class _AccessToken:
    client_email: str
    project: str
    expires_at: float


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def google_error(code: int, status: str, message: str) -> web.Response:
    return web.json_response(
        {"error": {"code": code, "message": message, "status": status}}, status=code
    )


def oauth_error(error: str, description: str) -> web.Response:
    return web.json_response({"error": error, "error_description": description}, status=400)


class GcpStandIn(HttpsStandIn):
    name = "gcp-standin"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.token_lifetime_s = 3599
        self.reject_credentials = False
        self.throttled_calls = 0
        self._keys: dict[str, _Key] = {}
        self._tokens: dict[str, _AccessToken] = {}
        self._clusters: dict[tuple[str, str, str], dict[str, Any]] = {}

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    @property
    def env(self) -> dict[str, str]:
        """For a spacedock server process (the token endpoint is in each JSON)."""
        return {"SPACEDOCK_GCP_CONTAINER_ENDPOINT": self.url, **self.trust_env}

    # -- what tests set up ------------------------------------------------
    def service_account(self, project: str, name: str = "spacedock") -> dict[str, str]:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_id = secrets.token_hex(20)
        client_email = f"{name}-{secrets.token_hex(3)}@{project}.iam.gserviceaccount.com"
        self._keys[key_id] = _Key(key_id, client_email, project, key.public_key())
        return {
            "type": "service_account",
            "project_id": project,
            "private_key_id": key_id,
            "private_key": key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode(),
            "client_email": client_email,
            "client_id": str(secrets.randbelow(10**20)),
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": self.token_uri,
            "universe_domain": "googleapis.com",
        }

    def revoke_key(self, info: dict[str, str]) -> None:
        self._keys[info["private_key_id"]].revoked = True

    def add_cluster(
        self,
        project: str,
        location: str,
        name: str,
        server_url: str,
        ca_pem: str,
        version: str = "1.31.2-gke.1000",
    ) -> None:
        """A GKE cluster whose API server is `server_url` (a Kubernetes stand-in)."""
        parts = urlsplit(server_url)
        self._clusters[(project, location, name)] = {
            "name": name,
            "location": location,
            "zone": location,
            "endpoint": parts.netloc + parts.path.rstrip("/"),
            "masterAuth": {"clusterCaCertificate": base64.b64encode(ca_pem.encode()).decode()},
            "currentMasterVersion": version,
            "currentNodeVersion": version,
            "status": "RUNNING",
            "selfLink": f"{self.url}/v1/projects/{project}/locations/{location}/clusters/{name}",
            "id": secrets.token_hex(16),
        }

    def remove_cluster(self, project: str, location: str, name: str) -> None:
        del self._clusters[(project, location, name)]

    def throttle(self, times: int = sys.maxsize) -> None:
        self.throttled_calls = times

    def heal(self) -> None:
        self.throttled_calls = 0
        self.reject_credentials = False

    def is_valid_access_token(self, token: str) -> bool:
        """For the Kubernetes stand-in: a GKE bearer token this stand-in issued, unexpired."""
        issued = self._tokens.get(token)
        return issued is not None and issued.expires_at > time.time()

    # -- the API ------------------------------------------------------------
    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/token", self._token),
            web.get("/v1/projects/{project}/locations/{location}/clusters", self._list),
            web.get("/v1/projects/{project}/locations/{location}/clusters/{name}", self._get),
        ]

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != JWT_BEARER:
            return oauth_error("unsupported_grant_type", "Invalid grant_type.")
        assertion = form.get("assertion")
        if not isinstance(assertion, str):
            return oauth_error("invalid_request", "Missing required parameter: assertion")
        if self.reject_credentials:
            return oauth_error("invalid_grant", "Invalid grant: account not found")
        verified = self._verify(assertion)
        if isinstance(verified, web.Response):
            return verified
        key, claims = verified
        if CLOUD_PLATFORM_SCOPE not in str(claims.get("scope", "")).split():
            return oauth_error(
                "invalid_scope", "Invalid OAuth scope or ID token audience provided."
            )
        token = "ya29.standin-" + secrets.token_urlsafe(32)
        expires_at = time.time() + self.token_lifetime_s
        self._tokens[token] = _AccessToken(key.client_email, key.project, expires_at)
        return web.json_response(
            {"access_token": token, "expires_in": self.token_lifetime_s, "token_type": "Bearer"}
        )

    def _verify(self, assertion: str) -> tuple[_Key, dict[str, Any]] | web.Response:
        """The live key that signed the assertion and its claims, or Google's error."""
        bad_signature = oauth_error("invalid_grant", "Invalid JWT Signature.")
        try:
            header_b64, payload_b64, signature_b64 = assertion.split(".")
            header = json.loads(_b64url_decode(header_b64))
            claims = json.loads(_b64url_decode(payload_b64))
            signature = _b64url_decode(signature_b64)
        except (ValueError, binascii.Error):
            return oauth_error("invalid_grant", "Invalid JWT: malformed assertion.")
        if header.get("alg") != "RS256" or not isinstance(claims, dict):
            return bad_signature
        candidates = [
            k
            for k in self._keys.values()
            if not k.revoked
            and k.client_email == claims.get("iss")
            and header.get("kid") in (None, k.key_id)
        ]
        signed = f"{header_b64}.{payload_b64}".encode()
        for key in candidates:
            try:
                key.public_key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
                break
            except InvalidSignature:
                continue
        else:
            return bad_signature
        if claims.get("aud") not in (self.token_uri, GOOGLE_TOKEN_AUDIENCE):
            return oauth_error("invalid_grant", "Invalid JWT: audience mismatch.")
        now = time.time()
        iat, exp = claims.get("iat"), claims.get("exp")
        if (
            not isinstance(iat, int)
            or not isinstance(exp, int)
            or iat > now + CLOCK_SKEW_S
            or exp <= now
            or exp - iat > MAX_ASSERTION_LIFETIME_S
        ):
            return oauth_error(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a "
                "reasonable timeframe. Check your iat and exp values in the JWT claim.",
            )
        return key, claims

    def _caller(self, request: web.Request) -> _AccessToken | web.Response:
        """The token's account, or the error Google answers."""
        header = request.headers.get("Authorization", "")
        issued = self._tokens.get(header[7:]) if header.startswith("Bearer ") else None
        if issued is None or issued.expires_at <= time.time():
            return google_error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access "
                "token, login cookie or other valid authentication credential.",
            )
        if self.throttled_calls > 0:
            self.throttled_calls -= 1
            return google_error(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for quota metric 'Read requests' of service "
                "'container.googleapis.com'.",
            )
        if issued.project != request.match_info["project"]:
            return google_error(
                403,
                "PERMISSION_DENIED",
                f"Required 'container.clusters.list' permission for "
                f"'projects/{request.match_info['project']}'.",
            )
        return issued

    async def _list(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        if isinstance(caller, web.Response):
            return caller
        project, location = request.match_info["project"], request.match_info["location"]
        clusters = [
            cluster
            for (p, loc, _), cluster in sorted(self._clusters.items())
            if p == project and location in ("-", loc)
        ]
        return web.json_response({"clusters": clusters} if clusters else {})

    async def _get(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        if isinstance(caller, web.Response):
            return caller
        key = (
            request.match_info["project"],
            request.match_info["location"],
            request.match_info["name"],
        )
        if key not in self._clusters:
            return google_error(
                404,
                "NOT_FOUND",
                f"Not found: projects/{key[0]}/locations/{key[1]}/clusters/{key[2]}.",
            )
        return web.json_response(self._clusters[key])
