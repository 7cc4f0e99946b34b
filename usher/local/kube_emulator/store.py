"""The in-memory object store of the Kubernetes API emulator (what etcd + the registry do).

What it does: keeps objects per resource type, stamps them (uid, creationTimestamp,
resourceVersion, generation), enforces the API server's write rules (optimistic concurrency,
status subresource, immutable identity, DNS-1123 names, AlreadyExists/NotFound), applies merge
and JSON patches, answers lists (label/field selectors, limit/continue) and keeps a bounded
history of watch events under one global, etcd-like resourceVersion counter. Writers and
watchers are told about every change through synchronous subscriptions (the change feed).
What it must never do: network or file I/O, asyncio, sleeping; hand out an object it will later
mutate (stored objects are replaced, never changed in place); bump the resourceVersion for a
write that changes nothing.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, cast

import msgspec

from usher.core.kinds import OBSERVED

JsonObj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
PatchType = Literal["merge", "json", "strategic"]

_T = TypeVar("_T")
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


def clone(obj: _T) -> _T:
    """A deep copy of JSON data (what the store holds): a msgspec round trip is about six times
    faster than ``copy.deepcopy``, which was a quarter of the emulator's CPU under load."""
    return cast(_T, _DECODER.decode(_ENCODER.encode(obj)))


def encode_json(obj: Any) -> bytes:
    """Compact JSON for responses and watch lines (msgspec: several times faster than json)."""
    return _ENCODER.encode(obj)


DEFAULT_HISTORY = 1000
GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s utilrand: no vowels, no 0/1/3
GENERATE_NAME_SUFFIX = 5
GENERATE_NAME_MAX_PREFIX = 58
MAX_CONTINUE_SNAPSHOTS = 256

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


# --------------------------------------------------------------------------- resource types


@dataclass(frozen=True)
class ResourceType:
    """One served resource (group, version, plural) and the write rules the server applies."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    builtin: bool = True
    short_names: tuple[str, ...] = ()
    keep_status_on_create: bool = False
    initial_status: tuple[tuple[str, str], ...] = ()
    extra_fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``jobs.batch`` / ``pods``: how the real server names the resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> tuple[str, str]:
        """Versions of one group/plural share storage (CRD conversion strategy ``None``)."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def allows_unconditional_update(self) -> bool:
        """Built-in types accept a PUT without resourceVersion; custom resources do not."""
        return self.builtin


def _crd(group: str, version: str, plural: str, kind: str, *short: str) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        status_subresource=True,
        builtin=False,
        short_names=short,
    )


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        namespaced=False,
        status_subresource=True,
        short_names=("ns",),
        initial_status=(("phase", "Active"),),
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "node",
        "Node",
        namespaced=False,
        status_subresource=True,
        short_names=("no",),
        keep_status_on_create=True,
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        status_subresource=True,
        short_names=("po",),
        initial_status=(("phase", "Pending"),),
        extra_fields=("spec.nodeName", "status.phase"),
    ),
    ResourceType(
        "",
        "v1",
        "events",
        "event",
        "Event",
        short_names=("ev",),
        extra_fields=(
            "involvedObject.kind",
            "involvedObject.name",
            "involvedObject.namespace",
            "involvedObject.uid",
            "reason",
            "type",
        ),
    ),
    ResourceType("", "v1", "configmaps", "configmap", "ConfigMap", short_names=("cm",)),
    ResourceType("", "v1", "limitranges", "limitrange", "LimitRange", short_names=("limits",)),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "job",
        "Job",
        status_subresource=True,
        extra_fields=("status.successful",),
    ),
    ResourceType(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        namespaced=False,
        short_names=("pc",),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "lease", "Lease"),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration",
        namespaced=False,
    ),
    # Every custom job kind of the registry, admitted or only observed to be rejected.
    *(
        _crd(family.group, version, family.plural, family.kind, *family.short_names)
        for family in OBSERVED
        if not family.builtin
        for version in family.emulated_versions
    ),
    _crd("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", "ElasticQuotaTree", "eqtree"),
    _crd("scheduling.x-k8s.io", "v1alpha1", "queues", "Queue"),
)


def find_resource(group: str, version: str, plural: str) -> ResourceType | None:
    """The served resource at ``/apis/<group>/<version>/<plural>``, if any."""
    for rt in RESOURCES:
        if (rt.group, rt.version, rt.plural) == (group, version, plural):
            return rt
    return None


