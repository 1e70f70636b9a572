"""Input objects of the public contract."""

from __future__ import annotations

import strawberry
from strawberry.scalars import JSON

from schema.enums import Provider, SpaceStatus, SpaceType


@strawberry.input
class SpaceFilter:
    status: list[SpaceStatus] | None = None
    provider: Provider | None = None
    scalable: bool | None = strawberry.field(
        default=None,
        description="true: only real, ACTIVE spaces (the autoscaler, event-readiness and environment pickers).",
    )
    include_deregistered: bool | None = None


@strawberry.input
class CreateCloudAccountInput:
    name: str
    provider: Provider
    credentials: JSON = strawberry.field(
        description=(
            "Provider credentials: AWS {accessKeyId, secretAccessKey, sessionToken?, roleArn?, "
            "externalId?, regions?}; GCP {serviceAccountJson, projectId?}; AZURE {tenantId, "
            "clientId, clientSecret, subscriptionId}. With ambient: true the server's own cloud "
            "identity is used instead of keys (only for orgs listed in "
            "SPACEDOCK_AMBIENT_CREDENTIAL_ORGS): AWS {ambient, roleArn?, externalId?, regions?}; "
            "GCP {ambient, projectId}; AZURE {ambient, subscriptionId, tenantId?}. Verified with "
            "the cloud before anything is stored. Never returned."
        )
    )


@strawberry.input(description="New credentials for an existing cloud account.")
class RotateCloudAccountCredentialsInput:
    id: strawberry.ID = strawberry.field(description="The cloud account whose credentials change.")
    credentials: JSON = strawberry.field(
        description=(
            "Same shape as CreateCloudAccountInput.credentials. Verified before anything "
            "changes. Never returned."
        )
    )


@strawberry.input
class DeleteCloudAccountInput:
    id: strawberry.ID


@strawberry.input(
    description=(
        "A cluster's identity on an account: AWS (region, clusterName); GCP (region = location, "
        "clusterName) in the account's project; AZURE (resourceGroup, clusterName) in the "
        "account's subscription, region = location."
    )
)
class ClusterAccessInput:
    cloud_account_id: strawberry.ID
    region: str
    cluster_name: str
    resource_group: str | None = strawberry.field(default=None, description="Required for AZURE.")


@strawberry.input
class SpaceConfigInput:
    cluster_name: str
    region: str | None = None
    project_id: str | None = None
    resource_group: str | None = None
    subscription_id: str | None = None
    server: str | None = strawberry.field(default=None, description="GENERIC only.")
    ca_cert: str | None = strawberry.field(
        default=None, description="GENERIC only: PEM CA bundle of the API server. Never returned."
    )
    service_account_token: str | None = strawberry.field(
        default=None, description="GENERIC only; or clientCertificate + clientKey. Never returned."
    )
    client_certificate: str | None = strawberry.field(
        default=None, description="GENERIC only: PEM client certificate. Never returned."
    )
    client_key: str | None = strawberry.field(
        default=None,
        description="GENERIC only: PEM private key of clientCertificate. Never returned.",
    )

    def given(self) -> dict[str, str]:
        """The fields that were set, under their contract (camelCase) names."""
        names = {
            "cluster_name": "clusterName",
            "region": "region",
            "project_id": "projectId",
            "resource_group": "resourceGroup",
            "subscription_id": "subscriptionId",
            "server": "server",
            "ca_cert": "caCert",
            "service_account_token": "serviceAccountToken",
            "client_certificate": "clientCertificate",
            "client_key": "clientKey",
        }
        return {
            name: getattr(self, attr)
            for attr, name in names.items()
            if getattr(self, attr) is not None
        }


@strawberry.input
class RegisterSpaceInput:
    name: str
    provider: Provider
    config: SpaceConfigInput
    space_type: SpaceType | None = strawberry.field(
        default=None, description="Defaults to KUBERNETES."
    )
    cloud_account_id: strawberry.ID | None = strawberry.field(
        default=None, description="Required unless provider is GENERIC."
    )
    synthetic: bool | None = None


@strawberry.input
class SetSpaceStatusInput:
    id: strawberry.ID
    status: SpaceStatus = strawberry.field(description="ACTIVE or INACTIVE.")


@strawberry.input
class DeregisterSpaceInput:
    id: strawberry.ID


@strawberry.input
class CreateNamespaceInput:
    space_id: strawberry.ID
    name: str


@strawberry.input
class CreateEnvironmentInput:
    name: str
    space_id: strawberry.ID
    namespace: str


@strawberry.input
class BindEnvironmentInput:
    id: strawberry.ID
    space_id: strawberry.ID
    namespace: str
