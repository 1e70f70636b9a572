"""Validating admission webhooks as the Kubernetes API server (v1.36,
`k8s.io/apiserver` `pkg/admission/plugin/webhook`) calls them, for the stand-ins.

A write (create, update, patch, server-side apply, delete, and the `scale`
subresource) that passed validation is sent to every webhook of every
`ValidatingWebhookConfiguration` (admissionregistration.k8s.io/v1) whose rules match
it: operations, apiGroups, apiVersions, resources (`pods`, `deployments/scale`,
`*/scale`, `*`, `*/*`), scope, namespaceSelector and objectSelector. Each gets an
AdmissionReview v1 (uid, kind, resource, subResource, requestKind/Resource, name,
namespace, operation, userInfo, object, oldObject, dryRun, options) by HTTPS POST to
`clientConfig.url` with `?timeout=<n>s`, trusting only `caBundle` (the system roots
without one), within `timeoutSeconds` (default 10). The answer must echo the uid and
be `admission.k8s.io/v1` `AdmissionReview`, else the call failed.

* `allowed: false` refuses with `admission webhook "<name>" denied the request:
  <status.message>` (then the reason, then `without explanation`), the webhook's code
  (below 400 becomes 400), status Failure;
* a call that fails (refused, timed out, bad certificate, non-2xx, malformed answer)
  with `failurePolicy: Fail` (the default) refuses with 500 `Internal error occurred:
  failed calling webhook "<name>": failed to call webhook: <why>`; with `Ignore` the
  write goes on;
* the first refusal, in the order of configurations by name and webhooks within, wins.

What it does not do: mutating webhooks, `clientConfig.service` (a Service inside the
cluster; such a call fails), `matchConditions` (CEL), `matchPolicy: Equivalent`
conversions. Loopback only: a URL whose host is not in 127.0.0.0/8 (or `localhost`)
is never contacted; the call fails, saying so.

`AdmissionWebhookStandIn` is a webhook server for tests: it records each review and
answers allow, or what `deny()` / `answer()` set; `hold()` keeps answers back (a slow
webhook, for timeouts) and `refuse()` stops it listening.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from sim import server_name
from sim.https_standin import server_ssl_context
from sim.kube_validation import DNS1123_SUBDOMAIN, FieldError, invalid_value, required
from sim.loop_calls import call_on
from sim.pki import CertificateAuthority
from sim.ports import HeldPort

Obj = dict[str, Any]

REVIEW_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT", "*")
OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
EXEMPT_GROUP = "admissionregistration.k8s.io"  # webhooks never see their own configurations


@dataclass(frozen=True)
class UserInfo:
    """Who makes a request, as AdmissionReview's `userInfo` tells it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()

    def review(self) -> Obj:
        found: Obj = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            found["uid"] = self.uid
        return found

    @staticmethod
    def service_account(namespace: str, name: str, uid: str = "") -> UserInfo:
        return UserInfo(
            f"system:serviceaccount:{namespace}:{name}",
            uid,
            (
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ),
        )


@dataclass(frozen=True)
class Attributes:
    """One write as admission sees it."""

    operation: str
    group: str
    version: str
    resource: str  # the plural
    subresource: str
    kind: tuple[str, str, str]  # group, version, kind of `obj` (autoscaling/v1 Scale for scale)
    namespaced: bool
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    user: UserInfo
    dry_run: bool
    field_manager: str = ""

    def review(self, uid: str) -> Obj:
        group, version, kind = self.kind
        resource = {"group": self.group, "version": self.version, "resource": self.resource}
        request: Obj = {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": resource,
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": dict(resource),
            "operation": self.operation,
            "userInfo": self.user.review(),
            "object": self.obj,
            "oldObject": self.old,
            "dryRun": self.dry_run,
        }
        if self.subresource:
            request["subResource"] = self.subresource
            request["requestSubResource"] = self.subresource
        if self.name:
            request["name"] = self.name
        if self.namespace:
            request["namespace"] = self.namespace
        options: Obj = {
            "apiVersion": "meta.k8s.io/v1",
            "kind": OPTIONS_KIND.get(self.operation, ""),
        }
        if self.field_manager and self.operation != "DELETE":
            options["fieldManager"] = self.field_manager
        if self.operation != "CONNECT":
            request["options"] = options
        return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "request": request}


