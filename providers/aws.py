"""AWS: EKS discovery with aioboto3 and EKS tokens signed by botocore.

An account is access keys (optionally with a session token) or, for the
platform's own org, the SDK's default chain ("ambient"); either may assume a
role on top. The EKS bearer token is `k8s-aws-v1.` + base64url (no padding)
of a presigned STS GetCallerIdentity URL that signs `x-k8s-aws-id: <cluster>`;
botocore's RequestSigner makes it without any network call. The standard
`AWS_ENDPOINT_URL*` variables redirect the API calls (botocore reads them).
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import aioboto3
from botocore.config import Config
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)
from botocore.hooks import HierarchicalEmitter
from botocore.model import ServiceId
from botocore.signers import RequestSigner

from providers.clouds import (
    CONNECT_TIMEOUT_S,
    READ_TIMEOUT_S,
    CloudCluster,
    ClusterLocation,
    Throttled,
    retry_throttled,
    scrub,
    secret_values,
)
from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError, ProviderError, TemporaryError

TOKEN_PREFIX = "k8s-aws-v1."
# EKS accepts a token for 15 minutes after signing; we stop using it a minute earlier.
TOKEN_LIFETIME = timedelta(minutes=14)
PRESIGN_EXPIRES_S = 60
THROTTLING = {
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "SlowDown",
}
CLIENT_CONFIG = Config(
    connect_timeout=CONNECT_TIMEOUT_S,
    read_timeout=READ_TIMEOUT_S,
    # Throttling is retried by retry_throttled (one schedule for every cloud), so botocore
    # makes each call once.
    retries={"mode": "standard", "max_attempts": 1},
)


def default_region() -> str:
    return os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"


def regions_of(credentials: Mapping[str, Any]) -> list[str]:
    """The regions an account discovers in: its `regions`, else the default region."""
    regions: list[str] = list(credentials.get("regions") or [default_region()])
    return regions


def _pem(ca_data: str | None) -> str:
    """EKS gives the CA as base64 of the PEM bundle."""
    if not ca_data:
        raise PermanentError("the EKS cluster reports no certificate authority yet; is it ACTIVE?")
    try:
        return base64.b64decode(ca_data).decode()
    except ValueError as error:
        raise PermanentError("the EKS cluster's certificate authority is not base64") from error


def eks_token(credentials: ReadOnlyCredentials, region: str, cluster_name: str) -> str:
    """The bearer token EKS accepts for `cluster_name`; signed locally, no network call."""
    emitter = HierarchicalEmitter()  # the signer holds it weakly: keep it alive here
    signer = RequestSigner(
        ServiceId("sts"),
        region,
        "sts",
        "v4",
        Credentials(credentials.access_key, credentials.secret_key, credentials.token),
        emitter,
    )
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster_name},
            "context": {},
        },
        region_name=region,
        expires_in=PRESIGN_EXPIRES_S,
        operation_name="",
    )
    encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return TOKEN_PREFIX + encoded


class AwsAdapter:
    async def verify(self, credentials: Mapping[str, Any]) -> None:
        doing = "verifying the credentials (STS GetCallerIdentity)"

        async def call() -> None:
            async with _calls(credentials, doing):
                session = await _session(credentials, default_region())
                async with session.client("sts", config=CLIENT_CONFIG) as sts:
                    await sts.get_caller_identity()

        await retry_throttled(call, doing)

    async def clusters(
        self, credentials: Mapping[str, Any], region: str | None
    ) -> list[CloudCluster]:
        found: list[CloudCluster] = []
        for each in [region] if region else regions_of(credentials):
            doing = f"listing EKS clusters in {each}"
            found += await retry_throttled(partial(_clusters_in, credentials, each, doing), doing)
        return found

    async def describe(
        self, credentials: Mapping[str, Any], location: ClusterLocation
    ) -> CloudCluster | None:
        region = location.region or default_region()
        doing = f"describing EKS cluster {location.name} in {region}"

        async def call() -> dict[str, Any] | None:
            async with _calls(credentials, doing):
                session = await _session(credentials, region)
                async with session.client("eks", config=CLIENT_CONFIG) as eks:
                    return await _describe(eks, location.name)

        described = await retry_throttled(call, doing)
        return None if described is None else _cluster(described, region)

    async def mint(
        self, credentials: Mapping[str, Any], location: ClusterLocation
    ) -> ClusterCredentials:
        region = location.region or default_region()
        doing = f"minting a token for EKS cluster {location.name}"

        async def call() -> ClusterCredentials:
            async with _calls(credentials, doing):
                session = await _session(credentials, region)
                async with session.client("eks", config=CLIENT_CONFIG) as eks:
                    described = await _describe(eks, location.name)
                if described is None:
                    raise PermanentError(
                        f"no EKS cluster {location.name} in {region} on this account; "
                        "was it deleted?"
                    )
                resolved = await session.get_credentials()
                if resolved is None:
                    raise NoCredentialsError()
                frozen = await resolved.get_frozen_credentials()
                endpoint = described.get("endpoint")
                if not endpoint:
                    raise PermanentError(
                        f"EKS cluster {location.name} has no endpoint yet; is it ACTIVE?"
                    )
                return ClusterCredentials(
                    server=endpoint.rstrip("/"),
                    ca_pem=_pem((described.get("certificateAuthority") or {}).get("data")),
                    token=eks_token(frozen, region, location.name),
                    expires_at=datetime.now(UTC) + TOKEN_LIFETIME,
                )

        return await retry_throttled(call, doing)


async def _clusters_in(
    credentials: Mapping[str, Any], region: str, doing: str
) -> list[CloudCluster]:
    async with _calls(credentials, doing):
        session = await _session(credentials, region)
        async with session.client("eks", config=CLIENT_CONFIG) as eks:
            names: list[str] = []
            async for page in eks.get_paginator("list_clusters").paginate():
                names.extend(page.get("clusters", []))
            found = []
            for name in sorted(names):
                described = await _describe(eks, name)
                if described is not None:
                    found.append(_cluster(described, region))
            return found


def _cluster(described: Mapping[str, Any], region: str) -> CloudCluster:
    return CloudCluster(
        name=described["name"],
        region=region,
        endpoint=described.get("endpoint"),
        version=described.get("version"),
    )


async def _describe(eks: Any, name: str) -> dict[str, Any] | None:
    try:
        answer = await eks.describe_cluster(name=name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return None
        raise
    cluster: dict[str, Any] = answer["cluster"]
    return cluster


async def _session(credentials: Mapping[str, Any], region: str) -> aioboto3.Session:
    """A session with the account's identity: its keys or the ambient chain, then its role."""
    if credentials.get("ambient"):
        session = aioboto3.Session(region_name=region)
    else:
        session = aioboto3.Session(
            aws_access_key_id=credentials["accessKeyId"],
            aws_secret_access_key=credentials["secretAccessKey"],
            aws_session_token=credentials.get("sessionToken"),
            region_name=region,
        )
    role = credentials.get("roleArn")
    if not role:
        return session
    request = {"RoleArn": role, "RoleSessionName": "spacedock"}
    if credentials.get("externalId"):
        request["ExternalId"] = credentials["externalId"]
    async with session.client("sts", config=CLIENT_CONFIG) as sts:
        assumed = (await sts.assume_role(**request))["Credentials"]
    return aioboto3.Session(
        aws_access_key_id=assumed["AccessKeyId"],
        aws_secret_access_key=assumed["SecretAccessKey"],
        aws_session_token=assumed["SessionToken"],
        region_name=region,
    )


