"""What the Kubernetes API server refuses in an object, for the stand-ins, with its words.

* **Names** by kind, as `k8s.io/apimachinery` and `pkg/apis/*/validation` check them:
  Services are DNS-1035 labels, Namespaces and StatefulSets DNS-1123 labels, RBAC
  objects path segments, every other kind (custom resources included) a DNS-1123
  subdomain; a CRD's name is `<plural>.<group>`.
* **Labels** (keys: an optional DNS-1123-subdomain prefix and a name part of at most
  63; values: at most 63, alphanumeric at both ends) on the object and its pod
  template, and annotation keys.
* **Built-in kinds** against the OpenAPI schemas `kubernetes-validate` ships for the
  server's minor version (strict: a field Kubernetes does not know is unknown).
* **Custom resources** against their CRD's `openAPIV3Schema` with a JSON-schema
  validator: types, required fields, enums, patterns, lengths, bounds; the CRD's
  `default`s applied; its `x-kubernetes-validations` rules evaluated (the CEL subset
  Flux's CRDs use: `has()`, field access, `==`/`!=` on strings, `!`, `&&`, `||`; a
  rule outside it fails loudly when the CRD is registered, never passes silently).

Unknown fields, as the real server treats them: a server-side apply whose patch names
one fails with 500 `failed to create typed patch object (...): .spec.x: field not
declared in schema` (kubernetes/kubernetes#122480, #139253: whatever `fieldValidation`
says); a create, update or merge patch with `fieldValidation=Strict` is 400
`strict decoding error: unknown field "spec.x"`; otherwise (`Warn`, the default, and
`Ignore`) the field is dropped and, for `Warn`, named in a `Warning` header.

Approximations: the real server answers some type mismatches of built-in kinds at
decoding (400 `cannot unmarshal`); here every schema violation is 422 Invalid with the
field path, as custom resources get it. Formats (`date-time`, `int64`) are not checked.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource

Obj = dict[str, Any]

DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\." + DNS1123_LABEL + ")*"
DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_MESSAGES = {
    DNS1123_LABEL: (
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
        "'-', and must start and end with an alphanumeric character",
        ("my-name", "123-abc"),
    ),
    DNS1123_SUBDOMAIN: (
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
        "'-' or '.', and must start and end with an alphanumeric character",
        ("example.com",),
    ),
    DNS1035_LABEL: (
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
        "with an alphabetic character, and end with an alphanumeric character",
        ("my-name", "abc-123"),
    ),
    LABEL_VALUE: (
        "a valid label must be an empty string or consist of alphanumeric characters, '-', "
        "'_' or '.', and must start and end with an alphanumeric character",
        ("MyValue", "my_value", "12345"),
    ),
    QUALIFIED_NAME: (
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
        "and end with an alphanumeric character",
        ("MyName", "my.name", "123-abc"),
    ),
}
# The StatefulSet controller labels each pod `controller-revision-hash: <name>-<10 chars>`
# (kubernetes/kubernetes#64023): a longer name makes every pod invalid.
REVISION_HASH_LENGTH = 10
MAX_STATEFULSET_NAME_FOR_PODS = 63 - REVISION_HASH_LENGTH - 1
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


# -- errors -------------------------------------------------------------------
@dataclass(frozen=True)
class FieldError:
    """One field error as `k8s.io/apimachinery/pkg/util/validation/field` words it."""

    field: str
    reason: str  # the StatusCause type: FieldValueInvalid, FieldValueRequired, ...
    body: str  # what follows "<field>: "

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def invalid_value(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, "FieldValueInvalid", f"Invalid value: {go_value(value)}: {detail}")


def required(path: str) -> FieldError:
    return FieldError(path, "FieldValueRequired", "Required value")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "?"


def go_value(value: Any) -> str:
    """A value as `field.Invalid` prints it (%q for strings, %v for the rest)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps("object" if isinstance(value, dict) else "array")
    return str(value)


