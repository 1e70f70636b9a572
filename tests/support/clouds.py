"""The clouds every test server talks to: moto for AWS, the GCP stand-in, one
Kubernetes stand-in playing every cloud cluster, and the settings that point a
spacedock server at them.

One `Clouds` runs per pytest session (the `clouds` fixture); `active()` hands
it to the creation helpers of `factories.py`, so `create_cloud_account` gets
credentials the cloud accepts and `grant_cluster_access` a cluster that
exists there. Clusters are made with unique names, so modules sharing the
session never see each other's.

moto runs with IAM authentication on: an access key must exist in moto and its
secret must sign the request (STS checks the signature; moto computes EKS's
REST signatures wrongly, so for EKS only the key is checked). AWS accounts are
IAM users of moto's default account with a policy allowing `eks:*` and `sts:*`.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
from moto import settings as moto_settings
from moto.eks.models import eks_backends
from moto.iam.access_control import IAMRequest
from moto.server import ThreadedMotoServer

from tests.support.gcp_standin import GcpStandIn
from tests.support.kube_standin import KubeStandIn
from tests.support.server import free_port

MOTO_ADMIN = {"aws_access_key_id": "AKIAMOTOADMIN0000000", "aws_secret_access_key": "moto-admin"}
DEFAULT_ACCOUNT = "123456789012"
EKS_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["eks:*", "sts:*"], "Resource": "*"}],
}
TOKEN_PREFIX = "k8s-aws-v1."


def eks_token_url(token: str) -> str | None:
    """The presigned STS URL inside an EKS token, or None when it is not one."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    encoded = token[len(TOKEN_PREFIX) :]
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except ValueError:
        return None


def is_eks_token(token: str) -> bool:
    """A structurally valid EKS token (the cluster name is signed, so only STS could tell it;
    the issue-8 stand-ins' EKS helper checks it with the signing key)."""
    url = eks_token_url(token)
    if url is None:
        return False
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    signed = query.get("X-Amz-SignedHeaders", "").split(";")
    return (
        parts.scheme == "https"
        and parts.hostname is not None
        and parts.hostname.startswith("sts.")
        and query.get("Action") == "GetCallerIdentity"
        and "x-k8s-aws-id" in signed
        and bool(query.get("X-Amz-Signature"))
        and query.get("X-Amz-Expires") == "60"
    )


