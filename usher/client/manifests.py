"""Manifests for people: reading YAML files, checking them, building jobs, diffing for apply.

What it does: loads multi-document YAML into manifests (every problem named with its file and
document number); knows which kinds ``usher apply`` handles and where each lives in the API;
checks quota trees and job manifests with the pure core before anything is sent (so a person
reads the field path of a mistake at once, not later in the log); builds the suspended
``batch/v1`` Job that ``usher submit`` sends (Arena/jobctl style); and computes the merge patch
``apply`` sends to an existing object (three-way, like kubectl: keys the last apply set and
this one drops are removed, keys others set are kept).
What it must never do: do I/O beyond reading the file it is given, or touch the fields Usher
owns on a live workload (its suspend flag, the zone nodeSelector).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from schemas import Millis, WorkloadObserved
from usher.adapters.kube import JsonObj, Resource
from usher.client.errors import BadInput
from usher.core.intake.workload import QUOTA_LABEL, ZONE_LABEL, extract_workload
from usher.core.kinds import FAMILIES
from usher.core.model.errors import InputError, ValueRefused
from usher.core.tree.quota_tree import parse_tree
from usher.core.values import names, numbers, quantities, registry

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""The annotation kubectl keeps the last applied manifest in; shared, so both tools agree."""
SIM_DURATION = registry.SIM_DURATION.key
"""Seconds the emulator's fake kubelet runs a job before it completes."""

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class Kind:
    """A kind ``usher apply`` handles: its resource, and where a workload's suspend flag is."""

    resource: Resource
    suspend_path: tuple[str, ...] | None = None
    """Under ``spec``; None for kinds that are not workloads."""

    @property
    def label(self) -> str:
        """``job.batch``, ``elasticquotatree.scheduling.sigs.k8s.io``: how kubectl names it."""
        singular = self.resource.kind.lower()
        return f"{singular}.{self.resource.group}" if self.resource.group else singular

    @property
    def is_workload(self) -> bool:
        return self.suspend_path is not None

    @property
    def is_tree(self) -> bool:
        return self.resource.kind == "ElasticQuotaTree"


def _kind(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool = True,
    suspend: tuple[str, ...] | None = None,
) -> Kind:
    return Kind(Resource(group, version, plural, kind, namespaced), suspend)


_WORKLOADS = tuple(
    # Every registered job kind, at each version the emulator serves (one place: the registry).
    _kind(family.group, version, family.plural, family.kind, suspend=family.suspend_path)
    for family in FAMILIES
    for version in family.emulated_versions
)
KINDS: dict[tuple[str, str], Kind] = {
    (k.resource.api_version, k.resource.kind): k
    for k in (
        *_WORKLOADS,
        _kind("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", "ElasticQuotaTree"),
        _kind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
        _kind("", "v1", "namespaces", "Namespace", namespaced=False),
        _kind("", "v1", "nodes", "Node", namespaced=False),
        _kind("", "v1", "configmaps", "ConfigMap"),
    )
}
WORKLOAD_KINDS: tuple[str, ...] = tuple(family.kind for family in FAMILIES)
"""The names of the job kinds Usher admits (``Job``, ``TFJob``, ...), for messages."""
JOB = KINDS[("batch/v1", "Job")]


@dataclass(frozen=True)
class Document:
    """One manifest of a file, with where it came from (for messages)."""

    source: str
    index: int
    """1-based document number in the file."""
    manifest: JsonObj
    kind: Kind

    @property
    def where(self) -> str:
        return f"{self.source}: document {self.index}"

    @property
    def namespace(self) -> str | None:
        if not self.kind.resource.namespaced:
            return None
        meta = self.manifest.get("metadata") or {}
        return str(meta.get("namespace") or "default")

    @property
    def name(self) -> str:
        meta = self.manifest.get("metadata") or {}
        return str(meta.get("name") or "")

    @property
    def generate_name(self) -> str:
        meta = self.manifest.get("metadata") or {}
        return str(meta.get("generateName") or "")


# --------------------------------------------------------------------------- reading files