class Invalid(Exception):
    """422 Invalid: what `apierrors.NewInvalid` answers, causes and all."""

    def __init__(self, kind: str, group: str, name: str, errors: list[FieldError]) -> None:
        qualified = f"{kind}.{group}" if group else kind
        listed = str(errors[0]) if len(errors) == 1 else f"[{', '.join(map(str, errors))}]"
        super().__init__(f'{qualified} "{name}" is invalid: {listed}')
        self.kind, self.group, self.name, self.errors = kind, group, name, errors

    @property
    def message(self) -> str:
        return str(self)

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": "Invalid",
            "details": {
                "name": self.name,
                "group": self.group,
                "kind": self.kind,
                "causes": [
                    {"reason": e.reason, "message": e.body, "field": e.field} for e in self.errors
                ],
            },
            "code": 422,
        }


# -- names and labels ---------------------------------------------------------
def _regex_error(value: str, rule: str) -> str | None:
    if re.fullmatch(rule, value):
        return None
    message, examples = LABEL_MESSAGES[rule]
    shown = ",  or ".join(f"'{e}'" for e in examples)
    return f"{message} (e.g. {shown}, regex used for validation is '{rule}')"


def _name_errors(value: str, rule: str, limit: int) -> list[str]:
    errors = [f"must be no more than {limit} characters"] if len(value) > limit else []
    wrong = _regex_error(value, rule)
    return errors + ([wrong] if wrong else [])


def name_rule(kind: str) -> tuple[str, int] | None:
    """The rule metadata.name follows for a kind (None: a path segment, RBAC's rule)."""
    if kind == "Service":
        return DNS1035_LABEL, 63
    if kind in ("Namespace", "StatefulSet"):
        return DNS1123_LABEL, 63
    if kind in RBAC_KINDS:
        return None
    return DNS1123_SUBDOMAIN, 253


def name_errors(kind: str, name: str) -> list[str]:
    """Why a kind may not carry this name (empty: it may)."""
    rule = name_rule(kind)
    if rule is None:
        if name in (".", ".."):
            return [f"may not be '{name}'"]
        return [f"may not contain '{c}'" for c in "/%" if c in name]
    return _name_errors(name, *rule)


def _key_errors(key: str) -> list[str]:
    prefix, slash, name = key.rpartition("/")
    if not slash:
        prefix = ""
    errors: list[str] = []
    if slash and not prefix:
        errors.append("prefix part must be non-empty")
    elif prefix:
        errors += [f"prefix part {e}" for e in _name_errors(prefix, DNS1123_SUBDOMAIN, 253)]
    if not name:
        errors.append("name part must be non-empty")
    else:
        errors += [
            e if e.startswith("name part") else f"name part {e}"
            for e in _name_errors(name, QUALIFIED_NAME, 63)
        ]
    return errors


def label_errors(labels: Any, path: str) -> list[FieldError]:
    if not isinstance(labels, dict):
        return []
    errors: list[FieldError] = []
    for key, value in labels.items():
        errors += [invalid_value(path, key, e) for e in _key_errors(str(key))]
        if isinstance(value, str):
            errors += [invalid_value(path, value, e) for e in _name_errors(value, LABEL_VALUE, 63)]
    return errors


def metadata_errors(obj: Obj, *, creating: bool) -> list[FieldError]:
    """Name, labels and annotation keys of an object and of its pod template."""
    meta = obj.get("metadata") or {}
    kind = obj.get("kind", "")
    errors: list[FieldError] = []
    name = meta.get("name")
    if creating or name:
        if not isinstance(name, str) or not name:
            errors.append(
                FieldError(
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                )
            )
        else:
            errors += [invalid_value("metadata.name", name, e) for e in name_errors(kind, name)]
    if kind == "CustomResourceDefinition" and isinstance(name, str):
        spec = obj.get("spec") or {}
        expected = f"{(spec.get('names') or {}).get('plural', '')}.{spec.get('group', '')}"
        if name != expected:
            errors.append(
                invalid_value("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
            )
    errors += label_errors(meta.get("labels"), "metadata.labels")
    for key in meta.get("annotations") or {}:
        errors += [invalid_value("metadata.annotations", key, e) for e in _key_errors(str(key))]
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict):
        errors += label_errors(
            (template.get("metadata") or {}).get("labels"), "spec.template.metadata.labels"
        )
    return errors


