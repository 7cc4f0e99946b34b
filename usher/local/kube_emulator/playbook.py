"""What the emulator's test and demo annotations make the pods of a batch Job do.

What it does: reads a Job's ``emulator.usher.io/*`` annotations into a ``Playbook`` (None for a
Job without any: the fake kubelet then keeps its whole-job timing, ``usher.io/sim-duration``)
and says, for one pod of it, what that pod does (``PodFate``) and where it stands a number of
seconds after it started (``Stage``):

- ``emulator.usher.io/never-ready-seconds: "N"``: pods run N seconds before they are ready (a
  readiness probe failing, an image still pulling); their run counts from then on.
- ``emulator.usher.io/pod-durations-seconds: "1,2,30"``: pod k runs the k-th duration once
  ready (k: its completion index for an Indexed Job, else the order it was created in; pods past
  the list run the last one); without it every pod runs ``usher.io/sim-duration`` (none: forever).
- ``emulator.usher.io/oom-below-memory: "6Gi"``: a container whose memory request (else limit)
  is below that is OOMKilled (exit code 137) when its run ends (at once when it has no duration).
- ``emulator.usher.io/fail-exit-code: "3"``: the containers exit with that code (reason
  ``Error``) when their run ends (at once when it has no duration); ``usher.io/sim-result:
  Failed`` is the same with exit code 1.

A value that does not parse is ignored, as an annotation a controller does not understand.
What it must never do: touch the store, read a clock, or decide anything about the Job's status
(the Job controller of the emulator counts what the pods did).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from usher.core.model.errors import InputError
from usher.core.model.quantity import parse_quantity
from usher.core.values import registry

PREFIX = "emulator.usher.io/"
NEVER_READY = f"{PREFIX}never-ready-seconds"
POD_DURATIONS = f"{PREFIX}pod-durations-seconds"
OOM_BELOW = f"{PREFIX}oom-below-memory"
FAIL_EXIT_CODE = f"{PREFIX}fail-exit-code"
SIM_DURATION = registry.SIM_DURATION.key
SIM_RESULT = "usher.io/sim-result"
OOM_EXIT_CODE = 137  # 128 + SIGKILL, as the kubelet reports an OOM kill


class Stage(StrEnum):
    """Where a pod stands."""

    STARTING = "starting"
    """Running, not ready yet."""
    READY = "ready"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class Ended:
    """How one container ended: Kubernetes' ``state.terminated`` reason and exit code."""

    reason: str
    exit_code: int


COMPLETED = Ended("Completed", 0)


@dataclass(frozen=True)
class Playbook:
    """What a Job's annotations say its pods do."""

    not_ready_s: float = 0.0
    durations: tuple[float, ...] = ()
    duration_s: float | None = None
    """Every pod's run when ``durations`` is empty; None: forever."""
    oom_below: int | None = None
    """Bytes."""
    exit_code: int | None = None


@dataclass(frozen=True)
class PodFate:
    """What one pod does, in seconds after it started."""

    ready_after: float
    ends_after: float | None
    """None: runs until stopped."""
    containers: tuple[tuple[str, Ended], ...]
    """How each container ends (by name)."""

    @property
    def fails(self) -> bool:
        return any(ended.exit_code != 0 for _, ended in self.containers)

    def stage(self, elapsed: float) -> Stage:
        if self.ends_after is not None and elapsed >= self.ends_after:
            return Stage.FAILED if self.fails else Stage.SUCCEEDED
        return Stage.READY if elapsed >= self.ready_after else Stage.STARTING

    def next_change(self, elapsed: float) -> float | None:
        """Seconds from ``elapsed`` until its stage changes next; None: never."""
        moments = [self.ready_after, self.ends_after]
        later = [m for m in moments if m is not None and m > elapsed]
        return min(later) - elapsed if later else None


def _annotations(job: dict[str, Any]) -> dict[str, Any]:
    annotations = (job.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def _sim_duration(annotations: dict[str, Any]) -> float | None:
    """``usher.io/sim-duration`` as the registry's parser reads it; None: none, or refused."""
    seconds = registry.SIM_DURATION.read(annotations)
    return float(seconds) if seconds is not None else None


def _seconds(raw: object) -> float | None:
    try:
        value = float(str(raw))
    except ValueError:
        return None
    return value if value >= 0 else None


def _memory(raw: object) -> int | None:
    try:
        return parse_quantity(raw, "memory", OOM_BELOW)
    except InputError:
        return None


def _exit_code(raw: object) -> int | None:
    try:
        value = int(str(raw))
    except ValueError:
        return None
    return value if 0 < value < 256 else None


def playbook(job: dict[str, Any]) -> Playbook | None:
    """The Job's playbook; None when it carries no ``emulator.usher.io/`` annotation."""
    annotations = _annotations(job)
    if not any(isinstance(k, str) and k.startswith(PREFIX) for k in annotations):
        return None
    durations = tuple(
        d
        for d in (_seconds(part) for part in str(annotations.get(POD_DURATIONS, "")).split(","))
        if d is not None
    )
    exit_code = _exit_code(annotations.get(FAIL_EXIT_CODE, ""))
    if exit_code is None and annotations.get(SIM_RESULT) == "Failed":
        exit_code = 1
    return Playbook(
        not_ready_s=_seconds(annotations.get(NEVER_READY, "")) or 0.0,
        durations=durations,
        duration_s=_sim_duration(annotations),
        oom_below=_memory(annotations.get(OOM_BELOW)) if OOM_BELOW in annotations else None,
        exit_code=exit_code,
    )


def _container_memory(container: dict[str, Any]) -> int:
    """The container's memory request, else its limit (a request defaults to the limit)."""
    resources = container.get("resources") or {}
    for part in ("requests", "limits"):
        raw = (resources.get(part) or {}).get("memory")
        if raw is not None:
            return _memory(raw) or 0
    return 0


def fate(book: Playbook, containers: list[Any], ordinal: int) -> PodFate:
    """What pod number ``ordinal`` of a Job with ``containers`` does under ``book``."""
    run = book.durations[min(ordinal, len(book.durations) - 1)] if book.durations else None
    if run is None:
        run = book.duration_s
    ended: list[tuple[str, Ended]] = []
    doomed = False
    for container in containers:
        if not isinstance(container, dict):
            continue
        end = COMPLETED
        if book.oom_below is not None and _container_memory(container) < book.oom_below:
            end = Ended("OOMKilled", OOM_EXIT_CODE)
        elif book.exit_code is not None:
            end = Ended("Error", book.exit_code)
        doomed = doomed or end.exit_code != 0
        ended.append((str(container.get("name", "")), end))
    if run is None and doomed:
        run = 0.0  # a doomed container fails as soon as it runs
    ends_after = None if run is None else book.not_ready_s + run
    return PodFate(ready_after=book.not_ready_s, ends_after=ends_after, containers=tuple(ended))
