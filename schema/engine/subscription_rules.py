"""What a subscription document may not select: fields that mint a credential.

A subscription runs once per event for a whole group of subscribers
(api.shared_subscriptions), so `VCluster.kubeconfig` in one minted a tenant token for
every event and handed the same token to every member. Such a document is refused
before anything runs, fragments included; a query (or the kubeconfig route) mints one
for the caller alone.
"""

from __future__ import annotations

from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    ValidationRule,
)

# (type, field) pairs whose answer is a credential minted for the request
# (`kubeconfigExpiresAt` mints nothing: it is reckoned, or the selected kubeconfig's).
MINTING_FIELDS = frozenset({("VCluster", "kubeconfig")})


class NoMintingInSubscriptions(ValidationRule):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # Minting fields found, by the operation or fragment definition holding them.
        self._found: dict[OperationDefinitionNode | str, list[FieldNode]] = {}
        self._inside: OperationDefinitionNode | str | None = None
        self._operations: list[OperationDefinitionNode] = []

    def enter_operation_definition(self, node: OperationDefinitionNode, *_: Any) -> None:
        self._inside = node
        self._operations.append(node)

    def enter_fragment_definition(self, node: FragmentDefinitionNode, *_: Any) -> None:
        self._inside = node.name.value

    def enter_field(self, node: FieldNode, *_: Any) -> None:
        parent = self.context.get_parent_type()
        if parent is not None and (parent.name, node.name.value) in MINTING_FIELDS:
            assert self._inside is not None
            self._found.setdefault(self._inside, []).append(node)

    def leave_document(self, *_: Any) -> None:
        for operation in self._operations:
            if operation.operation is not OperationType.SUBSCRIPTION:
                continue
            fields = list(self._found.get(operation, []))
            for fragment in self.context.get_recursively_referenced_fragments(operation):
                fields.extend(self._found.get(fragment.name.value, []))
            for field in fields:
                self.report_error(
                    GraphQLError(
                        f"{field.name.value} cannot be selected in a subscription: it mints a "
                        "credential, and a subscription would mint one per event for every "
                        "subscriber. Query it instead.",
                        field,
                    )
                )
