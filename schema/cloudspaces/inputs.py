"""Inputs of the CloudSpace list and mutations."""

from __future__ import annotations

import strawberry

from db.records import CloudSpaceWhere
from schema.common.enums import CloudSpaceOrderField, CloudSpacePhase, OrderDirection


@strawberry.input(description="Which CloudSpaces a list holds; every field given must hold.")
class CloudSpaceFilter:
    phases: list[CloudSpacePhase] | None = strawberry.field(
        default=None, description="Only CloudSpaces in one of these phases."
    )
    host_space_ids: list[strawberry.ID] | None = strawberry.field(
        default=None,
        description="Only CloudSpaces on one of these host spaces, at most 100 (unknown ids, and "
        "hosts of another org such as the platform's, match nothing).",
    )
    search: str | None = strawberry.field(
        default=None,
        description="Case-insensitive substring of the CloudSpace name; at most 100 characters.",
    )

    def where(self) -> CloudSpaceWhere:
        return CloudSpaceWhere(
            phases=None if self.phases is None else [phase.value for phase in self.phases],
            host_space_ids=self.host_space_ids,
            search=self.search,
        )


@strawberry.input(description="Ties are broken by id, so paging under any order is stable.")
class CloudSpaceOrder:
    field: CloudSpaceOrderField = strawberry.field(description="What to sort by.")
    direction: OrderDirection = strawberry.field(description="Which way.")

    @property
    def label(self) -> str:
        """The order as resolvers name it, e.g. "PHASE:DESC"."""
        return f"{self.field.name}:{self.direction.name}"


@strawberry.input(description="A new CloudSpace: a vCluster with its own quota on a host space.")
class CreateCloudSpaceInput:
    name: str = strawberry.field(
        description="A DNS-1123 label (lowercase letters, digits, '-'; at most 63), unique in the org."
    )
    host_space_id: strawberry.ID | None = strawberry.field(
        default=None, description="Defaults to the org's default host space."
    )
    cpu: float = strawberry.field(
        description="CPU cores the CloudSpace's workloads may request; more than 0, millicore steps."
    )
    memory_mib: int = strawberry.field(
        name="memoryMiB", description="Memory in MiB its workloads may request; at least 64."
    )


@strawberry.input(description="A new quota; it must cover the current usage and fit the host.")
class UpdateCloudSpaceQuotaInput:
    id: strawberry.ID = strawberry.field(description="The CloudSpace.")
    cpu: float = strawberry.field(description="CPU cores; more than 0, millicore steps.")
    memory_mib: int = strawberry.field(name="memoryMiB", description="Memory in MiB; at least 64.")


@strawberry.input(description="Deletes a CloudSpace and everything in it; cannot be undone.")
class DeleteCloudSpaceInput:
    id: strawberry.ID = strawberry.field(description="The CloudSpace.")
    confirm_name: str = strawberry.field(description="Must equal the CloudSpace's name.")


@strawberry.input(description="A new vCluster in a CloudSpace, sharing its quota.")
class AddVClusterInput:
    cloud_space_id: strawberry.ID = strawberry.field(description="The CloudSpace.")
    name: str = strawberry.field(
        description=(
            "A DNS-1035 label (a lowercase letter first; letters, digits, '-') of at most 52 "
            "characters, unique in the CloudSpace."
        )
    )


@strawberry.input(description="Removes a vCluster and everything in it; cannot be undone.")
class RemoveVClusterInput:
    id: strawberry.ID = strawberry.field(description="The vCluster (vc_…).")
    confirm_name: str = strawberry.field(description="Must equal the vCluster's name.")
