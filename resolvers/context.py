"""The GraphQL context: who is calling, the shared services, and this request's loaders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.rbac import Viewer
from core.roles import RoleView
from core.services import Services
from resolvers.loaders import Loaders


@dataclass
class Context:
    services: Services
    viewer: Viewer | None = None
    over_websocket: bool = False
    # Set by strawberry from the graphql-transport-ws connection_init payload.
    connection_params: dict[str, Any] = field(default_factory=dict)
    _loaders: Loaders | None = None
    # The org's custom roles by id, read once per request when a token's role is asked for.
    custom_roles: dict[str, RoleView] | None = None

    @property
    def caller(self) -> Viewer:
        assert self.viewer is not None, "the transport authenticates before executing"
        return self.viewer

    @property
    def loaders(self) -> Loaders:
        if self._loaders is None:
            self._loaders = Loaders(self.services, self.caller.org_id)
        return self._loaders

    def fresh_loaders(self) -> None:
        """Called per subscription event: a connection must not serve stale rows."""
        self._loaders = None
