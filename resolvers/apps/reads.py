"""App reads: one app, the org's apps, a CloudSpace's and an environment's apps and an
app's revisions as pages (through the request's loaders, so a page of CloudSpace cards
with their apps costs a fixed number of statements), an app's gate, and appChanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing

from core.apps.lifecycle import VIEW
from core.apps.targets import World, target_of_app
from core.common.errors import ApiError
from core.common.events import APP_CHANGED
from core.common.services import utcnow
from db import apps as app_rows
from db.app_tables import App, AppEvent, AppRevision
from db.pages import Page, page
from resolvers.common.context import Context
from resolvers.common.pagination import window
from resolvers.common.subscription_mode import SubscriptionMode


async def apps_page(
    context: Context,
    first: int | None,
    after: str | None,
    cloud_space_id: str | None,
    environment_id: str | None,
) -> Page[App]:
    context.caller.require_to_read(VIEW)
    first, after = window(first, after, "App")
    query = app_rows.org_apps(context.caller.org_id, cloud_space_id, environment_id)
    async with context.loaders.reading() as session:
        return await page(session, query, App.id, first, after)


async def of_cloud_space(
    context: Context, cloud_space_id: str, first: int | None, after: str | None
) -> Page[App]:
    context.caller.require_to_read(VIEW)
    first, after = window(first, after, "App")
    return await context.loaders.apps_of_cloud_space.load((cloud_space_id, first, after))


async def of_environment(
    context: Context, environment_id: str, first: int | None, after: str | None
) -> Page[App]:
    context.caller.require_to_read(VIEW)
    first, after = window(first, after, "App")
    return await context.loaders.apps_of_environment.load((environment_id, first, after))


async def revisions(
    context: Context, app: App, first: int | None, after: str | None
) -> Page[AppRevision]:
    """Newest first."""
    first, after = window(first, after, "AppRevision")
    return await context.loaders.revisions_of_app.load((app.id, first, after))


async def latest_revision(context: Context, app: App) -> AppRevision | None:
    return await context.loaders.latest_revision.load(app.id)


async def revision_app(context: Context, revision: AppRevision) -> App | None:
    return await context.loaders.app.load(revision.app_id)


async def gate(context: Context, app: App) -> str | None:
    """Why the app's revisions cannot reach its target now; None when they can."""
    loaders = context.loaders
    world = World()
    if app.cloud_space_id is not None:
        cloud_space = await loaders.cloud_space.load(app.cloud_space_id)
        if cloud_space is not None:
            world.cloud_spaces[cloud_space.id] = cloud_space
            # Asked together: every app's gate then joins the same two batches, however
            # the apps of a page of CloudSpaces resolve (one after the other, the batches
            # split by when each app got there).
            vclusters, host = await asyncio.gather(
                loaders.vclusters_of_cloud_space.load(cloud_space.id),
                loaders.host_space.load(cloud_space.host_space_id),
            )
            for vcluster in vclusters:
                world.vclusters[(cloud_space.id, vcluster.name)] = vcluster
            if host is not None:
                world.spaces[host.id] = host
    elif app.environment_id is not None:
        environment = await loaders.environment.load(app.environment_id)
        if environment is not None:
            world.environments[environment.id] = environment
            space = await loaders.space.load(environment.space_id)
            if space is not None:
                world.spaces[space.id] = space
    return target_of_app(context.services, app, world, utcnow()).gate


async def changes(
    context: Context,
    mode: SubscriptionMode,
    app_id: str | None,
    cloud_space_id: str | None,
    environment_id: str | None,
) -> AsyncGenerator[AppEvent, None]:
    """Every status and revision change of the caller's org's apps (of one app, CloudSpace
    or environment when given), read fresh per event, until the subscriber goes away."""
    caller = context.caller
    caller.require_to_read(VIEW)
    context.fresh_loaders()
    loaders = context.loaders
    named = (
        (app_id, loaders.app, "app"),
        (cloud_space_id, loaders.cloud_space, "CloudSpace"),
        (environment_id, loaders.environment, "environment"),
    )
    for wanted, loader, what in named:
        if wanted is not None and await loader.load(wanted) is None:
            raise ApiError("NOT_FOUND", f"No {what} with id {wanted!r}.")
    if mode.admit_only:
        return
    bus = context.services.bus
    async with aclosing(bus.subscribe(APP_CHANGED, mode.on_listening)) as announcements:
        async for announced in announcements:
            if announced.get("org_id") != caller.org_id:
                continue
            if any(
                wanted is not None and announced.get(key) != wanted
                for wanted, key in (
                    (app_id, "app_id"),
                    (cloud_space_id, "cloud_space_id"),
                    (environment_id, "environment_id"),
                )
            ):
                continue
            context.fresh_loaders(f"{APP_CHANGED}:{announced['event_id']}")
            event = await context.loaders.app_event.load(announced["event_id"])
            if event is not None:
                yield event
