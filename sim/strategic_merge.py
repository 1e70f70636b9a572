"""Strategic merge patch, as the API server applies it to built-in kinds (what
`kubectl patch` sends by default, and what the App Advisor's suggested patches are).

A strategic merge patch is a JSON merge patch (RFC 7386: objects merge, `null`
deletes, anything else replaces) except for lists whose schema says how they merge:
`x-kubernetes-patch-strategy: merge` with `x-kubernetes-patch-merge-key` (containers
by `name`, ports by `containerPort`, volume mounts by `mountPath`, …) merge item by
item, a patch item naming a key the list lacks is appended, and an item with
`$patch: delete` removes its match; a list of scalars with the merge strategy
(finalizers) is a union. `$patch: replace` replaces the map or list it stands in, and
`$patch: delete` on a map removes it. The strategies are read from the kind's OpenAPI
schema (kubernetes-validate's, the `x-kubernetes-patch-*` extensions of the upstream
`swagger.json`), so every built-in kind merges as the real server merges it.

Custom resources have no patch strategies: the real server answers 415 to a strategic
merge patch of one (kube_api.py does).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Schema = dict[str, Any]
Resolve = Callable[[Schema], Schema]  # follows a schema's `$ref`

DIRECTIVE = "$patch"
# Keys kubectl adds for ordering and field retention; the order they ask for is not kept.
IGNORED_PREFIXES = ("$setElementOrder/", "$retainKeys")


class PatchError(ValueError):
    """A patch the server refuses (400), with its words."""


def apply(original: Obj, patch: Any, schema: Schema | None, resolve: Resolve) -> Obj:
    """`original` with `patch` merged in; `resolve(schema)` follows a `$ref`."""
    if not isinstance(patch, dict):
        raise PatchError(
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        )
    merged = _merge_map(copy.deepcopy(original), patch, schema, resolve)
    if merged is None:
        raise PatchError("a strategic merge patch may not delete the whole object")
    return merged


def _properties(schema: Schema | None, resolve: Resolve) -> Schema:
    if schema is None:
        return {}
    schema = resolve(schema)
    found: Schema = schema.get("properties") or {}
    return found


def _merge_map(original: Obj, patch: Obj, schema: Schema | None, resolve: Resolve) -> Obj | None:
    directive = patch.get(DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != DIRECTIVE}
    if directive is not None:
        raise PatchError(f"Unknown patch type: {directive}")
    properties = _properties(schema, resolve)
    for key, value in patch.items():
        if key == DIRECTIVE or key.startswith(IGNORED_PREFIXES):
            continue
        field_schema = properties.get(key)
        if value is None:
            original.pop(key, None)
        elif isinstance(value, dict) and isinstance(original.get(key), dict):
            merged = _merge_map(original[key], value, _item_schema(field_schema, resolve), resolve)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, dict):
            cleaned = _merge_map({}, value, _item_schema(field_schema, resolve), resolve)
            if cleaned is not None:
                original[key] = cleaned
        elif isinstance(value, list) and field_schema is not None:
            original[key] = _merge_list(original.get(key), value, field_schema, resolve)
        else:
            original[key] = copy.deepcopy(value)
    return original


def _item_schema(schema: Schema | None, resolve: Resolve) -> Schema | None:
    """A map field's own schema (object fields are `$ref`s, or `additionalProperties`)."""
    if schema is None:
        return None
    return resolve(schema)


def _merge_list(original: Any, patch: list[Any], schema: Schema, resolve: Resolve) -> list[Any]:
    schema = resolve(schema)
    strategy = str(schema.get("x-kubernetes-patch-strategy", ""))
    key = schema.get("x-kubernetes-patch-merge-key")
    if any(isinstance(item, dict) and item.get(DIRECTIVE) == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and DIRECTIVE in i)]
    if "merge" not in strategy.split(",") or not isinstance(original, list):
        return [_without_directives(item) for item in patch]
    if key is None:  # a list of scalars: a union, in the original's order first
        merged = list(original)
        merged += [item for item in patch if item not in merged]
        return merged
    item_schema = schema.get("items")
    merged = [copy.deepcopy(item) for item in original]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get(DIRECTIVE) == "delete":
            if index is not None:
                del merged[index]
            continue
        if index is None:
            merged.append(_without_directives(item))
            continue
        result = _merge_map(merged[index], item, item_schema, resolve)
        if result is None:
            del merged[index]
        else:
            merged[index] = result
    return merged


def _without_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_directives(v)
            for k, v in value.items()
            if k != DIRECTIVE and not k.startswith(IGNORED_PREFIXES) and v is not None
        }
    if isinstance(value, list):
        return [_without_directives(v) for v in value]
    return value