@dataclass
class Clouds:
    kube: KubeStandIn = field(default_factory=KubeStandIn)
    gcp: GcpStandIn = field(default_factory=GcpStandIn)
    moto_port: int = field(default_factory=free_port)
    aws_keys: dict[str, str] = field(default_factory=dict)
    eks_clusters: dict[str, str] = field(default_factory=dict)  # name -> region
    # Every bearer token the Kubernetes stand-in accepted, in order.
    tokens_seen: list[str] = field(default_factory=list)
    _moto: ThreadedMotoServer | None = None

    @property
    def aws_url(self) -> str:
        return f"http://127.0.0.1:{self.moto_port}"

    def start(self) -> Clouds:
        self.kube.start()
        self.kube.tokens.clear()
        self.kube.accept_tokens_when(self._seen(is_eks_token))
        self.kube.accept_tokens_when(self._seen(self.gcp.is_valid_access_token))
        self.gcp.start()
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=self.moto_port, verbose=False)
        self._moto.start()
        self.aws_keys = self.aws_user("spacedock-tests")
        _skip_eks_signatures()
        moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        return self

    def stop(self) -> None:
        moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
        if self._moto is not None:
            self._moto.stop()
        self.gcp.stop()
        self.kube.stop()

    @property
    def env(self) -> dict[str, str]:
        """Settings that point a spacedock server at these clouds."""
        return {
            "AWS_ENDPOINT_URL": self.aws_url,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_ACCESS_KEY_ID": "",
            "AWS_SECRET_ACCESS_KEY": "",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "SPACEDOCK_GCP_CONTAINER_ENDPOINT": self.gcp.url,
            "REQUESTS_CA_BUNDLE": str(self.gcp.ca_file),
            "SSL_CERT_FILE": str(self.gcp.ca_file),
            "SPACEDOCK_CLOUD_THROTTLE_BACKOFF_S": "0.05",
        }

    # -- AWS -------------------------------------------------------------
    def _admin(self, service: str, account: str = DEFAULT_ACCOUNT) -> Any:
        with NoAuth():
            return boto3.client(
                service, endpoint_url=self.aws_url, region_name="us-east-1", **MOTO_ADMIN
            )

    def aws_user(self, name: str) -> dict[str, str]:
        """Access keys of a new IAM user allowed to use EKS and STS."""
        with NoAuth():
            iam = self._admin("iam")
            iam.create_user(UserName=name)
            iam.put_user_policy(
                UserName=name, PolicyName="spacedock", PolicyDocument=json.dumps(EKS_POLICY)
            )
            key = iam.create_access_key(UserName=name)["AccessKey"]
        return {"accessKeyId": key["AccessKeyId"], "secretAccessKey": key["SecretAccessKey"]}

    def aws_role(self, name: str, account: str) -> str:
        """A role in `account` allowed to use EKS; its ARN."""
        with NoAuth():
            iam = boto3.client(
                "iam",
                endpoint_url=self.aws_url,
                region_name="us-east-1",
                aws_access_key_id=MOTO_ADMIN["aws_access_key_id"],
                aws_secret_access_key=MOTO_ADMIN["aws_secret_access_key"],
            )
            iam.meta.events.register(
                "before-sign.*.*",
                lambda request, **_: request.headers.__setitem__("x-moto-account-id", account),
            )
            trust = {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
                ],
            }
            arn: str = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))[
                "Role"
            ]["Arn"]
            iam.put_role_policy(
                RoleName=name, PolicyName="spacedock", PolicyDocument=json.dumps(EKS_POLICY)
            )
        return arn

    def add_eks_cluster(
        self, name: str, region: str = "us-east-1", account: str = DEFAULT_ACCOUNT
    ) -> None:
        """An EKS cluster in moto whose endpoint and CA are the Kubernetes stand-in's."""
        backend = eks_backends[account][region]
        if name in backend.clusters:
            return
        backend.create_cluster(
            name=name,
            role_arn=f"arn:aws:iam::{account}:role/eks",
            resources_vpc_config={},
            kubernetes_network_config=None,
            logging=None,
            client_request_token=None,
            tags=None,
            encryption_config=None,
            version="1.31",
            remote_network_config=None,
        )
        cluster = backend.clusters[name]
        cluster.endpoint = self.kube.url
        cluster.certificate_authority = {
            "data": base64.b64encode(self.kube.ca_pem.encode()).decode()
        }
        self.eks_clusters[name] = region

    def remove_eks_cluster(
        self, name: str, region: str = "us-east-1", account: str = DEFAULT_ACCOUNT
    ) -> None:
        eks_backends[account][region].clusters.pop(name, None)
        self.eks_clusters.pop(name, None)

    def _seen(self, check: Callable[[str], bool]) -> Callable[[str], bool]:
        def recording(token: str) -> bool:
            accepted = check(token)
            if accepted:
                self.tokens_seen.append(token)
            return accepted

        return recording

    # -- every cloud -----------------------------------------------------
    def credentials(self, provider: str) -> dict[str, Any]:
        if provider == "AWS":
            return dict(self.aws_keys)
        if provider == "GCP":
            return {"serviceAccountJson": self.gcp.service_account(GCP_PROJECT)}
        raise NotImplementedError(provider)

    def add_cluster(
        self, provider: str, name: str, region: str, resource_group: str | None = None
    ) -> None:
        if provider == "AWS":
            self.add_eks_cluster(name, region)
        elif provider == "GCP":
            self.gcp.add_cluster(GCP_PROJECT, region, name, self.kube.url, self.kube.ca_pem)
        # AZURE: no stand-in yet, and spacedock does not look its clusters up yet either.


GCP_PROJECT = "spacedock-test"


class NoAuth:
    """moto without authentication for the block: the test's own setup calls."""

    def __enter__(self) -> None:
        self._saved = moto_settings.INITIAL_NO_AUTH_ACTION_COUNT
        moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")

    def __exit__(self, *_: object) -> None:
        moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = self._saved


def _skip_eks_signatures() -> None:
    check = IAMRequest.check_signature
    if getattr(check, "skips_eks", False):
        return

    def check_signature(self: Any) -> None:
        if self._service != "eks":
            check(self)

    check_signature.skips_eks = True  # type: ignore[attr-defined]
    IAMRequest.check_signature = check_signature  # type: ignore[method-assign]


_active: Clouds | None = None


def activate(clouds: Clouds | None) -> None:
    global _active
    _active = clouds


def active() -> Clouds:
    assert _active is not None, "tests that make cloud accounts need the `clouds` fixture"
    return _active