def read_yaml_documents(path: Path) -> list[object]:
    """Every YAML document of ``path`` (empty ones dropped); ``BadInput`` naming the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read ({type(exc).__name__})") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, source: str) -> list[object]:
    """Every document of a YAML text (empty ones dropped), refusing what YAML allows but no
    manifest needs: an alias inside its own anchor (a recursive structure every later walk
    would loop on) and aliases that expand past ``MAX_YAML_NODES`` (a "billion laughs" bomb,
    small on disk, exponential to walk). ``BadInput`` names the line or document."""
    loader = _YamlLoader(text)
    documents: list[object] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            _check_aliases(node, f"{source}: document {len(documents) + 1}")
            data = loader.construct_document(node)
            if data is not None:
                documents.append(data)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise BadInput(f"{source}:{where} invalid YAML: {problem}") from None
    except RecursionError:
        raise BadInput(f"{source}: invalid YAML: nested too deeply") from None
    finally:
        loader.dispose()
    return documents


MAX_YAML_NODES = 1_000_000
"""Nodes a YAML document may have once its aliases are expanded."""


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_aliases(root: yaml.Node, where: str) -> None:
    """``BadInput`` for a node that contains itself, or aliases that expand too far.

    An alias is the same node object as its anchor, so the document is a graph: a walk that
    meets a node already on its path found a cycle, and sizes are summed once per node
    (iterative, so neither a cycle nor a deep document exhausts the stack)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _yaml_children(node))
            if sizes[key] > MAX_YAML_NODES:
                raise BadInput(
                    f"{where}: YAML aliases expand to more than {MAX_YAML_NODES:,} nodes "
                    "(an alias bomb?); write the values out instead"
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            mark = node.start_mark
            raise BadInput(
                f"{where}: line {mark.line + 1} column {mark.column + 1}: recursive YAML "
                "alias: the node anchored here contains an alias to itself"
            )
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _yaml_children(node) if id(child) not in sizes)


def load_documents(path: Path) -> list[Document]:
    """The manifests of ``path``, each of a kind ``usher apply`` knows, checked by the core."""
    raw = read_yaml_documents(path)
    if not raw:
        raise BadInput(f"{path}: no manifests in the file")
    return documents_of(raw, str(path))


def documents_of(raw: list[object], source: str) -> list[Document]:
    """``raw`` manifests (parsed YAML or JSON), each of a kind ``usher apply`` knows, checked by
    the core; ``source`` names them in messages (a file, or who made them)."""
    documents: list[Document] = []
    problems: list[str] = []
    for index, item in enumerate(_flatten(raw), start=1):
        where = f"{source}: document {index}"
        if not isinstance(item, dict):
            problems.append(f"{where}: expected a manifest (a mapping), got {_type(item)}")
            continue
        api_version, kind_name = item.get("apiVersion"), item.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind_name, str):
            problems.append(f"{where}: apiVersion and kind are required")
            continue
        kind = KINDS.get((api_version, kind_name))
        if kind is None:
            problems.append(
                f"{where}: usher apply does not handle {kind_name} ({api_version}); "
                "use kubectl for it"
            )
            continue
        document = Document(source, index, item, kind)
        problems.extend(check_document(document))
        documents.append(document)
    if problems:
        raise BadInput(problems[0], problems)
    return documents


def _flatten(raw: list[object]) -> list[object]:
    """Documents, with ``kind: List`` expanded into its items (as kubectl does)."""
    out: list[object] = []
    for item in raw:
        if isinstance(item, dict) and item.get("kind") == "List" and "items" in item:
            items = item.get("items")
            out.extend(items if isinstance(items, list) else [items])
        else:
            out.append(item)
    return out


def check_document(document: Document) -> list[str]:
    """Problems the core finds in a manifest before it is sent, one line each."""
    meta = document.manifest.get("metadata")
    where = document.where
    if not isinstance(meta, dict):
        return [f"{where}: metadata is required"]
    if not document.name and not (document.kind.is_workload and document.generate_name):
        return [f"{where}: metadata.name is required"]
    label = f"{where} ({document.kind.resource.kind} {document.name or document.generate_name})"
    try:
        if document.kind.is_tree:
            parse_tree(document.manifest)
        elif document.kind.is_workload:
            extract_workload(
                document.manifest,
                created_ms=Millis(0),
                name=document.name or f"{document.generate_name}x",
            )
    except InputError as exc:
        return [
            f"{label}: {e.path + ': ' if e.path else ''}{e.message} [{e.code}]" for e in exc.errors
        ]
    return []


def workload_document(manifest: object, *, source: str, index: int) -> Document:
    """``manifest`` as a workload ``Document`` ``usher submit`` would create, checked by the core
    (``BadInput`` naming every problem: not a job kind, a field path and what is wrong)."""
    kind = None
    if isinstance(manifest, dict):
        kind = KINDS.get((str(manifest.get("apiVersion")), str(manifest.get("kind"))))
    if not isinstance(manifest, dict) or kind is None or not kind.is_workload:
        raise BadInput(f"usher submit takes job manifests ({', '.join(WORKLOAD_KINDS)})")
    document = Document(source, index, manifest, kind)
    problems = check_document(document)
    if problems:
        raise BadInput(problems[0], problems)
    return document