def revision_hash(statefulset: Obj) -> str:
    """A 10-character hash of the StatefulSet's template, in the alphabet Kubernetes
    uses for generated suffixes (`rand.SafeEncodeString`)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    seed = json.dumps((statefulset.get("spec") or {}).get("template"), sort_keys=True)
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    return "".join(alphabet[(number >> (5 * i)) % len(alphabet)] for i in range(10))


def statefulset_pod_refusal(statefulset: Obj) -> str | None:
    """Why the StatefulSet controller can never create this StatefulSet's first pod: its
    `controller-revision-hash` label would pass 63 characters (None: it can)."""
    name = statefulset["metadata"]["name"]
    label = f"{name}-{revision_hash(statefulset)}"
    if len(label) <= 63:
        return None
    return (
        f'Pod "{name}-0" is invalid: metadata.labels: Invalid value: "{label}": '
        "must be no more than 63 characters"
    )


# -- schemas ------------------------------------------------------------------
@dataclass
class Findings:
    """What validating one object found: unknown fields (dotted paths) and errors."""

    unknown: list[tuple[str | int, ...]] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)


def dotted(path: Iterator[Any] | tuple[Any, ...] | list[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _error_from_schema(error: jsonschema.ValidationError) -> FieldError:
    """One JSON-schema error in the words of the API server's OpenAPI validation."""
    path = dotted(list(error.absolute_path))
    value = error.instance
    keyword = error.validator
    expected = error.validator_value
    if keyword == "required":
        missing = re.match(r"'([^']*)' is a required property", error.message)
        child = missing.group(1) if missing else "?"
        return required(f"{path}.{child}" if path else child)
    if keyword == "type":
        wanted = expected if isinstance(expected, str) else next(iter(expected), "")
        got = json.dumps(json_type(value))
        return FieldError(
            path,
            "FieldValueTypeInvalid",
            f"Invalid value: {got}: {path} in body must be of type {wanted}: {got}",
        )
    if keyword == "enum":
        supported = ", ".join(json.dumps(v) for v in expected)
        return FieldError(
            path,
            "FieldValueNotSupported",
            f"Unsupported value: {go_value(value)}: supported values: {supported}",
        )
    if keyword == "pattern":
        return invalid_value(path, value, f"{path} in body should match '{expected}'")
    if keyword == "maxLength":
        return FieldError(
            path, "FieldValueTooLong", f"Too long: may not be more than {expected} bytes"
        )
    if keyword == "minLength":
        return invalid_value(
            path, value, f"{path} in body should be at least {expected} chars long"
        )
    if keyword == "minimum":
        return invalid_value(
            path, value, f"{path} in body should be greater than or equal to {expected}"
        )
    if keyword == "maximum":
        return invalid_value(
            path, value, f"{path} in body should be less than or equal to {expected}"
        )
    if keyword == "maxItems":
        return FieldError(
            path, "FieldValueTooMany", f"Too many: {len(value)}: must have at most {expected} items"
        )
    if keyword == "minItems":
        return invalid_value(path, value, f"{path} in body should have at least {expected} items")
    return invalid_value(path, value, error.message)


