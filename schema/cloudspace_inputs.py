"""Inputs of the CloudSpace mutations."""

from __future__ import annotations

import strawberry


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
