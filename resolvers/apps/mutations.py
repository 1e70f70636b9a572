"""App mutations, each one unit of work (resolvers.common.mutations.run); createApp asks an
environment's space whether it runs Flux between its check and its write, outside any
transaction."""

from __future__ import annotations

from core.apps import lifecycle, operations
from core.apps.lifecycle import Delivered
from core.apps.requests import CreateRequest, SourceRequest
from core.common.errors import UserErrors
from resolvers.common.context import Context
from resolvers.common.mutations import Outcome, run


async def create(context: Context, request: CreateRequest) -> Outcome[Delivered]:
    services = context.services
    placed, refused = await run(
        context, lambda unit, viewer: lifecycle.creation_target(unit, viewer, request)
    )
    if placed is None:
        return None, refused
    try:
        await lifecycle.flux_check(services, placed, context.loaders.live_calls)
    except UserErrors as failed:
        return None, failed.errors
    return await run(
        context, lambda unit, viewer: lifecycle.create(unit, services, viewer, request)
    )


async def update(context: Context, app_id: str, request: SourceRequest) -> Outcome[Delivered]:
    services = context.services
    return await run(
        context, lambda unit, viewer: lifecycle.update(unit, services, viewer, app_id, request)
    )


async def set_suspended(context: Context, app_id: str, suspended: bool) -> Outcome[Delivered]:
    return await run(
        context,
        lambda unit, viewer: operations.set_suspended(unit, viewer, app_id, suspended),
    )


async def sync(context: Context, app_id: str) -> Outcome[Delivered]:
    return await run(context, lambda unit, viewer: operations.sync(unit, viewer, app_id))


async def delete(context: Context, app_id: str, confirm_name: str) -> Outcome[Delivered]:
    return await run(
        context, lambda unit, viewer: operations.delete(unit, viewer, app_id, confirm_name)
    )


async def requeue(context: Context, revision_id: str) -> Outcome[Delivered]:
    services = context.services
    return await run(
        context, lambda unit, viewer: operations.requeue(unit, services, viewer, revision_id)
    )


async def rollback(context: Context, revision_id: str) -> Outcome[Delivered]:
    return await run(context, lambda unit, viewer: lifecycle.rollback(unit, viewer, revision_id))