def _leaves(error: jsonschema.ValidationError) -> Iterator[jsonschema.ValidationError]:
    """The errors a user can act on: of an anyOf/oneOf, the best alternative's."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        yield jsonschema.exceptions.best_match(error.context)
    else:
        yield error


class BuiltinSchemas:
    """kubernetes-validate's strict schemas of one minor version, compiled once."""

    def __init__(self, version: str) -> None:
        minor = re.match(r"v?(\d+\.\d+)", version)
        wanted = minor.group(1) if minor else kubernetes_validate.latest_version()
        known = kubernetes_validate.utils.all_versions()
        self.version = next(
            (v for v in reversed(known) if _minor_key(v) <= _minor_key(wanted)), known[-1]
        )
        self.directory = SCHEMAS / f"v{self.version}-local-strict"
        definitions = json.loads((self.directory / "_definitions.json").read_text())
        self.definitions: dict[str, Any] = definitions["$defs"]
        self.registry: Registry[Any] = Resource.from_contents(definitions) @ Registry()
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator | None] = {}
        self._checked: dict[str, Findings] = {}

    def validator(self, api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
        key = (api_version, kind)
        if key not in self._validators:
            group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
            path = self.directory / f"{kind.lower()}-{group}.json"
            if not path.exists():
                self._validators[key] = None
            else:
                schema = json.loads(path.read_text())
                registry = Resource.from_contents(schema) @ self.registry
                self._validators[key] = jsonschema.Draft202012Validator(schema, registry=registry)
        return self._validators[key]

    def knows(self, api_version: str, kind: str) -> bool:
        return self.validator(api_version, kind) is not None

    def kind_schema(self, api_version: str, kind: str) -> Obj | None:
        """The kind's root schema (with the `x-kubernetes-patch-*` strategies), or None."""
        validator = self.validator(api_version, kind)
        return None if validator is None else dict(validator.schema)

    def resolve(self, schema: Obj) -> Obj:
        """A schema with its `$ref` followed to the definition it names."""
        for _ in range(16):
            ref = schema.get("$ref") if isinstance(schema, dict) else None
            if not isinstance(ref, str):
                break
            schema = self.definitions.get(ref.rpartition("/")[2], {})
        return schema

    def check_with_status(self, obj: Obj) -> Findings:
        """As `check`, status included: what a write through the status subresource (a
        kubelet's, a controller's) must satisfy."""
        return self._check(obj)

    def check(self, obj: Obj) -> Findings:
        """Unknown fields and every other violation of the object (status aside).
        Controllers apply the same objects again and again: answers are remembered."""
        body = {k: v for k, v in obj.items() if k != "status"}
        key = json.dumps(body, sort_keys=True, default=str)
        found = self._checked.get(key)
        if found is None:
            found = self._check(body)
            if len(self._checked) >= 4096:
                self._checked.clear()
            self._checked[key] = found
        return found

    def _check(self, body: Obj) -> Findings:
        validator = self.validator(body.get("apiVersion", ""), body.get("kind", ""))
        findings = Findings()
        if validator is None:
            return findings
        for error in validator.iter_errors(body):
            for leaf in _leaves(error):
                if leaf.validator == "additionalProperties" and leaf.validator_value is False:
                    known = set(leaf.schema.get("properties") or {})
                    base = tuple(leaf.absolute_path)
                    findings.unknown += [(*base, key) for key in leaf.instance if key not in known]
                else:
                    findings.errors.append(_error_from_schema(leaf))
        return findings


def _minor_key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@functools.cache
def builtin_schemas(version: str) -> BuiltinSchemas:
    return BuiltinSchemas(version)


def object_meta_fields(version: str) -> frozenset[str]:
    definitions = builtin_schemas(version).registry
    meta = definitions.contents("https://kubernetes.io/api/_definitions.json")
    found = meta["$defs"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]
    return frozenset(found)


# -- custom resources ---------------------------------------------------------
class CelRule:
    """One `x-kubernetes-validations` rule in the small CEL subset Flux's CRDs use."""

    TOKEN = re.compile(r"\s*(\|\||&&|==|!=|!|\(|\)|\.|'[^']*'|[A-Za-z_][A-Za-z0-9_]*)")

    def __init__(self, rule: str, message: str) -> None:
        self.rule, self.message = rule, message
        self.tokens = self._tokenize(rule)
        self._check(self.tokens)

    def _tokenize(self, rule: str) -> list[str]:
        tokens, position = [], 0
        while position < len(rule.rstrip()):
            match = self.TOKEN.match(rule, position)
            if match is None:
                raise ValueError(f"the stand-in cannot evaluate the CEL rule {rule!r}")
            tokens.append(match.group(1))
            position = match.end()
        return tokens

    def _check(self, tokens: list[str]) -> None:
        """Parse once without an object: a rule the subset cannot read fails now."""
        self.evaluate({}, dry=True)

    def evaluate(self, value: Any, *, dry: bool = False) -> bool:
        tokens = list(self.tokens)

        def peek() -> str | None:
            return tokens[0] if tokens else None

        def take(expected: str | None = None) -> str:
            if not tokens or (expected is not None and tokens[0] != expected):
                raise ValueError(f"the stand-in cannot evaluate the CEL rule {self.rule!r}")
            return tokens.pop(0)

        def path() -> tuple[bool, Any]:
            take("self")
            found, current = True, value
            while peek() == ".":
                take(".")
                key = take()
                if found and isinstance(current, dict) and key in current:
                    current = current[key]
                else:
                    found, current = False, None
            return found, current

        def operand() -> Any:
            if peek() and peek().startswith("'"):  # type: ignore[union-attr]
                return take()[1:-1]
            return path()[1]

        def primary() -> bool:
            if peek() == "(":
                take("(")
                result = either()
                take(")")
                return result
            if peek() == "has":
                take("has")
                take("(")
                found, _ = path()
                take(")")
                return found
            left = operand()
            operator = take()
            if operator not in ("==", "!="):
                raise ValueError(f"the stand-in cannot evaluate the CEL rule {self.rule!r}")
            right = operand()
            return dry or ((left == right) == (operator == "=="))

        def unary() -> bool:
            if peek() == "!":
                take("!")
                return not unary()
            return primary()

        def both() -> bool:
            result = unary()
            while peek() == "&&":
                take("&&")
                right = unary()
                result = result and right
            return result

        def either() -> bool:
            result = both()
            while peek() == "||":
                take("||")
                right = both()
                result = result or right
            return result

        result = either()
        if tokens:
            raise ValueError(f"the stand-in cannot evaluate the CEL rule {self.rule!r}")
        return result


def _json_schema(node: Any) -> Any:
    """An OpenAPI v3 schema of a CRD as a JSON schema the validator reads."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {
        key: _json_schema(value)
        for key, value in node.items()
        if key not in ("x-kubernetes-validations", "description")
    }
    if node.get("x-kubernetes-int-or-string"):
        converted.pop("type", None)
        converted["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and isinstance(converted.get("type"), str):
        converted["type"] = [converted["type"], "null"]
    if "properties" in node:
        converted["properties"] = {k: _json_schema(v) for k, v in node["properties"].items()}
    return converted


class CrdSchema:
    """The structural schema of one served version of a CRD."""

    def __init__(self, kind: str, group: str, schema: Obj, meta_fields: frozenset[str]) -> None:
        self.kind, self.group, self.schema = kind, group, schema
        self.meta_fields = meta_fields
        self.validator = jsonschema.Draft202012Validator(_json_schema(schema))
        self.rules: list[tuple[tuple[str, ...], CelRule]] = []
        self._collect_rules(schema, ())

    def _collect_rules(self, node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        for rule in node.get("x-kubernetes-validations") or []:
            self.rules.append((path, CelRule(rule["rule"], rule.get("message", rule["rule"]))))
        for key, child in (node.get("properties") or {}).items():
            self._collect_rules(child, (*path, key))

    # Unknown fields: anything the schema does not declare, outside preserve-unknown-fields.
    def unknown_fields(self, obj: Obj) -> list[tuple[str | int, ...]]:
        found: list[tuple[str | int, ...]] = []
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            found += [("metadata", key) for key in meta if key not in self.meta_fields]
        # apiVersion, kind and metadata are every object's, declared or not.
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        self._walk_unknown(self.schema, body, (), found)
        return found

    def _walk_unknown(
        self,
        node: Any,
        value: Any,
        path: tuple[str | int, ...],
        found: list[tuple[str | int, ...]],
    ) -> None:
        if not isinstance(node, dict) or node.get("x-kubernetes-preserve-unknown-fields"):
            return
        if isinstance(value, dict):
            properties = node.get("properties")
            additional = node.get("additionalProperties")
            for key, inner in value.items():
                if properties is not None and key in properties:
                    self._walk_unknown(properties[key], inner, (*path, key), found)
                elif isinstance(additional, dict):
                    self._walk_unknown(additional, inner, (*path, key), found)
                elif additional is not True:
                    found.append((*path, key))
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for index, inner in enumerate(value):
                self._walk_unknown(node["items"], inner, (*path, index), found)

    def apply_defaults(self, obj: Obj) -> None:
        self._default(self.schema, obj)

    def _default(self, node: Any, value: Any) -> None:
        if not isinstance(node, dict):
            return
        if isinstance(value, dict):
            for key, child in (node.get("properties") or {}).items():
                if key not in value and isinstance(child, dict) and "default" in child:
                    value[key] = copy.deepcopy(child["default"])
                if key in value:
                    self._default(child, value[key])
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for inner in value:
                self._default(node["items"], inner)

    def errors(self, obj: Obj, *, with_status: bool = False) -> list[FieldError]:
        body = obj if with_status else {k: v for k, v in obj.items() if k != "status"}
        found = [
            _error_from_schema(leaf)
            for error in self.validator.iter_errors(body)
            for leaf in _leaves(error)
        ]
        if found:
            return found
        for path, rule in self.rules:
            if path and path[0] == "status" and not with_status:
                continue
            value: Any = body
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None and not rule.evaluate(value):
                found.append(invalid_value(".".join(path), value, rule.message))
        return found


# -- the API server's unknown-field answers -----------------------------------
def typed_patch_failure(obj: Obj, unknown: list[tuple[Any, ...]]) -> str:
    """The 500 a server-side apply naming an unknown field gets."""
    meta = obj.get("metadata") or {}
    where = "/".join([meta.get("namespace", ""), meta.get("name", "")])
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    fields = "; ".join(f".{dotted(path)}: field not declared in schema" for path in unknown)
    return (
        f"failed to create typed patch object ({where}; {group}/{version}, "
        f"Kind={obj.get('kind', '')}): {fields}"
    )


def strict_decoding_failure(obj: Obj, unknown: list[tuple[Any, ...]]) -> str:
    kind, version = obj.get("kind", ""), obj.get("apiVersion", "").rpartition("/")[2]
    fields = ", ".join(f'unknown field "{dotted(path)}"' for path in unknown)
    return (
        f'{kind} in version "{version}" cannot be handled as a {kind}: '
        f"strict decoding error: {fields}"
    )


def unknown_field_warning(unknown: list[tuple[Any, ...]]) -> list[str]:
    return [f'299 - "unknown field \\"{dotted(path)}\\""' for path in unknown]


def prune(obj: Obj, unknown: list[tuple[Any, ...]]) -> None:
    """Drop the unknown fields, as the server does without fieldValidation=Strict."""
    for path in sorted(unknown, key=len, reverse=True):
        parent: Any = obj
        for key in path[:-1]:
            try:
                parent = parent[key]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        if isinstance(parent, dict):
            parent.pop(path[-1], None)


def crd_schema(crd: Obj, version: str, meta_fields: frozenset[str]) -> CrdSchema | None:
    spec = crd.get("spec") or {}
    for served in spec.get("versions") or []:
        if served.get("name") == version:
            schema = (served.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(schema, dict):
                return CrdSchema(spec["names"]["kind"], spec["group"], schema, meta_fields)
    return None
