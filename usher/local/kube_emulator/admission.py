"""Mutating admission webhooks, called by the emulator as the API server calls them on create
and update.

What it does: for a create, or an update (PUT or PATCH) of an object itself (not of a
subresource such as ``status``, which the rules' resources do not name), finds the
``MutatingWebhookConfiguration`` objects (``admissionregistration.k8s.io/v1``, in name order,
webhooks in written order) whose rules match the request (its operation, ``CREATE`` or
``UPDATE``, or ``*``; apiGroups, apiVersions, resources with ``*``; scope) and whose
``namespaceSelector`` / ``objectSelector`` match the namespace's and the object's labels,
and calls each one: an ``AdmissionReview`` v1 request POSTed over HTTPS to ``clientConfig.url``, or
to a Service (``https://<name>.<namespace>.svc<path>``, reached through the ``host:port`` the
emulator was told for it since there is no cluster DNS; the certificate is still checked for
that name), trusting only
``clientConfig.caBundle``, within ``timeoutSeconds`` (default 10). A ``JSONPatch`` in the answer
is applied to the object the next webhook (and the store) sees; an update's review carries the
stored object as ``oldObject`` and the object the update would store (a patch already
applied) as ``object``. ``allowed: false`` refuses the request with the webhook's ``status``
(its code when 400 or more, else 400; ``admission webhook "<name>" denied the request:
<message>``). A call that fails (connection, TLS, timeout,
bad answer, a patch that does not apply) refuses it with 500 ``InternalError`` under
``failurePolicy: Fail`` (the default) and is skipped under ``Ignore``.
What it must never do: trust any certificate but ``caBundle``, call a webhook whose rules do not
match, store anything, or block the event loop.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from usher.local.kube_emulator.errors import ApiError
from usher.local.kube_emulator.patches import JsonPatchError, json_patch
from usher.local.kube_emulator.resources import ResourceType, find_resource
from usher.local.kube_emulator.selectors import LabelSelector
from usher.local.kube_emulator.store import Store
from usher.local.kube_emulator.wire import JsonObj

DEFAULT_TIMEOUT_S = 10
REVIEW_API_VERSION = "admission.k8s.io/v1"
ServiceAddresses = Mapping[tuple[str, str], str]
"""``(namespace, name)`` of a webhook Service -> ``host:port`` that serves it (no cluster DNS)."""


class WebhookCallFailed(Exception):
    """A webhook could not be called or answered nonsense (``failurePolicy`` decides)."""


@dataclass(frozen=True)
class Target:
    """Where to POST the review and which name the server certificate must carry."""

    url: str
    server_hostname: str | None


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """A ``LabelSelector`` object (matchLabels, matchExpressions) against ``labels``; absent or
    empty matches everything, as in the API."""
    raw = _mapping(selector)
    clauses = [f"{k}={v}" for k, v in _mapping(raw.get("matchLabels")).items()]
    for expression in _list(raw.get("matchExpressions")):
        expression = _mapping(expression)
        key, operator = expression.get("key"), expression.get("operator")
        values = ",".join(str(v) for v in _list(expression.get("values")))
        clause = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": f"{key}",
            "DoesNotExist": f"!{key}",
        }.get(str(operator))
        if clause is None:
            return False  # the API server refuses such a configuration; never match it
        clauses.append(clause)
    return LabelSelector.parse(",".join(clauses)).matches({"metadata": {"labels": dict(labels)}})


def _rule_matches(rule: JsonObj, rt: ResourceType, operation: str) -> bool:
    def within(field: str, value: str) -> bool:
        allowed = [str(v) for v in _list(rule.get(field))]
        return "*" in allowed or value in allowed

    scope = rule.get("scope", "*")
    scoped = scope == "*" or (scope == "Namespaced") == rt.namespaced
    operations = [str(o) for o in _list(rule.get("operations"))]
    return (
        (operation in operations or "*" in operations)
        and within("apiGroups", rt.group)
        and within("apiVersions", rt.version)
        and within("resources", rt.plural)
        and scoped
    )


def _labels(obj: JsonObj) -> dict[str, str]:
    return {
        str(k): str(v) for k, v in _mapping(_mapping(obj.get("metadata")).get("labels")).items()
    }


class Admission:
    """The mutating admission stage of one emulator (configurations live in its store)."""

    def __init__(self, store: Store, services: ServiceAddresses | None = None) -> None:
        self.store = store
        self.services = dict(services or {})

    def _configurations(self) -> list[JsonObj]:
        configurations = find_resource(
            "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"
        )
        return [] if configurations is None else self.store.objects(configurations)

    def calls_on(self, rt: ResourceType, operation: str) -> bool:
        """Whether some configured webhook has a rule for ``operation`` on ``rt`` (before its
        selectors are looked at): an update needs its object worked out first only then."""
        return any(
            _rule_matches(_mapping(rule), rt, operation)
            for config in self._configurations()
            for webhook in _list(config.get("webhooks"))
            for rule in _list(_mapping(webhook).get("rules"))
        )

    def _webhooks(
        self, rt: ResourceType, namespace: str | None, obj: JsonObj, operation: str
    ) -> list[JsonObj]:
        ns_labels: dict[str, str] = {}
        if namespace:
            namespaces = find_resource("", "v1", "namespaces")
            found = self.store.find(namespaces, None, namespace) if namespaces else None
            ns_labels = _labels(found or {})
        chosen: list[JsonObj] = []
        items = self._configurations()
        for config in sorted(items, key=lambda c: str(c["metadata"]["name"])):
            for webhook in _list(config.get("webhooks")):
                webhook = _mapping(webhook)
                rules = _list(webhook.get("rules"))
                if not any(_rule_matches(_mapping(r), rt, operation) for r in rules):
                    continue
                if namespace and not selector_matches(webhook.get("namespaceSelector"), ns_labels):
                    continue
                if not selector_matches(webhook.get("objectSelector"), _labels(obj)):
                    continue
                chosen.append(webhook)
        return chosen

    async def mutate(
        self, rt: ResourceType, namespace: str | None, body: Any, old: JsonObj | None = None
    ) -> Any:
        """The object after every matching webhook (the body itself when none matches): a
        create, or with ``old`` (the stored object) an update."""
        if not isinstance(body, dict):
            return body  # the store refuses it with the right error
        obj: JsonObj = json.loads(json.dumps(body))
        if namespace and rt.namespaced:
            _mapping(obj.setdefault("metadata", {})).setdefault("namespace", namespace)
        operation = "CREATE" if old is None else "UPDATE"
        for webhook in self._webhooks(rt, namespace, obj, operation):
            name = str(webhook.get("name", ""))
            try:
                obj = await self._call(webhook, rt, namespace, obj, old)
            except WebhookCallFailed as failed:
                if webhook.get("failurePolicy", "Fail") == "Ignore":
                    continue
                raise ApiError(
                    500,
                    "InternalError",
                    f'Internal error occurred: failed calling webhook "{name}": {failed}',
                ) from failed
        return obj

    async def _call(
        self,
        webhook: JsonObj,
        rt: ResourceType,
        namespace: str | None,
        obj: JsonObj,
        old: JsonObj | None,
    ) -> JsonObj:
        uid = str(uuid.uuid4())
        review = _review(uid, rt, namespace, obj, old)
        answer = await self._post(webhook, review)
        response = _mapping(answer.get("response"))
        if answer.get("apiVersion") != REVIEW_API_VERSION or response.get("uid") != uid:
            raise WebhookCallFailed("expected an AdmissionReview v1 response with the request uid")
        if response.get("allowed") is not True:
            status = _mapping(response.get("status"))  # AdmissionResponse.Result is "status"
            raw_code = status.get("code")
            code = raw_code if isinstance(raw_code, int) and raw_code >= 400 else 400
            message = status.get("message") or "denied"
            raise ApiError(
                code,
                str(status.get("reason") or "BadRequest"),
                f'admission webhook "{webhook.get("name", "")}" denied the request: {message}',
            )
        return _patched(obj, response)

    async def _post(self, webhook: JsonObj, review: JsonObj) -> JsonObj:
        client = _mapping(webhook.get("clientConfig"))
        target = self._target(client)
        context = _tls_context(client.get("caBundle"))
        timeout = webhook.get("timeoutSeconds", DEFAULT_TIMEOUT_S)
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
                session.post(
                    target.url,
                    json=review,
                    ssl=context,
                    server_hostname=target.server_hostname,
                ) as reply,
            ):
                if reply.status != 200:
                    raise WebhookCallFailed(f"the webhook answered HTTP {reply.status}")
                answer = await reply.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError, ssl.SSLError) as exc:
            raise WebhookCallFailed(f'Post "{target.url}": {_why(exc)}') from exc
        if not isinstance(answer, dict):
            raise WebhookCallFailed("the webhook's answer is not a JSON object")
        return answer

    def _target(self, client: JsonObj) -> Target:
        url = client.get("url")
        if isinstance(url, str) and url:
            if urlsplit(url).scheme != "https":
                raise WebhookCallFailed(f"webhook url {url!r} is not https")
            return Target(url, None)
        service = _mapping(client.get("service"))
        namespace, name = str(service.get("namespace", "")), str(service.get("name", ""))
        host = f"{name}.{namespace}.svc"
        address = self.services.get((namespace, name))
        if address is None:
            raise WebhookCallFailed(f"service {namespace}/{name} has no address ({host} unknown)")
        path = str(service.get("path") or "/")
        return Target(f"https://{address}{path}", host)


def _why(exc: BaseException) -> str:
    """A short cause (aiohttp's connection errors print their whole SSL context)."""
    cause = getattr(exc, "os_error", None) or exc
    detail = getattr(cause, "strerror", None) or getattr(cause, "reason", None) or str(cause)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _tls_context(ca_bundle: object) -> ssl.SSLContext:
    if not isinstance(ca_bundle, str) or not ca_bundle:
        raise WebhookCallFailed("clientConfig.caBundle is empty: the server cannot be verified")
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode()
        context = ssl.create_default_context(cadata=pem)
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
        raise WebhookCallFailed(f"clientConfig.caBundle is not a PEM bundle: {exc}") from exc
    return context


def _review(
    uid: str, rt: ResourceType, namespace: str | None, obj: JsonObj, old: JsonObj | None
) -> JsonObj:
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
    request: JsonObj = {
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": _mapping(obj.get("metadata")).get("name", ""),
        "operation": "CREATE" if old is None else "UPDATE",
        "userInfo": {"username": "usher-emulator"},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "CreateOptions" if old is None else "UpdateOptions",
        },
    }
    if namespace:
        request["namespace"] = namespace
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "request": request}


def _patched(obj: JsonObj, response: JsonObj) -> JsonObj:
    raw = response.get("patch")
    if raw is None:
        return obj
    if response.get("patchType") != "JSONPatch":
        raise WebhookCallFailed(f"patchType {response.get('patchType')!r} is not JSONPatch")
    try:
        operations = json.loads(base64.b64decode(str(raw), validate=True))
        patched = json_patch(obj, operations)
    except (binascii.Error, ValueError, TypeError, JsonPatchError) as exc:
        raise WebhookCallFailed(f"the webhook's patch does not apply: {exc}") from exc
    if not isinstance(patched, dict):
        raise WebhookCallFailed("the webhook's patch does not leave an object")
    return patched
