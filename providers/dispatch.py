"""The registry of cloud adapters by provider: the one module that knows them all.

It sits above the adapters (providers.aws, .gcp, .azure), which share only the leaf
modules providers.clouds and providers.cluster_credentials, so nothing imports back up.
"""

from __future__ import annotations

from providers.clouds import CloudAdapter
from providers.errors import PermanentError
from providers.network import IPNetwork


def adapter_for(provider: str, deny: tuple[IPNetwork, ...]) -> CloudAdapter:
    """The provider's adapter; every connection it makes to an address a tenant could
    choose goes through the outbound gate with `deny`."""
    # Imported here: each adapter imports its SDK, and GENERIC-only servers need none of them.
    if provider == "AWS":
        from providers.aws import AwsAdapter

        # botocore connects by itself, but to no address a tenant chooses: every host
        # derives from a checked region under amazonaws.com (or the operator's
        # AWS_ENDPOINT_URL*), and AWS credentials carry no endpoint.
        return AwsAdapter()
    if provider == "GCP":
        from providers.gcp import GcpAdapter

        return GcpAdapter(deny)
    if provider == "AZURE":
        from providers.azure import AzureAdapter

        return AzureAdapter(deny)
    raise PermanentError(f"{provider} has no cloud adapter")
