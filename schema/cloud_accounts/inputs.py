"""Inputs of the cloud account mutations."""

from __future__ import annotations

import strawberry
from strawberry.scalars import JSON

from schema.common.enums import (
    Provider,
)
from schema.common.inputs import SECRET


@strawberry.input(description="A new cloud account.")
class CreateCloudAccountInput:
    name: str = strawberry.field(description="Unique in the org ignoring case; 1 to 63 characters.")
    provider: Provider = strawberry.field(description="AWS, GCP or AZURE.")
    credentials: JSON = strawberry.field(
        metadata=SECRET,
        description=(
            "Provider credentials: AWS {accessKeyId, secretAccessKey, sessionToken?, roleArn?, "
            "externalId?, regions?}; GCP {serviceAccountJson, projectId?}; AZURE {tenantId, "
            "clientId, clientSecret, subscriptionId}. With ambient: true the server's own cloud "
            "identity is used instead of keys (only for orgs listed in "
            "SPACEDOCK_AMBIENT_CREDENTIAL_ORGS): AWS {ambient, roleArn?, externalId?, regions?}; "
            "GCP {ambient, projectId}; AZURE {ambient, subscriptionId, tenantId?}. Verified with "
            "the cloud before anything is stored. Never returned."
        ),
    )


@strawberry.input(description="New credentials for an existing cloud account.")
class RotateCloudAccountCredentialsInput:
    id: strawberry.ID = strawberry.field(description="The cloud account whose credentials change.")
    credentials: JSON = strawberry.field(
        metadata=SECRET,
        description=(
            "Same shape as CreateCloudAccountInput.credentials. Verified before anything "
            "changes. Never returned."
        ),
    )


@strawberry.input(description="The cloud account to delete.")
class DeleteCloudAccountInput:
    id: strawberry.ID = strawberry.field(description="The account's id.")


@strawberry.input(
    description=(
        "A cluster's identity on an account: AWS (region, clusterName); GCP (region = location, "
        "clusterName) in the account's project; AZURE (resourceGroup, clusterName) in the "
        "account's subscription, region = location."
    )
)
class ClusterAccessInput:
    cloud_account_id: strawberry.ID = strawberry.field(description="The account that gets access.")
    region: str = strawberry.field(description="AWS region, or GCP and AZURE location.")
    cluster_name: str = strawberry.field(description="The cluster's name at the provider.")
    resource_group: str | None = strawberry.field(default=None, description="Required for AZURE.")