@dataclass(frozen=True)
class Refusal:
    """Why admission refused a write: what the API server answers."""

    code: int
    status: Obj

    @property
    def message(self) -> str:
        return str(self.status.get("message", ""))


@dataclass
class WebhookCall:
    """One call the API server made (or would have made) to a webhook."""

    webhook: str
    url: str
    outcome: str  # allowed, denied, failed: <why>, not contacted: <why>


# -- configuration rules -----------------------------------------------------
def configuration_errors(config: Obj) -> list[FieldError]:
    """What ValidateValidatingWebhookConfiguration refuses beyond the OpenAPI schema."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for index, hook in enumerate(config.get("webhooks") or []):
        at = f"webhooks[{index}]"
        name = hook.get("name", "")
        if not isinstance(name, str) or not name:
            errors.append(required(f"{at}.name"))
        elif name.count(".") < 2 or not re.fullmatch(DNS1123_SUBDOMAIN, name):
            errors.append(
                invalid_value(
                    f"{at}.name",
                    name,
                    "should be a domain with at least three segments separated by dots",
                )
            )
        elif name in seen:
            errors.append(
                FieldError(
                    f"{at}.name", "FieldValueDuplicate", f"Duplicate value: {json.dumps(name)}"
                )
            )
        seen.add(str(name))
        errors += _client_config_errors(hook.get("clientConfig") or {}, f"{at}.clientConfig")
        side = hook.get("sideEffects")
        if side is None:
            errors.append(
                FieldError(
                    f"{at}.sideEffects",
                    "FieldValueRequired",
                    "Required value: must specify one of None, NoneOnDryRun",
                )
            )
        elif side not in ("None", "NoneOnDryRun"):
            errors.append(
                FieldError(
                    f"{at}.sideEffects",
                    "FieldValueNotSupported",
                    f'Unsupported value: {json.dumps(side)}: supported values: "None", "NoneOnDryRun"',
                )
            )
        versions = hook.get("admissionReviewVersions")
        if not versions:
            errors.append(
                FieldError(
                    f"{at}.admissionReviewVersions",
                    "FieldValueRequired",
                    "Required value: must specify one of v1, v1beta1",
                )
            )
        elif not set(versions) & {"v1", "v1beta1"}:
            errors.append(
                invalid_value(
                    f"{at}.admissionReviewVersions",
                    versions,
                    "must include at least one of v1, v1beta1",
                )
            )
        timeout = hook.get("timeoutSeconds")
        if timeout is not None and not (isinstance(timeout, int) and 1 <= timeout <= 30):
            errors.append(
                invalid_value(
                    f"{at}.timeoutSeconds",
                    timeout,
                    "the timeout value must be between 1 and 30 seconds",
                )
            )
        policy = hook.get("failurePolicy")
        if policy is not None and policy not in ("Fail", "Ignore"):
            errors.append(
                FieldError(
                    f"{at}.failurePolicy",
                    "FieldValueNotSupported",
                    f'Unsupported value: {json.dumps(policy)}: supported values: "Fail", "Ignore"',
                )
            )
        for r, rule in enumerate(hook.get("rules") or []):
            errors += _rule_errors(rule, f"{at}.rules[{r}]")
    return errors


def _client_config_errors(client: Obj, at: str) -> list[FieldError]:
    url, service = client.get("url"), client.get("service")
    if (url is None) == (service is None):
        return [
            FieldError(
                at,
                "FieldValueRequired",
                "Required value: exactly one of url or service is required",
            )
        ]
    if url is None:
        return []
    parts = urlsplit(str(url))
    if parts.scheme != "https":
        return [invalid_value(f"{at}.url", url, "'https' is the only allowed URL scheme")]
    if not parts.hostname:
        return [invalid_value(f"{at}.url", url, "host must be specified")]
    if parts.username or parts.password:
        return [invalid_value(f"{at}.url", url, "user information is not permitted in the URL")]
    if parts.fragment:
        return [invalid_value(f"{at}.url", url, "fragments are not permitted in the URL")]
    if parts.query:
        return [invalid_value(f"{at}.url", url, "query parameters are not permitted in the URL")]
    return []


def _rule_errors(rule: Obj, at: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for key in ("operations", "apiGroups", "apiVersions", "resources"):
        values = rule.get(key) or []
        if not values:
            errors.append(required(f"{at}.{key}"))
        elif "*" in values and len(values) > 1:
            errors.append(
                invalid_value(
                    f"{at}.{key}", values, "if '*' is present, must not specify other values"
                )
            )
    for op in rule.get("operations") or []:
        if op not in OPERATIONS:
            errors.append(
                FieldError(
                    f"{at}.operations",
                    "FieldValueNotSupported",
                    f'Unsupported value: {json.dumps(op)}: supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"',
                )
            )
    scope = rule.get("scope")
    if scope is not None and scope not in ("Cluster", "Namespaced", "*"):
        errors.append(
            FieldError(
                f"{at}.scope",
                "FieldValueNotSupported",
                f'Unsupported value: {json.dumps(scope)}: supported values: "*", "Cluster", "Namespaced"',
            )
        )
    return errors


# -- matching -----------------------------------------------------------------
def _resource_matches(pattern: str, resource: str, subresource: str) -> bool:
    if pattern == "*/*":
        return True
    res, slash, sub = pattern.partition("/")
    if res not in ("*", resource):
        return False
    if not slash:
        return not subresource
    return (sub == "*" and bool(subresource)) or sub == subresource


def rule_matches(rule: Obj, attrs: Attributes) -> bool:
    def listed(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    scope = rule.get("scope") or "*"
    return (
        listed("operations", attrs.operation)
        and listed("apiGroups", attrs.group)
        and listed("apiVersions", attrs.version)
        and any(
            _resource_matches(r, attrs.resource, attrs.subresource)
            for r in rule.get("resources") or []
        )
        and (scope == "*" or (scope == "Namespaced") == attrs.namespaced)
    )


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) over labels; none matches all."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def webhook_applies(hook: Obj, attrs: Attributes, namespace_labels: dict[str, str] | None) -> bool:
    if attrs.group == EXEMPT_GROUP:
        return False
    if not any(rule_matches(rule, attrs) for rule in hook.get("rules") or []):
        return False
    if namespace_labels is not None and not selector_matches(
        hook.get("namespaceSelector"), namespace_labels
    ):
        return False
    selector = hook.get("objectSelector")
    if selector:
        labelled = [
            ((o.get("metadata") or {}).get("labels") or {}) for o in (attrs.obj, attrs.old) if o
        ]
        if not any(selector_matches(selector, labels) for labels in labelled):
            return False
    return True


# -- calling ------------------------------------------------------------------
def loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8")
    except ValueError:
        return False


class _CallFailed(Exception):
    pass


def _trust(hook: Obj) -> ssl.SSLContext:
    bundle = (hook.get("clientConfig") or {}).get("caBundle")
    if not bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(bundle).decode()
        return ssl.create_default_context(cadata=pem)
    except (ValueError, ssl.SSLError, UnicodeDecodeError) as error:
        raise _CallFailed(
            f"could not get REST client: unable to load root certificates: {error}"
        ) from None


async def _post(hook: Obj, url: str, review: Obj) -> Obj:
    """POST the review; the answer's JSON, or _CallFailed with Go's words for why not."""
    timeout = hook.get("timeoutSeconds") or 10
    target = f"{url}?timeout={timeout}s"
    context = _trust(hook)
    try:
        async with aiohttp.ClientSession() as session:
            async with asyncio.timeout(timeout):
                async with session.post(target, json=review, ssl=context) as answer:
                    body = await answer.read()
                    if answer.status // 100 != 2:
                        raise _CallFailed(
                            f'failed to call webhook: an error on the server ("{body[:200].decode(errors="replace")}") '
                            "has prevented the request from succeeding"
                        )
    except TimeoutError:
        raise _CallFailed(
            f'failed to call webhook: Post "{target}": context deadline exceeded'
        ) from None
    except aiohttp.ClientConnectorCertificateError:
        raise _CallFailed(
            f'failed to call webhook: Post "{target}": tls: failed to verify certificate: '
            "x509: certificate signed by unknown authority"
        ) from None
    except aiohttp.ClientConnectorError as error:
        port = urlsplit(url).port or 443
        raise _CallFailed(
            f'failed to call webhook: Post "{target}": dial tcp {error.host}:{port}: connect: '
            "connection refused"
        ) from None
    except aiohttp.ClientError as error:
        raise _CallFailed(f'failed to call webhook: Post "{target}": {error}') from None
    try:
        found = json.loads(body)
    except ValueError:
        raise _CallFailed(
            "failed to call webhook: the server responded with a body that is not JSON"
        ) from None
    if not isinstance(found, dict):
        raise _CallFailed(
            "failed to call webhook: the server responded with a body that is not an object"
        )
    return found


def _verify(uid: str, answer: Obj) -> Obj:
    """VerifyAdmissionResponse: each fault is a call failure, so failurePolicy applies."""
    gvk = f"{answer.get('apiVersion', '')}, Kind={answer.get('kind', '')}"
    if answer.get("apiVersion") != REVIEW_VERSION or answer.get("kind") != "AdmissionReview":
        raise _CallFailed(
            f"received invalid webhook response: expected webhook response of {REVIEW_VERSION}, "
            f"Kind=AdmissionReview, got {gvk}"
        )
    response = answer.get("response")
    if not isinstance(response, dict):
        raise _CallFailed("received invalid webhook response: webhook response was absent")
    if response.get("uid") != uid:
        raise _CallFailed(
            f'received invalid webhook response: expected response.uid="{uid}", got "{response.get("uid", "")}"'
        )
    if response.get("patch") is not None or response.get("patchType") is not None:
        raise _CallFailed(
            "received invalid webhook response: validating webhook may not return response.patch"
        )
    return response


def _denial(name: str, response: Obj) -> Refusal:
    result = dict(response.get("status") or {})
    given = result.get("code")
    code = given if isinstance(given, int) and given >= 400 else 400
    denied = f'admission webhook "{name}" denied the request'
    if result.get("message"):
        message = f"{denied}: {result['message']}"
    elif result.get("reason"):
        message = f"{denied}: {result['reason']}"
    else:
        message = f"{denied} without explanation"
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    }
    if result.get("reason"):
        status["reason"] = result["reason"]
    if result.get("details"):
        status["details"] = result["details"]
    return Refusal(code, status)


def _internal(reason: str) -> Refusal:
    message = f"Internal error occurred: {reason}"
    return Refusal(
        500,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "details": {"causes": [{"message": reason}]},
            "code": 500,
        },
    )


async def _call(
    hook: Obj, attrs: Attributes, calls: list[WebhookCall]
) -> tuple[Refusal | None, list[str]]:
    name = str(hook.get("name", ""))
    url = str((hook.get("clientConfig") or {}).get("url") or "")
    ignore = hook.get("failurePolicy") == "Ignore"

    def failed(why: str, outcome: str) -> tuple[Refusal | None, list[str]]:
        calls.append(WebhookCall(name, url, outcome))
        return (None if ignore else _internal(f'failed calling webhook "{name}": {why}')), []

    if attrs.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
        return failed("Webhook SideEffects is nil", "failed: dry run unsupported")
    if not url:
        return failed(
            "failed to call webhook: the stand-in calls clientConfig.url webhooks only",
            "not contacted: service",
        )
    if "v1" not in (hook.get("admissionReviewVersions") or []):
        return failed(
            "could not create admission objects: webhook does not accept known AdmissionReview versions",
            "failed: versions",
        )
    if not loopback(url):
        return failed(
            f"failed to call webhook: the stand-in calls webhooks on 127.0.0.0/8 only; {url} was not contacted",
            "not contacted: not loopback",
        )
    uid = str(uuid.uuid4())
    try:
        response = _verify(uid, await _post(hook, url, attrs.review(uid)))
    except _CallFailed as error:
        return failed(str(error), f"failed: {error}")
    warnings = [str(w) for w in response.get("warnings") or []]
    if response.get("allowed") is True:
        calls.append(WebhookCall(name, url, "allowed"))
        return None, warnings
    calls.append(WebhookCall(name, url, "denied"))
    return _denial(name, response), warnings


async def admit(
    configurations: Iterable[Obj],
    attrs: Attributes,
    namespace_labels: dict[str, str] | None,
    calls: list[WebhookCall],
) -> tuple[Refusal | None, list[str]]:
    """Call every matching webhook at once; the first refusal in order, and all warnings."""
    hooks = [
        hook
        for config in sorted(configurations, key=lambda c: c["metadata"]["name"])
        for hook in config.get("webhooks") or []
        if webhook_applies(hook, attrs, namespace_labels)
    ]
    if not hooks:
        return None, []
    results = await asyncio.gather(*(_call(hook, attrs, calls) for hook in hooks))
    warnings = [w for _, found in results for w in found]
    refusals = [refusal for refusal, _ in results if refusal is not None]
    return (refusals[0] if refusals else None), warnings


# -- a webhook server for tests ----------------------------------------------
@dataclass
class _Answer:
    allowed: bool = True
    message: str = ""
    code: int | None = None
    reason: str = ""
    raw: Callable[[Obj], Any] | None = None  # the whole body, from the review


@dataclass
class AdmissionWebhookStandIn:
    """An HTTPS admission webhook on 127.0.0.1 with its own CA, on its own loop."""

    name: str = "admission-webhook"
    reviews: list[Obj] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ca = CertificateAuthority(f"{self.name}-ca")
        self._port = HeldPort()
        self.port = self._port.number
        self._answer = _Answer()
        self._held: asyncio.Event | None = None
        self._received = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
        self._runner: web.AppRunner | None = None
        self._site: web.BaseSite | None = None

    # lifecycle
    def start(self) -> AdmissionWebhookStandIn:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self.release()
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> AdmissionWebhookStandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # what a configuration needs
    def url(self, path: str = "/validate") -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    @property
    def ca_bundle(self) -> str:
        """`clientConfig.caBundle`: the CA's PEM, base64-encoded."""
        return base64.b64encode(self.ca.pem.encode()).decode()

    # switches
    def allow(self) -> None:
        self._answer = _Answer()

    def deny(self, message: str, code: int | None = 403, reason: str = "") -> None:
        self._answer = _Answer(False, message, code, reason)

    def answer(self, body: Callable[[Obj], Any]) -> None:
        """Answer each review with `body(review)`, whatever it is (a malformed answer)."""
        self._answer = _Answer(raw=body)

    def hold(self) -> None:
        """Keep every answer back until `release()`: a webhook slower than its timeout."""
        self._loop.call_soon_threadsafe(lambda: setattr(self, "_held", asyncio.Event()))
        self._call(asyncio.sleep(0))

    def release(self) -> None:
        def released() -> None:
            if self._held is not None:
                self._held.set()
            self._held = None

        self._loop.call_soon_threadsafe(released)

    def refuse(self) -> None:
        """Stop listening: every call is refused, until `listen()`."""
        self._call(self._close())

    def listen(self) -> None:
        self._call(self._open())

    def heal(self) -> None:
        self.allow()
        self.release()
        self.listen()
        with self._received:
            self.reviews.clear()

    def wait_for_reviews(self, count: int, timeout_s: float = 10.0) -> list[Obj]:
        """The first `count` reviews, once received (AssertionError after the timeout)."""
        with self._received:
            if not self._received.wait_for(lambda: len(self.reviews) >= count, timeout_s):
                raise AssertionError(f"{len(self.reviews)} reviews received, {count} expected")
            return list(self.reviews[:count])

    # internals
    def _call(self, coroutine: Any) -> Any:
        return call_on(self._loop, coroutine)

    async def _start(self) -> None:
        app = server_name.named(web.Application(), type(self).__name__)
        app.router.add_post("/{tail:.*}", self._review)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self._context = server_ssl_context(self.ca, self.name)
        await self._open()

    async def _open(self) -> None:
        if self._site is None and self._runner is not None:
            self._site = self._port.site(self._runner, self._context)
            await self._site.start()

    async def _close(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def _stop(self) -> None:
        self._port.release()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _review(self, request: web.Request) -> web.Response:
        review = await request.json()
        review["_query"] = dict(request.query)
        review["_path"] = request.path
        with self._received:
            self.reviews.append(review)
            self._received.notify_all()
        if self._held is not None:
            await self._held.wait()
        answer = self._answer
        if answer.raw is not None:
            return web.json_response(answer.raw(review))
        response: Obj = {"uid": review["request"]["uid"], "allowed": answer.allowed}
        if not answer.allowed:
            status: Obj = {"message": answer.message}
            if answer.code is not None:
                status["code"] = answer.code
            if answer.reason:
                status["reason"] = answer.reason
            response["status"] = status
        return web.json_response(
            {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": response}
        )
