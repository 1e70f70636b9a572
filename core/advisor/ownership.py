"""Which app a finding belongs to: the app whose inventory holds the finding's object.

An app's inventory is what Flux applied for it. spacedock writes each app's Flux objects
into the vCluster with the app's id as the label `spacedock.dev/app` (core.apps.flux), and
Flux lists what a Kustomization or a HelmRelease applied in its `status.inventory`
(entries `<namespace>_<name>_<group>_<kind>`). The advisor reads both with the rest of the
snapshot, so `inventories_of` needs no other call: the objects of each labelled
Kustomization's and HelmRelease's inventory, and the app's Flux objects themselves, per app
id, for the ids of the org's apps in that CloudSpace only (a label anyone can write names
no other org's app). `AppIndex` then answers per finding. Findings on pods are already
reported on their workload (core.advisor.snapshot), which is what an inventory lists.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from core.advisor.model import ObjectRef
from core.advisor.snapshot import FLUX_KINDS, Snapshot, listed, meta, status
from core.apps.flux import APP_LABEL

# app id → the objects Flux applied for it, as (kind, namespace, name)
Inventories = Mapping[str, Iterable[tuple[str, str, str]]]


def inventory_entry(entry: object) -> tuple[str, str, str] | None:
    """(kind, namespace, name) of an inventory entry; None for anything else. No part of
    it holds an underscore (names are DNS names, kinds and groups too)."""
    text = entry.get("id") if isinstance(entry, Mapping) else None
    parts = text.split("_") if isinstance(text, str) else []
    if len(parts) != 4 or not parts[1] or not parts[3]:
        return None
    namespace, name, _group, kind = parts
    return kind, namespace, name


def inventories_of(
    snapshot: Snapshot, app_ids: Collection[str]
) -> dict[str, list[tuple[str, str, str]]]:
    found: dict[str, list[tuple[str, str, str]]] = {}
    for kind in FLUX_KINDS:
        for obj in snapshot.of(kind.key):
            app_id = (meta(obj).get("labels") or {}).get(APP_LABEL)
            if app_id not in app_ids:
                continue
            objects = found.setdefault(str(app_id), [])
            objects.append(
                (kind.kind, str(meta(obj).get("namespace", "")), str(meta(obj).get("name", "")))
            )
            inventory = status(obj).get("inventory") or {}
            for entry in listed(
                inventory.get("entries") if isinstance(inventory, Mapping) else None
            ):
                parsed = inventory_entry(entry)
                if parsed is not None:
                    objects.append(parsed)
    return found


class AppIndex:
    def __init__(self, inventories: Inventories | None = None) -> None:
        self._owner: dict[tuple[str, str, str], str] = {}
        for app_id, objects in sorted((inventories or {}).items()):
            for kind, namespace, name in objects:
                # Two apps claiming one object: the first by id keeps it, every run alike.
                self._owner.setdefault((kind, namespace, name), app_id)

    def app_of(self, ref: ObjectRef) -> str | None:
        return self._owner.get((ref.kind, ref.namespace, ref.name))

    def __len__(self) -> int:
        return len(self._owner)
