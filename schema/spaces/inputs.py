"""Inputs of the space, namespace and environment fields and mutations."""

from __future__ import annotations

import strawberry

from schema.common.enums import (
    OrderDirection,
    Provider,
    SpaceOrderField,
    SpaceStatus,
    SpaceType,
)
from schema.common.inputs import SECRET


@strawberry.input(description="Which spaces a list or count covers; every field given must hold.")
class SpaceFilter:
    status: list[SpaceStatus] | None = strawberry.field(
        default=None, description="Only spaces whose status (as shown) is one of these."
    )
    provider: Provider | None = strawberry.field(
        default=None, description="Only spaces of this provider."
    )
    providers: list[Provider] | None = strawberry.field(
        default=None, description="Only spaces of one of these providers."
    )
    cloud_account_ids: list[strawberry.ID] | None = strawberry.field(
        default=None,
        description="Only spaces of one of these cloud accounts (unknown ids match nothing).",
    )
    held: bool | None = strawberry.field(
        default=None, description="true: only spaces under an operator hold; false: only others."
    )
    search: str | None = strawberry.field(
        default=None,
        description="Case-insensitive substring of the space name; at most 100 characters.",
    )
    scalable: bool | None = strawberry.field(
        default=None,
        description="true: only real, ACTIVE spaces (the autoscaler, event-readiness and environment pickers).",
    )
    include_deregistered: bool | None = strawberry.field(
        default=None, description="true: deregistered spaces too (default false)."
    )


@strawberry.input(description="Ties are broken by id, so paging under any order is stable.")
class SpaceOrder:
    field: SpaceOrderField = strawberry.field(description="What to sort by.")
    direction: OrderDirection = strawberry.field(description="Which way.")

    @property
    def label(self) -> str:
        """The order as resolvers name it, e.g. "NAME:ASC"."""
        return f"{self.field.name}:{self.direction.name}"


@strawberry.input(
    description="A cluster's provider identity, and for GENERIC spaces how to reach it."
)
class SpaceConfigInput:
    cluster_name: str = strawberry.field(description="The cluster's name at the provider.")
    region: str | None = strawberry.field(
        default=None, description="Required for AWS and GCP (location); optional for AZURE."
    )
    project_id: str | None = strawberry.field(
        default=None,
        description="GCP only: the account's own project; null: the account's (as "
        "DiscoveredCluster.projectId shows it).",
    )
    resource_group: str | None = strawberry.field(
        default=None,
        description="AZURE only, required: the cluster's resource group (as "
        "DiscoveredCluster.resourceGroup shows it).",
    )
    subscription_id: str | None = strawberry.field(
        default=None,
        description="AZURE only: the account's own subscription; null: the account's.",
    )
    server: str | None = strawberry.field(default=None, description="GENERIC only.")
    ca_cert: str | None = strawberry.field(
        default=None,
        metadata=SECRET,
        description="GENERIC only: PEM CA bundle of the API server. Never returned.",
    )
    service_account_token: str | None = strawberry.field(
        default=None,
        metadata=SECRET,
        description="GENERIC only; or clientCertificate + clientKey. Never returned.",
    )
    client_certificate: str | None = strawberry.field(
        default=None,
        metadata=SECRET,
        description="GENERIC only: PEM client certificate. Never returned.",
    )
    client_key: str | None = strawberry.field(
        default=None,
        metadata=SECRET,
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


@strawberry.input(description="A cluster to register as a space.")
class RegisterSpaceInput:
    name: str = strawberry.field(
        description="Unique among the org's registered spaces, ignoring case (dev and DEV are "
        "one name)."
    )
    provider: Provider = strawberry.field(description="Where the cluster runs.")
    config: SpaceConfigInput = strawberry.field(
        description="The cluster's identity; immutable once registered."
    )
    space_type: SpaceType | None = strawberry.field(
        default=None, description="Defaults to KUBERNETES."
    )
    cloud_account_id: strawberry.ID | None = strawberry.field(
        default=None, description="Required unless provider is GENERIC."
    )
    synthetic: bool | None = strawberry.field(
        default=None,
        description="true: a placeholder, not a real cluster; pickers exclude it (default false).",
    )


@strawberry.input(description="Put an operator hold on a space, or lift it.")
class SetSpaceStatusInput:
    id: strawberry.ID = strawberry.field(description="The space's id.")
    status: SpaceStatus = strawberry.field(description="ACTIVE or INACTIVE.")


@strawberry.input(description="The space to deregister.")
class DeregisterSpaceInput:
    id: strawberry.ID = strawberry.field(description="The space's id.")


@strawberry.input(description="A namespace to create on a space's cluster.")
class CreateNamespaceInput:
    space_id: strawberry.ID = strawberry.field(description="The space whose cluster gets it.")
    name: str = strawberry.field(description="A DNS-1123 label: 1 to 63 of a-z, 0-9 and -.")


@strawberry.input(description="A new environment on a space and namespace.")
class CreateEnvironmentInput:
    name: str = strawberry.field(description="Unique in the org, ignoring case.")
    space_id: strawberry.ID = strawberry.field(description="A registered space.")
    namespace: str = strawberry.field(description="The namespace on the space's cluster.")


@strawberry.input(description="Point an environment at another space and namespace.")
class BindEnvironmentInput:
    id: strawberry.ID = strawberry.field(description="The environment's id.")
    space_id: strawberry.ID = strawberry.field(description="A registered space.")
    namespace: str = strawberry.field(description="The namespace on the space's cluster.")
