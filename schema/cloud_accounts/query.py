"""The cloud accounts' part of the Query root."""

from __future__ import annotations

import strawberry

from resolvers.cloud_accounts import reads as account_reads
from resolvers.common import nodes as node_reads
from schema.cloud_accounts.types import CloudAccount
from schema.common.info import GraphInfo
from schema.common.relay import Connection
from schema.engine.arguments import After, First, ObjectId


@strawberry.type
class CloudAccountsQuery:
    @strawberry.field(description="The org's cloud accounts, oldest first.")
    async def cloud_accounts(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[CloudAccount]:
        return Connection.of(
            await account_reads.cloud_accounts_page(info.context, first, after), CloudAccount
        )

    @strawberry.field(description="One cloud account; null when unknown or another org's.")
    async def cloud_account(self, info: GraphInfo, id: ObjectId) -> CloudAccount | None:
        row = await node_reads.one(info.context, "CloudAccount", id)
        return None if row is None else CloudAccount.from_row(row)