DRY_RUN_SUFFIX = "dry-run"
"""What stands for the generated part of a ``generateName`` in a dry run (nothing is created,
so the API server generates no name)."""


def observed_for_dry_run(document: Document, now: Millis) -> WorkloadObserved:
    """The ``WorkloadObserved`` the watcher would write for ``document`` created at ``now``:
    suspended, as ``usher submit`` creates it, in its namespace (``default`` when it names
    none, as the API server places it)."""
    manifest = suspended(document.manifest, document.kind)
    meta = dict(manifest.get("metadata") or {})
    meta.setdefault("namespace", document.namespace or "default")
    manifest["metadata"] = meta
    name = document.name or f"{document.generate_name}{DRY_RUN_SUFFIX}"
    return extract_workload(manifest, created_ms=now, name=name)


def _type(value: object) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


# --------------------------------------------------------------------------- apply


def _without(manifest: JsonObj) -> JsonObj:
    """What apply manages: the manifest minus status and server-owned metadata."""
    meta = dict(manifest.get("metadata") or {})
    owned = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
    annotations = dict(owned.get("annotations") or {})
    annotations.pop(LAST_APPLIED, None)
    if annotations:
        owned["annotations"] = annotations
    else:
        owned.pop("annotations", None)
    body = {k: v for k, v in manifest.items() if k not in ("status", "metadata")}
    body["metadata"] = owned
    return body


def for_create(document: Document) -> JsonObj:
    """The body to create: the manifest with the last-applied annotation (as kubectl does)."""
    body = _without(document.manifest)
    meta = body["metadata"]
    if not document.name:
        meta.pop("name", None)
        meta["generateName"] = document.generate_name
    meta.setdefault("annotations", {})[LAST_APPLIED] = _last_applied(document.manifest)
    return body


def _last_applied(manifest: JsonObj) -> str:
    return json.dumps(_without(manifest), sort_keys=True, separators=(",", ":"))


def apply_patch(document: Document, current: JsonObj) -> JsonObj | None:
    """The merge patch that applies ``document`` over ``current``; None when nothing changes.

    Three-way: ``current`` keys that differ from the manifest are set; keys the previous apply
    set (the last-applied annotation) and this manifest no longer has are removed; anything
    else (server defaults, what controllers and Usher wrote) is kept. A workload's suspend
    flag is Usher's, never changed by apply.
    """
    desired = _without(document.manifest)
    if document.kind.suspend_path is not None:
        desired = _keep_suspend(desired, current, document.kind.suspend_path)
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    try:
        last = json.loads(annotations.get(LAST_APPLIED) or "{}")
    except ValueError:
        last = {}
    patch = _three_way(last if isinstance(last, dict) else {}, current, desired)
    if not patch:
        return None
    new_last = _last_applied(document.manifest)
    if annotations.get(LAST_APPLIED) != new_last:
        meta = patch.setdefault("metadata", {})
        # The annotations may already be in the patch (keys to remove): add ours to them.
        keep = meta.get("annotations")
        meta["annotations"] = {**(keep if isinstance(keep, dict) else {}), LAST_APPLIED: new_last}
    return patch


def _keep_suspend(desired: JsonObj, current: JsonObj, path: tuple[str, ...]) -> JsonObj:
    """``desired`` with the live object's suspend flag (or without one when it has none)."""
    out = json.loads(json.dumps(desired))
    node: Any = out.get("spec")
    live: Any = current.get("spec")
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        live = live.get(key) if isinstance(live, dict) else None
    if isinstance(node, dict):
        if isinstance(live, dict) and path[-1] in live:
            node[path[-1]] = live[path[-1]]
        else:
            node.pop(path[-1], None)
    return dict(out)


def _three_way(last: Mapping[str, Any], current: Mapping[str, Any], desired: JsonObj) -> JsonObj:
    patch: JsonObj = {}
    for key, want in desired.items():
        have = current.get(key)
        if isinstance(want, dict) and isinstance(have, dict):
            before = last.get(key)
            sub = _three_way(before if isinstance(before, dict) else {}, have, want)
            if sub:
                patch[key] = sub
        elif key not in current or have != want:
            patch[key] = want
    for key, before in last.items():
        if key in desired or key not in current:
            continue
        have = current[key]
        if isinstance(before, dict) and isinstance(have, dict):
            # A map the last apply set and this one drops: remove only the keys it set, not
            # what others added (kubectl's last-applied keeps ``"annotations": {}``).
            sub = _three_way(before, have, {})
            if sub:
                patch[key] = sub
        else:
            patch[key] = None
    return patch


# --------------------------------------------------------------------------- submit


