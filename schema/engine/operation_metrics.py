"""The labels of the request-latency histogram (spacedock_graphql_request_duration_seconds):
which operation a request ran, known once GraphQL executes it.

Over HTTP a request runs one operation: its labels go on the request's scope, and the
transport observes the whole request, from its head read to its answer sent
(api.graphql_view). Over a WebSocket, each query or mutation is timed here, from its
`subscribe` message to its result; a subscription lasts as long as its client wants and
is not a latency.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from core.common import metrics, request_scope


class OperationMetrics(SchemaExtension):
    _labels: tuple[str, str] | None = None

    def on_operation(self) -> Iterator[None]:
        started = time.perf_counter()
        yield
        if self._labels is None or not self._over_websocket():
            return
        operation, operation_type = self._labels
        if operation_type != OperationType.SUBSCRIPTION.value:
            seconds = time.perf_counter() - started
            metrics.observe_request(seconds, operation, operation_type, "websocket")

    def on_execute(self) -> Iterator[None]:
        # Reached only by a document that parsed and validated: a name that fails either
        # never becomes a label (it stays "unknown").
        execution = self.execution_context
        self._labels = (
            metrics.operation_label(execution.operation_name),
            execution.operation_type.value,
        )
        scope = request_scope.current()
        if scope is not None and not self._over_websocket():
            scope.operation, scope.operation_type = self._labels
        yield

    def _over_websocket(self) -> bool:
        return bool(getattr(self.execution_context.context, "over_websocket", False))
