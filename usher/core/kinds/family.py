"""What one job kind family must say about itself, and the helpers the family modules share.

What it does: defines ``KindFamily`` -- one job kind in the API (group, plural, kind, served
versions), where its suspend flag is, how to read its pod sets out of a manifest, which merge
patch pins it to a zone, whether it has finished (``Outcome``) or still has active pods, and
what the emulator's fake kubelet writes into its status (``KubeletDriver``) -- and the small
readers those functions are built from (status conditions, RFC 3339 times, zone selectors).
How its pods are counted (ready, succeeded, failed) and found (a label selector) is its
``PodReader``.
What it must never do: do I/O, read a clock, or mutate a manifest it was given (the kubelet
drivers return a new status and never touch spec or metadata).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from schemas import Millis, Resources
from usher.core.kinds.fields import Errors, Raw

ZONE_LABEL = "usher.io/zone"
"""The node label (and job label) naming a zone."""

Spec = dict[str, Any]
Obj = dict[str, Any]
Phase = Literal["new", "running", "suspended", "finished"]


@dataclass(frozen=True)
class PodSetSource:
    """A pod set as found in the manifest, before its pod template is read.

    ``requests`` is set instead of a pod template by kinds that describe their pods in their
    own terms (a SparkApplication's cores and memory, an Argo Workflow's templates)."""

    name: str
    count: int
    template: object
    template_path: str
    name_path: str
    requests: Resources | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a finished workload ended."""

    succeeded: bool
    finished_ms: Millis | None
    min_success: int | None = None
    """Set when it succeeded because this many pods succeeded (``usher.io/min-success``, or
    a batch Job's ``spec.successPolicy``), before all of them did."""


@dataclass(frozen=True, slots=True)
class PodCounts:
    """How many of a workload's pods are ready, succeeded and failed, as its controller
    counts them in its status."""

    ready: int
    """Running with every container ready (succeeded pods are not counted here)."""
    succeeded: int
    failed: int


class PodReader(Protocol):
    """How to count a kind's pods and find them: the one place for it, per kind."""

    def counts(self, obj: Obj) -> PodCounts:
        """The counts the kind's controller keeps in the workload's status."""
        ...

    def selector(self, obj: Obj) -> str | None:
        """The label selector of the workload's own pods (in its namespace); None: unknown."""
        ...

    def pod_set(self, obj: Obj, pod: Obj) -> str:
        """The pod set of the workload ``obj`` that one of its pods belongs to."""
        ...

    def most_successes(self, obj: Obj) -> int | None:
        """The most pods of the workload that can ever succeed (what a minSuccess may ask);
        None: the kind cannot honour a minSuccess (its counts do not outlive stopping it)."""
        ...


class KubeletDriver(Protocol):
    """What the emulator's fake kubelet (and the kind's controller) writes for one kind."""

    def wants_suspended(self, obj: Obj) -> bool: ...
    def phase(self, obj: Obj) -> Phase: ...
    def run(self, obj: Obj, now: str) -> Obj: ...
    def suspend(self, obj: Obj, now: str) -> Obj: ...
    def finish(self, obj: Obj, now: str, failed: bool) -> Obj: ...