@asynccontextmanager
async def _calls(credentials: Mapping[str, Any], doing: str) -> AsyncIterator[None]:
    """Turns any SDK failure of the block into our errors, naming what we were doing."""
    try:
        yield
    except ProviderError:
        raise
    except Exception as error:
        raise _wrapped(error, doing, secret_values(credentials)) from error


def _wrapped(error: Exception, doing: str, secrets: list[str]) -> ProviderError:
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        code = str(details.get("Code", "Unknown"))
        message = scrub(str(details.get("Message", "")), secrets)
        said = f"AWS answered {code}" + (f": {message}" if message else "")
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        if code in THROTTLING or status == 429:
            return Throttled(f"throttled: {doing}: AWS answered {code}")
        if status >= 500:
            return TemporaryError(f"{doing} failed: {said}")
        return PermanentError(f"{doing} failed: {said}")
    if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
        return PermanentError(
            f"{doing} failed: no AWS credentials in the server's environment "
            "(ambient: environment, web identity or instance profile)"
        )
    if isinstance(error, (ConnectTimeoutError, ReadTimeoutError, TimeoutError)):
        return TemporaryError(f"timeout: {doing} got no answer from AWS")
    if isinstance(error, EndpointConnectionError):
        return TemporaryError(f"connection failed: {doing}: the AWS endpoint is unreachable")
    if isinstance(error, BotoCoreError):
        return PermanentError(f"{doing} failed: {type(error).__name__}")
    return PermanentError(f"{doing} failed unexpectedly: {type(error).__name__}")