def resource(group: str, version: str, plural: str) -> ResourceType:
    """The served resource at ``/apis/<group>/<version>/<plural>`` (KeyError if not served)."""
    found = find_resource(group, version, plural)
    if found is None:
        raise KeyError(f"{plural}.{group}/{version} is not served by the emulator")
    return found


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A failure the API server reports as a ``Status`` object with an HTTP code."""

    def __init__(
        self, code: int, reason: str, message: str, details: JsonObj | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> JsonObj:
        body: JsonObj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    """The ``details`` of a Status about one named object, as the real server fills them."""
    return {"name": name, "group": rt.group, "kind": rt.plural}


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{rt.group_resource} "{name}" not found',
        _details(rt, name),
    )


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{rt.group_resource} "{name}" already exists',
        _details(rt, name),
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
        _details(rt, name),
    )


def stale_conflict(rt: ResourceType, name: str) -> ApiError:
    return conflict(
        rt,
        name,
        "the object has been modified; please apply your changes to the latest version "
        "and try again",
    )


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422: ``causes`` are (reason, field, message) like ``FieldValueRequired``."""
    text = ", ".join(f"{f}: {m}" for _, f, m in causes)
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes],
        },
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


# --------------------------------------------------------------------------- selectors


_LABEL_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_RE_EXISTS = re.compile(rf"^(?P<neg>!?)\s*(?P<key>{_LABEL_KEY})$")
_RE_EQUALITY = re.compile(rf"^(?P<key>{_LABEL_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_LABEL_VALUE})$")
_RE_SET = re.compile(rf"^(?P<key>{_LABEL_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: ``key op values``."""

    key: str
    op: Literal["=", "!=", "in", "notin", "exists", "!exists"]
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # != and notin match absent keys


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )`` (set-based values contain commas)."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_requirement(clause: str) -> Requirement:
    if m := _RE_SET.match(clause):
        values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
        op: Literal["in", "notin"] = "in" if m["op"] == "in" else "notin"
        return Requirement(m["key"], op, values)
    if m := _RE_EQUALITY.match(clause):
        eq: Literal["=", "!="] = "!=" if m["op"] == "!=" else "="
        return Requirement(m["key"], eq, frozenset({m["value"]}))
    if m := _RE_EXISTS.match(clause):
        return Requirement(m["key"], "!exists" if m["neg"] else "exists")
    raise bad_request(f"unable to parse requirement: {clause!r}")


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``labelSelector`` (equality, inequality, in/notin, exists, !exists)."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        return cls(tuple(parse_requirement(c) for c in _split_top_level(text)))

    def matches(self, obj: JsonObj) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)


def _field_value(obj: JsonObj, path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed ``fieldSelector``: ``metadata.name``/``metadata.namespace`` (+ a few per kind)."""

    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    @classmethod
    def parse(cls, text: str, rt: ResourceType) -> FieldSelector:
        supported = ("metadata.name", "metadata.namespace", *rt.extra_fields)
        terms: list[tuple[str, bool, str]] = []
        for clause in _split_top_level(text):
            m = re.match(r"^([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*)$", clause)
            if m is None:
                raise bad_request(f"invalid selector: '{text}'; can't understand '{clause}'")
            if m[1] not in supported:
                raise bad_request(f'field label not supported: "{m[1]}"')
            terms.append((m[1], m[2] != "!=", m[3].strip()))
        return cls(tuple(terms))

    def matches(self, obj: JsonObj) -> bool:
        return all((_field_value(obj, f) == v) == eq for f, eq, v in self.terms)


@dataclass(frozen=True)
class Filter:
    """What one list or watch asks for: a namespace (or all) and label/field selectors."""

    namespace: str | None = None
    labels: LabelSelector = field(default_factory=LabelSelector)
    fields: FieldSelector = field(default_factory=FieldSelector)

    def matches(self, obj: JsonObj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        return self.labels.matches(obj) and self.fields.matches(obj)


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class StoreEvent:
    """One write as etcd reports it; ``object`` and ``previous`` must never be mutated."""

    rv: int
    type: EventType
    storage_key: tuple[str, str]
    object: JsonObj
    previous: JsonObj | None

    def as_seen_through(self, flt: Filter) -> tuple[EventType, JsonObj] | None:
        """The event a watch with ``flt`` gets: objects entering/leaving it are ADDED/DELETED."""
        now = flt.matches(self.object) if self.type != "DELETED" else False
        before = flt.matches(self.previous)
        if self.type == "DELETED":
            return ("DELETED", self.object) if before else None
        if now and before:
            return ("MODIFIED", self.object)
        if now:
            return ("ADDED", self.object)
        if before:
            return ("DELETED", self.object)
        return None


Listener = Callable[[StoreEvent], None]


@dataclass(frozen=True)
class ListResult:
    items: list[JsonObj]
    resource_version: int
    continue_token: str = ""
    remaining: int | None = None


# --------------------------------------------------------------------------- helpers


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _random_suffix() -> str:
    return "".join(secrets.choice(GENERATE_NAME_ALPHABET) for _ in range(GENERATE_NAME_SUFFIX))


def _spec_part(obj: JsonObj) -> JsonObj:
    """Everything that counts for ``metadata.generation``: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def name_problems(rt: ResourceType, name: str) -> list[str]:
    """Why ``name`` is not a valid object name for ``rt`` (empty if it is)."""
    if rt.plural == "namespaces":
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return [
                f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case '
                "alphanumeric characters or '-', and must start and end with an alphanumeric "
                "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        return []
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
            "character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ]
    return []


def default_job(obj: JsonObj) -> None:
    """The defaults the real server fills into a batch/v1 Job spec."""
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)


def check_identity(rt: ResourceType, body: JsonObj) -> None:
    """400 when the body claims another apiVersion/kind than the URL it was sent to."""
    api_version = body.get("apiVersion")
    kind = body.get("kind")
    if api_version and api_version != rt.api_version:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({rt.api_version})"
        )
    if kind and kind != rt.kind:
        raise bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )


