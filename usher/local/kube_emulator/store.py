"""The in-memory object store of the Kubernetes API emulator (what etcd + the registry do).

What it does: keeps objects per resource type, stamps them (uid, creationTimestamp,
resourceVersion, generation), enforces the API server's write rules (optimistic concurrency,
status subresource, immutable identity, DNS-1123 names, labels and annotations that are maps
of strings and annotations of at most 256 KiB in all (``check_string_maps``),
AlreadyExists/NotFound; with ``strict_namespaces`` an existing namespace, with ``validate``
what ``validation`` and the CRDs' schemas and rules (``crd_schema``) refuse; a namespace's
deletion deletes what is in it), applies patches (``patches``), answers lists (filtered by
``selectors``, limit/continue) and keeps a bounded history of watch events under one global,
etcd-like resourceVersion counter. Writers and watchers are told about every change through
synchronous subscriptions (the change feed).
Stored objects are copy-on-write: a new version shares what it did not change with the one
before, and nothing reachable from a stored object is ever changed in place. Reads and writes
hand out copies unless asked for ``shared=True``: then the caller gets the stored object itself
(and, for a write, hands over its body), and must mutate neither (the emulator's server and
kubelet, which only serialize and read: a deep copy of each was a good part of its CPU).
What it must never do: network or file I/O, asyncio, sleeping; hand out an object it will later
mutate (stored objects are replaced, never changed in place); bump the resourceVersion for a
write that changes nothing.
"""

from __future__ import annotations

import base64
import json
import random
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from usher.local.kube_emulator.crd_schema import crd_causes
from usher.local.kube_emulator.errors import (
    already_exists,
    bad_request,
    conflict,
    expired,
    invalid,
    not_found,
    stale_conflict,
)
from usher.local.kube_emulator.patches import PatchType, apply_patch
from usher.local.kube_emulator.resources import RESOURCES, ResourceType
from usher.local.kube_emulator.selectors import Filter
from usher.local.kube_emulator.validation import (
    check_decodable,
    field_problems,
    same_checked_parts,
)
from usher.local.kube_emulator.wire import JsonObj, clone, rfc3339

Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects
EventType = Literal["ADDED", "MODIFIED", "DELETED"]

DEFAULT_HISTORY = 1000
CLUSTER_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
"""The namespaces every Kubernetes cluster starts with."""
GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s utilrand: no vowels, no 0/1/3
GENERATE_NAME_SUFFIX = 5
GENERATE_NAME_MAX_PREFIX = 58
MAX_CONTINUE_SNAPSHOTS = 256

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)

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


def _utcnow() -> datetime:
    return datetime.now(UTC)


_SUFFIXES = random.Random()  # seeded from the OS: names need not be unguessable, only unlikely
# to collide (the store retries a taken one), as the real server's math/rand suffixes


def _random_suffix() -> str:
    return "".join(_SUFFIXES.choices(GENERATE_NAME_ALPHABET, k=GENERATE_NAME_SUFFIX))


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


JOB_DEFAULTS = (("parallelism", 1), ("backoffLimit", 6), ("completionMode", "NonIndexed"),
                ("suspend", False))  # fmt: skip


def default_job(obj: JsonObj) -> None:
    """The defaults the real server fills into a batch/v1 Job spec (a new spec when one is
    missing: the one given may be shared with a stored version)."""
    spec = obj.setdefault("spec", {})
    missing = {key: value for key, value in JOB_DEFAULTS if key not in spec}
    if spec.get("completions") is None and spec.get("parallelism") is None:
        missing = {"completions": 1, **missing}
    if missing:
        obj["spec"] = {**spec, **missing}


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def label_namespace(rt: ResourceType, obj: JsonObj) -> None:
    """A namespace always carries its name as a label (the real server sets it, 1.21+)."""
    if rt.plural == "namespaces" and not rt.group:
        meta = obj["metadata"]
        meta["labels"] = {**(meta.get("labels") or {}), NAMESPACE_NAME_LABEL: meta["name"]}


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


MAX_ANNOTATIONS_BYTES = 256 * 1024
"""The real server's bound on all of an object's annotations, keys and values together."""


def _go_json_type(value: object) -> str | None:
    """How Go's JSON decoder names a value that is not a string (None: a string or null)."""
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "array" if isinstance(value, list) else "object"