@dataclass(frozen=True)
class KindFamily:
    """One job kind in the API, and everything Usher knows about its shape."""

    group: str
    plural: str
    kind: str
    versions: tuple[str, ...]
    """Versions to try, preferred first; every version shows the same objects (one storage)."""
    emulated_versions: tuple[str, ...]
    """The versions the Kubernetes emulator serves and ``usher apply`` sends, in that order."""
    suspend_path: tuple[str, ...]
    """Under ``spec``."""
    pod_sets: Callable[[Raw, Errors], list[PodSetSource]]
    """The pod sets of a ``spec``, every problem reported with its field path."""
    templates: Callable[[Spec], list[object]]
    """The pod templates of a spec (each a mapping whose ``spec`` holds the ``nodeSelector``)."""
    selector_patch: Callable[[Spec, str], Spec]
    """The ``spec`` part of a merge patch that pins every pod template to a zone."""
    outcome: Callable[[Obj], Outcome | None]
    active: Callable[[Obj], bool]
    kubelet: KubeletDriver | None
    """What the emulator's fake kubelet does with it; None: the emulator only stores it."""
    pods: PodReader | None = None
    """How its pods are counted and found; None: not known for this kind (no progress is
    reported for it, and it cannot declare a minSuccess)."""
    priority_class_path: tuple[str, ...] | None = None
    """Under ``spec``: a workload-level priority class that wins over the pod templates'."""
    supported: bool = True
    """False for a kind Usher does not admit: observed only to be rejected, never patched."""
    builtin: bool = False
    """Served by Kubernetes itself (no CustomResourceDefinition)."""
    short_names: tuple[str, ...] = ()
    """What ``kubectl get`` also accepts for it (``sparkapp``, ``wf``)."""
    scalable_pod_set: str | None = None
    """The pod set that may start with fewer pods (partial admission, R11); None: none may."""
    count_patch: Callable[[int], Spec] | None = None
    """The ``spec`` part of a merge patch that runs ``scalable_pod_set`` with that many pods."""
    deadline_path: tuple[str, ...] | None = None
    """Under ``spec``: the kind's own maximum runtime in seconds, which Kubernetes enforces (a
    batch Job's ``activeDeadlineSeconds``); None: Usher reads none (RT1, ``kinds.runtime``)."""

    @property
    def storage(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def api_versions(self) -> tuple[str, ...]:
        """``group/version`` of every version, preferred first (``batch/v1``)."""
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)

    @property
    def kind_ids(self) -> tuple[str, ...]:
        """``apiVersion/Kind`` of every version, as ``WorkloadObserved.kind`` writes it."""
        return tuple(f"{api_version}/{self.kind}" for api_version in self.api_versions)


# --------------------------------------------------------------------------- small readers


def mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def spec_of(obj: Obj) -> Spec:
    return mapping(obj.get("spec"))


def status_of(obj: Obj) -> dict[str, Any]:
    return mapping(obj.get("status"))


def count_of(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_time_ms(value: object) -> Millis | None:
    """RFC 3339 timestamp (``2024-04-08T02:04:17Z``) to epoch milliseconds; None if absent/bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return Millis(int(moment.timestamp() * 1000))


def true_condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    for condition in as_list(status_of(obj).get("conditions")):
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition if condition.get("status") == "True" else None
    return None


def outcome_from_conditions(obj: Obj, success: str, failure: str) -> Outcome | None:
    for kind, succeeded in ((success, True), (failure, False)):
        condition = true_condition(obj, kind)
        if condition is not None:
            return Outcome(succeeded, parse_time_ms(condition.get("lastTransitionTime")))
    return None


def with_selector(item: object, path: tuple[str, ...], zone: str) -> object:
    """A copy of ``item`` whose pod template at ``path`` selects nodes of ``zone``."""
    if not isinstance(item, dict):
        return item
    copied = copy.deepcopy(item)
    node: dict[str, Any] = copied
    for key in (*path, "spec"):
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    selector = node.get("nodeSelector")
    node["nodeSelector"] = {**(selector if isinstance(selector, dict) else {}), ZONE_LABEL: zone}
    return copied


def selector(zone: str) -> Spec:
    """A pod template fragment selecting the nodes of ``zone``."""
    return {"spec": {"nodeSelector": {ZONE_LABEL: zone}}}


# --------------------------------------------------------------------------- kubelet helpers


def condition_true(status: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or []
    )


def set_condition(
    status: Obj,
    kind: str,
    value: bool,
    reason: str,
    message: str,
    now: str,
    *,
    only_if_present: bool = False,
) -> bool:
    """Set condition ``kind``; returns whether it transitioned (a new lastTransitionTime)."""
    conditions: list[Obj] = status.setdefault("conditions", [])
    wanted = "True" if value else "False"
    for i, cond in enumerate(conditions):
        if cond.get("type") == kind:
            if cond.get("status") == wanted:
                return False
            conditions[i] = {**cond, "status": wanted, "reason": reason, "message": message}
            conditions[i]["lastTransitionTime"] = now
            if "lastProbeTime" in cond or "lastUpdateTime" not in cond:
                conditions[i]["lastProbeTime"] = now
            return True
    if only_if_present:
        if not conditions:
            del status["conditions"]
        return False
    conditions.append(
        {
            "type": kind,
            "status": wanted,
            "lastProbeTime": now,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        }
    )
    return True


def status_copy(obj: Obj) -> Obj:
    """A copy of the status to write a new one from (the stored object stays as it was)."""
    return copy.deepcopy(obj.get("status") or {})


def spec_dict(obj: Obj) -> Obj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def replicas_of(spec: Any) -> int:
    value = spec.get("replicas", 1) if isinstance(spec, dict) else 1
    return value if isinstance(value, int) else 1
