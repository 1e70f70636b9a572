"""What a cluster credential is and what minting one needs: the types every cluster
caller and every cloud adapter shares, in a module that imports none of them.

`ClusterCredentials` is frozen and hides its secrets from repr, so a logged
or printed credential shows no key material.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# A cached credential is replaced this long before it expires.
REFRESH_MARGIN = timedelta(seconds=60)


@dataclass(frozen=True)
class ClusterCredentials:
    server: str
    ca_pem: str = field(repr=False)
    token: str | None = field(default=None, repr=False)
    client_certificate_pem: str | None = field(default=None, repr=False)
    client_key_pem: str | None = field(default=None, repr=False)
    expires_at: datetime | None = None  # None: a static credential (GENERIC)

    def fresh(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at - REFRESH_MARGIN > now


@dataclass(frozen=True)
class ClusterTarget:
    """What a provider needs to mint a credential for one space's cluster."""

    space_id: str
    provider: str
    config: Mapping[str, str]
    secret: Mapping[str, str] = field(repr=False)  # GENERIC: caCert, token or client cert/key
    account_credentials: Mapping[str, Any] | None = field(default=None, repr=False)
    # The outbound gate's deny list, for the cloud calls a mint makes.
    deny: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