def check_string_maps(rt: ResourceType, name: str, meta: JsonObj) -> None:
    """400 for labels or annotations that are not a map of strings (the real server's JSON
    decoding into ``map[string]string`` fails), 422 for annotations over 256 KiB in all."""
    for field in ("labels", "annotations"):
        values = meta.get(field)
        if values is None:
            continue
        if isinstance(values, dict):
            got = next((t for t in map(_go_json_type, values.values()) if t), None)
            wanted = "string"
        else:
            got, wanted = _go_json_type(values) or "string", "map[string]string"
        if got is not None:
            version = rt.api_version.rsplit("/", 1)[-1]
            raise bad_request(
                f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: json: '
                f"cannot unmarshal {got} into Go struct field ObjectMeta.metadata.{field} "
                f"of type {wanted}"
            )
    annotations = meta.get("annotations") or {}
    size = sum(len(k.encode()) + len((v or "").encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        message = f"Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"
        raise invalid(rt, name, [("FieldValueTooLong", "metadata.annotations", message)])


def check_object(rt: ResourceType, obj: JsonObj, name: str, *, with_schema: bool = True) -> None:
    """422 with every cause the real server finds in ``obj``: built-in validation, and (when
    ``with_schema``) its CRD's schema and CEL rules."""
    causes = field_problems(rt, obj) + (crd_causes(rt, obj) if with_schema else [])
    if causes:
        raise invalid(rt, name, causes)


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
        validate: bool = False,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        """``strict_namespaces``: refuse objects in a namespace that does not exist (a real
        cluster does; tests that need no namespaces leave it off). ``validate``: refuse what
        a real API server refuses in an object (``validation``: quantities, labels, pod specs)
        and check custom resources against the schemas and CEL rules of deploy/base/crds, as
        a cluster with Usher's CRDs does. Off, malformed objects get through, which is how
        tests reach Usher's own checks of a bad job or a bad tree."""
        self._objects: dict[tuple[str, str], dict[Key, JsonObj]] = {}
        self._history: deque[StoreEvent] = deque()
        self._history_size = history_size
        self._compacted_rv = 0
        self._rv = 0
        self._listeners: list[Listener] = []
        self._snapshots: dict[str, _Snapshot] = {}
        self._strict_namespaces = strict_namespaces
        self._validate = validate
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

    def get(
        self, rt: ResourceType, namespace: str | None, name: str, *, shared: bool = False
    ) -> JsonObj:
        """A copy of the object (``shared``: the stored object, never to mutate), or 404."""
        obj = self._bucket(rt).get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt, name)
        return obj if shared else clone(obj)

    def find(
        self, rt: ResourceType, namespace: str | None, name: str, *, shared: bool = False
    ) -> JsonObj | None:
        """A copy of the object (``shared``: the stored object, never to mutate), or None."""
        obj = self._bucket(rt).get(self._key(rt, namespace, name))
        return obj if obj is None or shared else clone(obj)

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

    def create(
        self, rt: ResourceType, namespace: str | None, body: JsonObj, *, shared: bool = False
    ) -> JsonObj:
        """POST: validate, stamp, store, record ADDED; returns a copy of the stored object
        (``shared``: ``body`` is handed over and the stored object itself comes back)."""
        obj = self._prepare_create(rt, namespace, body, shared=shared)
        bucket = self._bucket(rt)
        meta = obj["metadata"]
        if not meta.get("name"):
            meta["name"] = self._generated_name(rt, bucket, namespace, meta["generateName"])
        self._validate_name(rt, meta["name"])
        label_namespace(rt, obj)
        if self._validate:
            check_object(rt, obj, meta["name"])
        key = self._key(rt, namespace, meta["name"])
        if key in bucket:
            raise already_exists(rt, meta["name"])
        meta["resourceVersion"] = str(self._next_rv())
        bucket[key] = obj
        self._record("ADDED", rt, obj, None)
        return obj if shared else clone(obj)

    def _prepare_create(
        self, rt: ResourceType, namespace: str | None, body: JsonObj, *, shared: bool
    ) -> JsonObj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        check_identity(rt, body)
        if self._validate:
            check_decodable(rt, body)
        obj = dict(body) if shared else clone(body)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        self._check_namespace(rt, namespace, meta)
        check_string_maps(rt, str(meta.get("name") or ""), meta)
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

    def ensure_namespaces(self, names: Iterable[str]) -> None:
        """Create each namespace of ``names`` unless it is there."""
        for name in names:
            if self.find(_NAMESPACES, None, name) is None:
                self.create(_NAMESPACES, None, {"metadata": {"name": name}})

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
        shared: bool = False,
    ) -> JsonObj:
        """PUT: replace the object (or only its status) under optimistic concurrency
        (``shared``: ``body`` is handed over and the stored object itself comes back)."""
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
        new = dict(body) if shared else clone(body)
        return self._replace(rt, current, new, rv, subresource, shared=shared)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        kind: PatchType,
        body: Any,
        *,
        subresource: str | None = None,
        shared: bool = False,
    ) -> JsonObj:
        """PATCH: apply a merge/JSON patch; a resourceVersion in the result is a precondition
        (``shared``: the stored object itself comes back)."""
        current = self._current(rt, namespace, name)
        patched = self._patched(rt, current, kind, body)
        rv = str(patched.get("metadata", {}).get("resourceVersion") or "")
        return self._replace(rt, current, patched, rv, subresource, shared=shared)

    def patched(
        self, rt: ResourceType, namespace: str | None, name: str, kind: PatchType, body: Any
    ) -> JsonObj:
        """What ``patch`` would store (before the store's own merge rules); nothing is
        written (what the admission webhooks of an update are shown)."""
        return clone(self._patched(rt, self._current(rt, namespace, name), kind, body))

    def _patched(self, rt: ResourceType, current: JsonObj, kind: PatchType, body: Any) -> JsonObj:
        name = current["metadata"]["name"]
        patched = apply_patch(rt, name, current, kind, body)
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not a JSON object")
        check_identity(rt, patched)
        if patched.get("metadata", {}).get("name") != name:
            raise bad_request("metadata.name cannot be changed by a patch")
        return patched

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
        *,
        shared: bool = False,
    ) -> JsonObj:
        """Store ``new`` (owned by the store from here: its top level, and any part it shares
        with ``current`` is never changed) in place of ``current``."""
        name = current["metadata"]["name"]
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise stale_conflict(rt, name)
        if subresource != "status" and isinstance(new.get("metadata"), dict):
            check_string_maps(rt, name, new["metadata"])
        if self._validate and not same_checked_parts(rt, new, current):
            check_decodable(rt, new)  # what was stored decoded already
        merged = self._merge_for(rt, current, new, subresource)
        if self._validate and not same_checked_parts(rt, merged, current):
            # As with validation ratcheting: a write that leaves the spec alone (a status
            # write, a label) is not refused for what the spec already was.
            changed_spec = merged.get("spec") != current.get("spec")
            check_object(rt, merged, name, with_schema=changed_spec)
        if merged == current:  # a no-op write: no new resourceVersion, no event
            return current if shared else clone(current)
        if _spec_part(merged) != _spec_part(current):
            merged["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        merged["metadata"]["resourceVersion"] = str(self._next_rv())
        self._bucket(rt)[self._key(rt, current["metadata"].get("namespace"), name)] = merged
        self._record("MODIFIED", rt, merged, current)
        return merged if shared else clone(merged)

    def _merge_for(
        self, rt: ResourceType, current: JsonObj, new: JsonObj, subresource: str | None
    ) -> JsonObj:
        """The object to store: a status write keeps all but status, a main write keeps status.
        Its top level and metadata are new; what it did not change it shares with ``current``."""
        if subresource == "status":
            merged = {**current, "metadata": dict(current["metadata"])}
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            return merged
        merged = new
        merged["apiVersion"], merged["kind"] = rt.api_version, rt.kind
        meta = merged.setdefault("metadata", {})
        if isinstance(meta, dict):  # a patch that left metadata alone shares it: copy it
            meta = merged["metadata"] = dict(meta)
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
        label_namespace(rt, merged)
        return merged

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, Any] | None = None,
        shared: bool = False,
    ) -> JsonObj:
        """DELETE (immediately, no finalizers): returns the object as it was (``shared``: the
        stored object itself); records DELETED."""
        current = self._current(rt, namespace, name)
        self._check_preconditions(rt, current, preconditions or {})
        if rt.storage_key == _NAMESPACES.storage_key:
            self._delete_contents(name)
        del self._bucket(rt)[self._key(rt, current["metadata"].get("namespace"), name)]
        final = {**current, "metadata": {**current["metadata"]}}
        final["metadata"]["resourceVersion"] = str(self._next_rv())
        self._record("DELETED", rt, final, current)
        return current if shared else clone(current)

    def _delete_contents(self, namespace: str) -> None:
        """What the namespace controller does before a namespace goes: delete its objects."""
        for rt in _STORAGES:
            if rt.namespaced:
                for ns, name in sorted(self._bucket(rt)):
                    if ns == namespace:
                        self.delete(rt, ns, name)

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
_STORAGES = tuple({rt.storage_key: rt for rt in reversed(RESOURCES)}.values())
"""One served type per storage (the first listed of its versions)."""


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f'invalid resource version "{text}"') from None
    if value < 0:
        raise bad_request(f'invalid resource version "{text}"')
    return value