# --------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes, objects merge, anything else replaces)."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class JsonPatchError(Exception):
    """A JSON patch operation that cannot be applied (422 on a real server)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise JsonPatchError(f"invalid array index: {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise JsonPatchError(f"array index out of bounds: {index}")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise JsonPatchError(f"path not found: /{'/'.join(tokens)}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    if isinstance(parent, dict) and tokens[-1] in parent:
        return parent[tokens[-1]]
    if isinstance(parent, list):
        return parent[_index(parent, tokens[-1], allow_end=False)]
    raise JsonPatchError(f"path not found: {path}")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], allow_end=True), value)
    else:
        raise JsonPatchError(f"path not found: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    if isinstance(parent, dict) and tokens[-1] in parent:
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], allow_end=False)]
    else:
        raise JsonPatchError(f"path not found: {path}")
    return doc


def _apply_operation(doc: Any, op: Any) -> Any:
    if not isinstance(op, dict) or not isinstance(op.get("path"), str):
        raise JsonPatchError(f"invalid operation: {op!r}")
    kind, path = op.get("op"), op["path"]
    if kind in ("add", "replace", "test") and "value" not in op:
        raise JsonPatchError(f"missing value for {kind} at {path}")
    if kind == "add":
        return _add(doc, path, clone(op["value"]))
    if kind == "remove":
        return _remove(doc, path)
    if kind == "replace":
        _get(doc, path)
        return _add(_remove(doc, path), path, clone(op["value"])) if path else op["value"]
    if kind in ("move", "copy"):
        source = op.get("from")
        if not isinstance(source, str):
            raise JsonPatchError(f"missing from for {kind} at {path}")
        if kind == "move" and path.startswith(source + "/"):
            raise JsonPatchError(f"cannot move {source} into its own child {path}")
        value = clone(_get(doc, source))
        if kind == "move":
            doc = _remove(doc, source)
        return _add(doc, path, value)
    if kind == "test":
        if _get(doc, path) != op["value"]:
            raise JsonPatchError(f"testing value {path} failed: test failed")
        return doc
    raise JsonPatchError(f"Unexpected kind: {kind}")


def json_patch(doc: Any, operations: list[Any]) -> Any:
    """RFC 6902 JSON patch: add/remove/replace/move/copy/test, all or nothing."""
    result = clone(doc)
    for op in operations:
        result = _apply_operation(result, op)
    return result


def apply_patch(rt: ResourceType, name: str, current: JsonObj, kind: PatchType, body: Any) -> Any:
    """The patched object; ``strategic`` is applied as a merge patch (no patch strategies)."""
    if kind == "json":
        if not isinstance(body, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            return json_patch(current, body)
        except JsonPatchError as exc:
            raise ApiError(
                422,
                "Invalid",
                str(exc),
                {"name": name, "group": rt.group, "kind": rt.kind},
            ) from exc
    if not isinstance(body, dict):
        raise bad_request("the patch must be a JSON object")
    return merge_patch(current, body)


# --------------------------------------------------------------------------- the store


@dataclass
class _Snapshot:
    """The rest of a paginated list, kept so every page is from one consistent revision."""

    rv: int
    items: list[JsonObj]


class Store:
    """All objects of the emulated cluster, their history, and the change feed."""

    def __init__(
        self,
        *,
        history_size: int = DEFAULT_HISTORY,
        strict_namespaces: bool = False,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._objects: dict[tuple[str, str], dict[Key, JsonObj]] = {}
        self._history: deque[StoreEvent] = deque()
        self._history_size = history_size
        self._compacted_rv = 0
        self._rv = 0
        self._listeners: list[Listener] = []
        self._snapshots: dict[str, _Snapshot] = {}
        self._strict_namespaces = strict_namespaces
        self._clock = clock

    # ---- introspection

    @property
    def resource_version(self) -> int:
        """The global counter: the resourceVersion of the last write."""
        return self._rv

    @property
    def compacted_rv(self) -> int:
        """Watches and exact lists must start at or after this resourceVersion."""
        return self._compacted_rv

    def now(self) -> datetime:
        return self._clock()

    # ---- change feed

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` synchronously after every write; returns the unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def compact(self, keep_last: int) -> None:
        """Forget all but the last ``keep_last`` events (older watches then get 410 Gone)."""
        while len(self._history) > max(keep_last, 0):
            self._compacted_rv = self._history.popleft().rv
        if not self._history:
            self._compacted_rv = self._rv
        for token, snap in list(self._snapshots.items()):
            if snap.rv < self._compacted_rv:
                del self._snapshots[token]

    def _record(
        self, kind: EventType, rt: ResourceType, obj: JsonObj, prev: JsonObj | None
    ) -> None:
        event = StoreEvent(self._rv, kind, rt.storage_key, obj, prev)
        self._history.append(event)
        while len(self._history) > self._history_size:
            self._compacted_rv = self._history.popleft().rv
        for listener in list(self._listeners):
            listener(event)

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    # ---- reads

    def _bucket(self, rt: ResourceType) -> dict[Key, JsonObj]:
        return self._objects.setdefault(rt.storage_key, {})

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rt.namespaced else "", name)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> JsonObj:
        """A copy of the object, or 404."""
        obj = self._bucket(rt).get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt, name)
        return clone(obj)

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> JsonObj | None:
        """A copy of the object, or None."""
        obj = self._bucket(rt).get(self._key(rt, namespace, name))
        return None if obj is None else clone(obj)

    def objects(self, rt: ResourceType, flt: Filter | None = None) -> list[JsonObj]:
        """The stored objects matching ``flt``, in key order (namespace, name); do not mutate."""
        bucket = self._bucket(rt)
        items = [bucket[k] for k in sorted(bucket)]
        return [o for o in items if flt is None or flt.matches(o)]

    def list_page(
        self,
        rt: ResourceType,
        flt: Filter,
        *,
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        resource_version_match: str = "",
    ) -> ListResult:
        """One page of matching objects (shared references: serialize, never mutate)."""
        if continue_token:
            return self._continue(continue_token, limit)
        rv, items = self._list_at(rt, flt, resource_version, resource_version_match)
        if limit <= 0 or len(items) <= limit:
            return ListResult(items, rv)
        token = self._remember(rv, items[limit:])
        return ListResult(items[:limit], rv, token, len(items) - limit)

    def _list_at(
        self, rt: ResourceType, flt: Filter, resource_version: str, match: str
    ) -> tuple[int, list[JsonObj]]:
        if match == "Exact" and resource_version:
            return self._list_exact(rt, flt, _parse_rv(resource_version))
        return self._rv, self.objects(rt, flt)

    def _list_exact(self, rt: ResourceType, flt: Filter, rv: int) -> tuple[int, list[JsonObj]]:
        """The state at ``rv``, rebuilt by undoing later events (410 if they were compacted)."""
        if rv < self._compacted_rv:
            raise expired(f"too old resource version: {rv} ({self._compacted_rv})")
        state = dict(self._bucket(rt))
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.storage_key != rt.storage_key:
                continue
            meta = (event.previous or event.object)["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            if event.previous is None:
                state.pop(key, None)
            else:
                state[key] = event.previous
        items = [state[k] for k in sorted(state) if flt.matches(state[k])]
        return rv, items

    def _remember(self, rv: int, rest: list[JsonObj]) -> str:
        raw = json.dumps({"rv": rv, "id": uuid.uuid4().hex}).encode()
        token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        self._snapshots[token] = _Snapshot(rv, rest)
        while len(self._snapshots) > MAX_CONTINUE_SNAPSHOTS:
            del self._snapshots[next(iter(self._snapshots))]
        return token

    def _continue(self, token: str, limit: int) -> ListResult:
        snap = self._snapshots.pop(token, None)
        if snap is None:
            raise expired(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter, or use the "
                "continue token in this response to retrieve the remainder of the results. "
                "Continuing with the provided token results in an inconsistent list - objects "
                "that were created, modified, or deleted between the time the first chunk was "
                "returned and now may show up in the list."
            )
        if limit <= 0 or len(snap.items) <= limit:
            return ListResult(snap.items, snap.rv)
        token = self._remember(snap.rv, snap.items[limit:])
        return ListResult(snap.items[:limit], snap.rv, token, len(snap.items) - limit)

    # ---- watch support

    def watch_backlog(self, rt: ResourceType, resource_version: str) -> list[StoreEvent]:
        """What a new watch sends first: synthetic ADDED (no/``0`` rv) or the events after rv."""
        if resource_version in ("", "0"):
            return [
                StoreEvent(
                    _parse_rv(o["metadata"]["resourceVersion"]), "ADDED", rt.storage_key, o, None
                )
                for o in self.objects(rt)
            ]
        rv = _parse_rv(resource_version)
        if rv < self._compacted_rv:
            raise expired(f"too old resource version: {rv} ({self._compacted_rv})")
        return [e for e in self._history if e.rv > rv and e.storage_key == rt.storage_key]

    # ---- writes

    def create(self, rt: ResourceType, namespace: str | None, body: JsonObj) -> JsonObj:
        """POST: validate, stamp, store, record ADDED; returns a copy of the stored object."""
        obj = self._prepare_create(rt, namespace, body)
        bucket = self._bucket(rt)
        meta = obj["metadata"]
        if not meta.get("name"):
            meta["name"] = self._generated_name(rt, bucket, namespace, meta["generateName"])
        self._validate_name(rt, meta["name"])
        key = self._key(rt, namespace, meta["name"])
        if key in bucket:
            raise already_exists(rt, meta["name"])
        meta["resourceVersion"] = str(self._next_rv())
        bucket[key] = obj
        self._record("ADDED", rt, obj, None)
        return clone(obj)

    def _prepare_create(self, rt: ResourceType, namespace: str | None, body: JsonObj) -> JsonObj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        check_identity(rt, body)
        obj = clone(body)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        self._check_namespace(rt, namespace, meta)
        if not meta.get("name") and not meta.get("generateName"):
            raise invalid(
                rt,
                "",
                [
                    (
                        "FieldValueRequired",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    )
                ],
            )
        for transient in ("resourceVersion", "deletionTimestamp", "managedFields", "selfLink"):
            meta.pop(transient, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self._clock())
        meta["generation"] = 1
        self._prepare_status_on_create(rt, obj)
        if rt.storage_key == ("batch", "jobs"):
            default_job(obj)
        return obj

    def _check_namespace(self, rt: ResourceType, namespace: str | None, meta: JsonObj) -> None:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        given = meta.get("namespace")
        if given and namespace and given != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        ns = namespace or given
        if not ns:
            raise bad_request("the namespace of the object is required")
        if self._strict_namespaces and ns not in {k[1] for k in self._namespaces()}:
            raise not_found(_NAMESPACES, ns)
        meta["namespace"] = ns

    def _namespaces(self) -> Iterable[Key]:
        return self._bucket(_NAMESPACES).keys()

    def _prepare_status_on_create(self, rt: ResourceType, obj: JsonObj) -> None:
        if rt.status_subresource and not rt.keep_status_on_create:
            obj.pop("status", None)
        if rt.initial_status:
            obj["status"] = {**dict(rt.initial_status), **obj.get("status", {})}

    def _generated_name(
        self, rt: ResourceType, bucket: dict[Key, JsonObj], namespace: str | None, prefix: str
    ) -> str:
        for _ in range(16):
            name = prefix[:GENERATE_NAME_MAX_PREFIX] + _random_suffix()
            if self._key(rt, namespace, name) not in bucket:
                return name
        raise already_exists(rt, prefix)

    def _validate_name(self, rt: ResourceType, name: str) -> None:
        problems = name_problems(rt, name)
        if problems:
            raise invalid(rt, name, [("FieldValueInvalid", "metadata.name", p) for p in problems])

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: JsonObj,
        *,
        subresource: str | None = None,
    ) -> JsonObj:
        """PUT: replace the object (or only its status) under optimistic concurrency."""
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        check_identity(rt, body)
        body_name = body.get("metadata", {}).get("name")
        if body_name and body_name != name:
            raise bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        current = self._current(rt, namespace, name)
        rv = str(body.get("metadata", {}).get("resourceVersion") or "")
        if not rv and not rt.allows_unconditional_update:
            raise invalid(
                rt,
                name,
                [
                    (
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
            )
        return self._replace(rt, current, clone(body), rv, subresource)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        kind: PatchType,
        body: Any,
        *,
        subresource: str | None = None,
    ) -> JsonObj:
        """PATCH: apply a merge/JSON patch; a resourceVersion in the result is a precondition."""
        current = self._current(rt, namespace, name)
        patched = apply_patch(rt, name, current, kind, body)
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not a JSON object")
        check_identity(rt, patched)
        if patched.get("metadata", {}).get("name") != name:
            raise bad_request("metadata.name cannot be changed by a patch")
        rv = str(patched.get("metadata", {}).get("resourceVersion") or "")
        return self._replace(rt, current, patched, rv, subresource)

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> JsonObj:
        current = self._bucket(rt).get(self._key(rt, namespace, name))
        if current is None:
            raise not_found(rt, name)
        return current

    def _replace(
        self,
        rt: ResourceType,
        current: JsonObj,
        new: JsonObj,
        rv: str,
        subresource: str | None,
    ) -> JsonObj:
        name = current["metadata"]["name"]
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise stale_conflict(rt, name)
        merged = self._merge_for(rt, current, new, subresource)
        if merged == current:
            return clone(current)  # a no-op write: no new resourceVersion, no event
        if _spec_part(merged) != _spec_part(current):
            merged["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        merged["metadata"]["resourceVersion"] = str(self._next_rv())
        self._bucket(rt)[self._key(rt, current["metadata"].get("namespace"), name)] = merged
        self._record("MODIFIED", rt, merged, current)
        return clone(merged)

    def _merge_for(
        self, rt: ResourceType, current: JsonObj, new: JsonObj, subresource: str | None
    ) -> JsonObj:
        """The object to store: a status write keeps all but status, a main write keeps status."""
        if subresource == "status":
            merged = clone(current)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            return merged
        merged = new
        merged["apiVersion"], merged["kind"] = rt.api_version, rt.kind
        meta = merged.setdefault("metadata", {})
        for fixed in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            if fixed in current["metadata"]:
                meta[fixed] = current["metadata"][fixed]
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if rt.status_subresource:
            if "status" in current:
                merged["status"] = current["status"]
            else:
                merged.pop("status", None)
        if rt.storage_key == ("batch", "jobs"):
            default_job(merged)
        return merged

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, Any] | None = None,
    ) -> JsonObj:
        """DELETE (immediately, no finalizers): returns the object as it was; records DELETED."""
        current = self._current(rt, namespace, name)
        self._check_preconditions(rt, current, preconditions or {})
        del self._bucket(rt)[self._key(rt, current["metadata"].get("namespace"), name)]
        final = clone(current)
        final["metadata"]["resourceVersion"] = str(self._next_rv())
        self._record("DELETED", rt, final, current)
        return clone(current)

    def _check_preconditions(
        self, rt: ResourceType, current: JsonObj, preconditions: Mapping[str, Any]
    ) -> None:
        meta = current["metadata"]
        name = meta["name"]
        uid = preconditions.get("uid")
        if uid and uid != meta["uid"]:
            raise conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{meta['uid']}",
            )
        rv = preconditions.get("resourceVersion")
        if rv and rv != meta["resourceVersion"]:
            raise conflict(
                rt,
                name,
                f"Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion "
                f"in object meta: {meta['resourceVersion']}",
            )


_NAMESPACES = RESOURCES[0]


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f'invalid resource version "{text}"') from None
    if value < 0:
        raise bad_request(f'invalid resource version "{text}"')
    return value
