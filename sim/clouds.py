"""The clouds every test server talks to: the EKS stand-in (moto) for AWS, the GCP
and Azure stand-ins, one Kubernetes stand-in playing every cloud cluster, and the
settings that point a spacedock server at them.

One `Clouds` runs per pytest session (the `clouds` fixture); `active()` hands
it to the creation helpers of `factories.py`, so `create_cloud_account` gets
credentials the cloud accepts and `grant_cluster_access` a cluster that
exists there. Clusters get unique names, so modules sharing the session never
see each other's. The Kubernetes stand-in accepts an EKS token naming any
cluster moto holds, a GCP access token or an AKS token the stand-ins issued,
and records every token it accepted in `tokens_seen`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.azure_standin import AzureStandIn
from sim.eks import EksStandIn
from sim.gcp_standin import GcpStandIn
from sim.kube_standin import KubeStandIn
from sim.pki import CertificateAuthority

# The session's AWS account: moto's backends are process-wide, and other tests' stand-ins use
# moto's default account, so ours lists only our clusters and theirs only theirs.
AWS_ACCOUNT = "111111111111"
GCP_PROJECT = "spacedock-test"
AZURE_SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
AZURE_RESOURCE_GROUP = "spacedock-rg"
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


@dataclass
class Clouds:
    kube: KubeStandIn = field(default_factory=KubeStandIn)
    aws: EksStandIn = field(default_factory=EksStandIn)
    gcp: GcpStandIn = field(init=False)
    azure: AzureStandIn = field(init=False)
    aws_keys: dict[str, str] = field(default_factory=dict)
    # Every bearer token the Kubernetes stand-in accepted, in order.
    tokens_seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        ca = CertificateAuthority("cloud-standins-ca")  # one CA: SSL_CERT_FILE names one file
        self.gcp = GcpStandIn(ca=ca)
        self.azure = AzureStandIn(ca=ca)

    def start(self) -> Clouds:
        self.kube.start()
        self.kube.tokens.clear()
        for check in (
            self.aws.token_check(),
            self.gcp.is_valid_access_token,
            self.azure.is_valid_aks_token,
        ):
            self.kube.accept_tokens_when(self._seen(check))
        self.aws.start()
        self.gcp.start()
        self.azure.start()
        self.aws_keys = self.aws_user("spacedock-tests")
        principal = self.azure.service_principal(subscription_id=AZURE_SUBSCRIPTION)
        self.azure_principal = {
            "tenantId": principal.tenant_id,
            "clientId": principal.client_id,
            "clientSecret": principal.client_secret,
            "subscriptionId": principal.subscription_id,
        }
        return self

    def stop(self) -> None:
        self.azure.stop()
        self.gcp.stop()
        self.aws.stop()
        self.kube.stop()

    @property
    def env(self) -> dict[str, str]:
        """Settings that point a spacedock server at these clouds."""
        return {
            **self.aws.env,
            **self.gcp.env,
            **self.azure.env,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "",
            "AWS_SECRET_ACCESS_KEY": "",
        }

    def _seen(self, check: Callable[[str], bool]) -> Callable[[str], bool]:
        def recording(token: str) -> bool:
            accepted = check(token)
            if accepted:
                self.tokens_seen.append(token)
            return accepted

        return recording

    # -- AWS -------------------------------------------------------------
    def aws_user(self, name: str) -> dict[str, str]:
        """Access keys of a new IAM user allowed to discover EKS clusters."""
        key = self.aws.user(name, AWS_ACCOUNT)
        return {"accessKeyId": key.access_key_id, "secretAccessKey": key.secret_access_key}

    def aws_role(self, name: str, account: str) -> str:
        """A role in `account` allowed to discover EKS clusters; its ARN."""
        return self.aws.role(account, name)

    def add_eks_cluster(
        self, name: str, region: str = "us-east-1", account: str = AWS_ACCOUNT
    ) -> None:
        """An EKS cluster whose endpoint and CA are the Kubernetes stand-in's (made once)."""
        from moto.eks.models import eks_backends

        if name not in eks_backends[account][region].clusters:
            self.aws.add_cluster(region, name, self.kube.url, self.kube.ca_pem, account)

    def remove_eks_cluster(
        self, name: str, region: str = "us-east-1", account: str = AWS_ACCOUNT
    ) -> None:
        self.aws.remove_cluster(region, name, account)

    # -- every cloud -----------------------------------------------------
    def credentials(self, provider: str) -> dict[str, Any]:
        if provider == "AWS":
            return dict(self.aws_keys)
        if provider == "GCP":
            return {"serviceAccountJson": self.gcp.service_account(GCP_PROJECT)}
        return dict(self.azure_principal)

    def add_cluster(
        self, provider: str, name: str, region: str, resource_group: str | None = None
    ) -> None:
        if provider == "AWS":
            self.add_eks_cluster(name, region)
        elif provider == "GCP":
            self.gcp.add_cluster(GCP_PROJECT, region, name, self.kube.url, self.kube.ca_pem)
        else:
            self.azure.add_cluster(
                AZURE_SUBSCRIPTION,
                resource_group or AZURE_RESOURCE_GROUP,
                name,
                self.kube.url,
                self.kube.ca_pem,
                location=region,
            )

    def remove_cluster(
        self, provider: str, name: str, region: str, resource_group: str | None = None
    ) -> None:
        if provider == "AWS":
            self.remove_eks_cluster(name, region)
        elif provider == "GCP":
            self.gcp.remove_cluster(GCP_PROJECT, region, name)
        else:
            self.azure.remove_cluster(
                AZURE_SUBSCRIPTION, resource_group or AZURE_RESOURCE_GROUP, name
            )


_active: Clouds | None = None


def activate(clouds: Clouds | None) -> None:
    global _active
    _active = clouds


def active() -> Clouds:
    assert _active is not None, "tests that make cloud accounts need the `clouds` fixture"
    return _active