@dataclass(frozen=True)
class JobRequest:
    """What ``usher submit`` asks for: one suspended batch/v1 Job of identical pods."""

    namespace: str
    image: str
    name: str | None = None
    cpu: str | None = None
    memory: str | None = None
    gpu: str | None = None
    replicas: int = 1
    priority_class: str | None = None
    zone: str | None = None
    duration_s: float | None = None
    """Sets ``usher.io/sim-duration``: how long the emulator's fake kubelet runs it."""
    command: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    quota: str | None = None
    """Names a leaf explicitly (label ``quota.scheduling.alibabacloud.com/name``)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of the container (a fan-out's value, ``usher.client.fanout``)."""


def _check_name(value: str, what: str, problems: list[str]) -> None:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        problems.append(
            f"{what} {value!r} is not a valid name (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )


def _check_value(
    parse: Callable[..., object], raw: str, option: str, problems: list[str], **bounds: Any
) -> bool:
    """Whether the core's parser takes ``raw`` for ``option``; else why, into ``problems``."""
    try:
        parse(raw, option, name=option, **bounds)
    except ValueRefused as refused:
        problems.append(refused.message)
        return False
    return True


def job_manifest(request: JobRequest) -> JsonObj:
    """The suspended Job for ``request``; ``BadInput`` naming every bad parameter (by its name
    in ``JobRequest`` and ``Client.submit``, which the CLI's options share)."""
    problems: list[str] = []
    _check_name(request.namespace, "namespace", problems)
    if request.name is not None:
        _check_name(request.name, "name", problems)
    if not request.image.strip():
        problems.append("image must not be empty")
    _check_value(numbers.count, str(request.replicas), "replicas", problems, low=1)
    if request.duration_s is not None:
        _check_value(numbers.duration, _seconds(request.duration_s), "duration", problems)
    if request.zone:
        _check_value(names.zone_name, request.zone, "zone", problems)
    resources: dict[str, str] = {}
    for option, resource, value in (
        ("cpu", "cpu", request.cpu),
        ("memory", "memory", request.memory),
        ("gpu", "nvidia.com/gpu", request.gpu),
    ):
        if value is None:
            continue
        if _check_value(quantities.quantity, str(value), option, problems, resource=resource):
            resources[resource] = str(value)
    if not resources and not problems:
        problems.append("a job must request something: give cpu, memory or gpu")
    if problems:
        raise BadInput(problems[0], problems)
    labels = dict(request.labels)
    if request.zone:
        labels[ZONE_LABEL] = request.zone
    if request.quota:
        labels[QUOTA_LABEL] = request.quota
    meta: JsonObj = {"namespace": request.namespace}
    if request.name:
        meta["name"] = request.name
    else:
        meta["generateName"] = f"{image_stem(request.image)}-"
    if labels:
        meta["labels"] = labels
    if request.duration_s is not None:
        meta["annotations"] = {SIM_DURATION: _seconds(request.duration_s)}
    container: JsonObj = {
        "name": "main",
        "image": request.image,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }
    if request.command:
        container["command"] = list(request.command)
    if request.env:
        container["env"] = [{"name": k, "value": v} for k, v in request.env.items()]
    pod: JsonObj = {"containers": [container], "restartPolicy": "Never"}
    if request.priority_class:
        pod["priorityClassName"] = request.priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "suspend": True,
            "parallelism": request.replicas,
            "completions": request.replicas,
            "backoffLimit": 0,
            "template": {"spec": pod},
        },
    }


def image_stem(image: str) -> str:
    """``perl`` for ``docker.io/library/perl:5.34.0``: a readable generateName prefix."""
    stem = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0].lower()
    stem = re.sub(r"[^a-z0-9-]+", "-", stem).strip("-")[:40]
    return stem or "job"


def _seconds(value: float) -> str:
    if not math.isfinite(value):
        return str(value)  # refused by the duration parser, naming it
    return str(int(value)) if float(value).is_integer() else str(value)


def suspended(manifest: JsonObj, kind: Kind) -> JsonObj:
    """A copy of a workload manifest with its suspend flag set (so Usher decides when it runs)."""
    out = json.loads(json.dumps(manifest))
    if kind.suspend_path is None:
        return dict(out)
    node = out.setdefault("spec", {})
    for key in kind.suspend_path[:-1]:
        node = node.setdefault(key, {})
    node[kind.suspend_path[-1]] = True
    return dict(out)


def is_suspended(manifest: JsonObj, kind: Kind) -> bool:
    if kind.suspend_path is None:
        return True
    node: Any = manifest.get("spec")
    for key in kind.suspend_path:
        node = node.get(key) if isinstance(node, dict) else None
    return node is True
