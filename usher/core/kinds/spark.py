"""The Kubeflow Spark operator's SparkApplication (sparkoperator.k8s.io/v1beta2).

What it does: a SparkApplication is two pod sets, ``driver`` (1 pod) and ``executor``
(``spec.executor.instances`` pods, default 1; with ``spec.dynamicAllocation.enabled`` its
``maxExecutors`` when set, the most it may grow to). A Spark pod's requests come from the
application's own fields, as the operator builds the pods:
- cpu: ``coreRequest`` (a Kubernetes quantity) when set, else ``cores`` (default 1) whole cores;
- memory: ``memory`` (JVM notation: ``512m``, ``2g``; no suffix means MiB; default ``1g``) plus
  ``memoryOverhead`` when set, else ``max(factor x memory, 384MiB)`` where the factor is
  ``spec.memoryOverheadFactor``, else 0.4 for Python and R applications and 0.1 otherwise
  (Spark's defaults);
- ``gpu: {name, quantity}`` as that extended resource.
Suspension is the real ``spec.suspend`` field the operator reads (its reconciler moves an
application to SUSPENDING/SUSPENDED and back through RESUMING), so Usher holds a
SparkApplication exactly as it holds a Job. The zone goes into ``spec.driver.nodeSelector`` and
``spec.executor.nodeSelector`` (maps, which a merge patch reaches into). It has finished when
``status.applicationState.state`` is ``COMPLETED`` (succeeded) or ``FAILED``/
``SUBMISSION_FAILED`` (``status.terminationTime``); it is active while that state says the
driver or executors may still run. The fake kubelet writes those states and ``executorState``.
What it must never do: do I/O, read a clock, mutate a manifest it was given, or guess a
quantity it cannot read (a bad one is reported with its field path).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from schemas import Resources
from usher.core.kinds.family import (
    ZONE_LABEL,
    KindFamily,
    Obj,
    Outcome,
    Phase,
    PodSetSource,
    Spec,
    mapping,
    parse_time_ms,
    spec_dict,
    status_copy,
    status_of,
)
from usher.core.kinds.fields import (
    Errors,
    Raw,
    count,
    error,
    optional_mapping,
    optional_string,
    required_mapping,
)
from usher.core.model.errors import QuantityError
from usher.core.model.quantity import parse_quantity

DRIVER_POD_SET = "driver"
EXECUTOR_POD_SET = "executor"
_MIB = 2**20
_MIN_OVERHEAD = 384 * _MIB
_JVM_FACTOR, _NON_JVM_FACTOR = Fraction(1, 10), Fraction(2, 5)
_NON_JVM_TYPES = frozenset({"Python", "R"})
_JVM_UNITS = {"": 2**20, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
_JVM_SIZE = re.compile(r"^(\d+)([kmgtp]?)b?$")
_DEFAULT_MEMORY = "1g"
_SUCCEEDED = "COMPLETED"
_FAILED = frozenset({"FAILED", "SUBMISSION_FAILED"})
_ACTIVE = frozenset({"SUBMITTED", "RUNNING", "SUCCEEDING", "FAILING", "INVALIDATING", "SUSPENDING"})


def _pod_sets(spec: Raw, errors: Errors) -> list[PodSetSource]:
    factor = _overhead_factor(spec, errors)
    driver = required_mapping(spec.get("driver"), "spec.driver", errors)
    executor = required_mapping(spec.get("executor"), "spec.executor", errors)
    sources: list[PodSetSource] = []
    if driver is not None:
        requests = _pod_requests(driver, "spec.driver", factor, errors)
        sources.append(
            PodSetSource(DRIVER_POD_SET, 1, None, "spec.driver", "spec.driver", requests)
        )
    if executor is not None:
        pods = _executors(spec, executor, errors)
        requests = _pod_requests(executor, "spec.executor", factor, errors)
        sources.append(
            PodSetSource(EXECUTOR_POD_SET, pods, None, "spec.executor", "spec.executor", requests)
        )
    return sources


def _executors(spec: Raw, executor: Raw, errors: Errors) -> int:
    """Executor pods at most: ``maxExecutors`` under dynamic allocation, else ``instances``."""
    dynamic = optional_mapping(spec.get("dynamicAllocation"), "spec.dynamicAllocation", errors)
    if dynamic.get("enabled") is True and dynamic.get("maxExecutors") is not None:
        path = "spec.dynamicAllocation.maxExecutors"
        return count(dynamic.get("maxExecutors"), path, errors)
    return count(executor.get("instances"), "spec.executor.instances", errors)


def _overhead_factor(spec: Raw, errors: Errors) -> Fraction:
    raw = optional_string(spec.get("memoryOverheadFactor"), "spec.memoryOverheadFactor", errors)
    if raw is None:
        kind = spec.get("type")  # any JSON value: a list is not even hashable
        return _NON_JVM_FACTOR if isinstance(kind, str) and kind in _NON_JVM_TYPES else _JVM_FACTOR
    try:
        factor = Fraction(raw)
    except (ValueError, ZeroDivisionError):
        factor = Fraction(-1)
    if factor < 0:
        message = f"memoryOverheadFactor must be a non-negative number, got {raw!r}"
        errors.append(error("spec.memoryOverheadFactor", "invalid-quantity", message))
        return _JVM_FACTOR
    return factor


def _pod_requests(pod: Raw, path: str, factor: Fraction, errors: Errors) -> Resources:
    """What one driver or executor pod requests, as the operator sizes it."""
    requests: Resources = {"cpu": _cpu(pod, path, errors)}
    memory = _jvm_bytes(pod.get("memory", _DEFAULT_MEMORY), f"{path}.memory", errors)
    if pod.get("memoryOverhead") is not None:
        overhead = _jvm_bytes(pod.get("memoryOverhead"), f"{path}.memoryOverhead", errors)
    else:
        overhead = max(math.ceil(memory * factor), _MIN_OVERHEAD)
    requests["memory"] = memory + overhead
    gpu = optional_mapping(pod.get("gpu"), f"{path}.gpu", errors)
    if gpu:
        name = optional_string(gpu.get("name"), f"{path}.gpu.name", errors)
        quantity = count(gpu.get("quantity"), f"{path}.gpu.quantity", errors)
        if name:
            requests[name] = quantity
    return {resource: amount for resource, amount in sorted(requests.items()) if amount > 0}


def _cpu(pod: Raw, path: str, errors: Errors) -> int:
    if pod.get("coreRequest") is not None:
        try:
            return parse_quantity(pod.get("coreRequest"), "cpu", f"{path}.coreRequest")
        except QuantityError as failure:
            errors.extend(failure.errors)
            return 0
    return 1000 * count(pod.get("cores"), f"{path}.cores", errors)


def _jvm_bytes(raw: object, path: str, errors: Errors) -> int:
    """A JVM memory string (``512m``, ``2g``, ``4096``: MiB) in bytes, as Spark reads it."""
    text = raw.strip().lower() if isinstance(raw, str) else str(raw) if type(raw) is int else ""
    match = _JVM_SIZE.match(text)
    if match is None:
        message = f"must be a JVM memory size such as 512m or 2g, got {raw!r}"
        errors.append(error(path, "invalid-quantity", message))
        return 0
    return int(match.group(1)) * _JVM_UNITS[match.group(2)]


def _templates(spec: Spec) -> list[object]:
    # The driver and executor specs carry their own nodeSelector, like a pod spec does.
    return [{"spec": mapping(spec.get(part))} for part in ("driver", "executor")]


def _selector_patch(spec: Spec, zone: str) -> Spec:
    return {part: {"nodeSelector": {ZONE_LABEL: zone}} for part in ("driver", "executor")}


def _state(obj: Obj) -> str:
    state = mapping(status_of(obj).get("applicationState")).get("state")
    return state if isinstance(state, str) else ""


def _outcome(obj: Obj) -> Outcome | None:
    state = _state(obj)
    if state != _SUCCEEDED and state not in _FAILED:
        return None
    return Outcome(state == _SUCCEEDED, parse_time_ms(status_of(obj).get("terminationTime")))


def _active(obj: Obj) -> bool:
    return _state(obj) in _ACTIVE


class SparkDriver:
    """SparkApplication: ``spec.suspend``; ``applicationState`` RUNNING/SUSPENDED/COMPLETED."""

    def wants_suspended(self, obj: Obj) -> bool:
        return spec_dict(obj).get("suspend") is True

    def phase(self, obj: Obj) -> Phase:
        state = _state(obj)
        if state == _SUCCEEDED or state in _FAILED:
            return "finished"
        if state == "SUSPENDED":
            return "suspended"
        return "running" if state == "RUNNING" else "new"

    def _executor_state(self, obj: Obj, state: str) -> Obj:
        name = obj["metadata"]["name"]
        executor = mapping(spec_dict(obj).get("executor"))
        instances = executor.get("instances", 1)
        pods = instances if isinstance(instances, int) and not isinstance(instances, bool) else 1
        return {f"{name}-exec-{index}": state for index in range(1, pods + 1)}

    def run(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        status["applicationState"] = {"state": "RUNNING"}
        status["lastSubmissionAttemptTime"] = now
        status["submissionAttempts"] = int(status.get("submissionAttempts") or 0) + 1
        status["driverInfo"] = {"podName": f"{obj['metadata']['name']}-driver"}
        status["executorState"] = self._executor_state(obj, "RUNNING")
        status.pop("terminationTime", None)
        return status

    def suspend(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        status["applicationState"] = {"state": "SUSPENDED"}
        status.pop("executorState", None)
        status.pop("driverInfo", None)
        return status

    def finish(self, obj: Obj, now: str, failed: bool) -> Obj:
        status = status_copy(obj)
        state: Obj = {"state": "FAILED" if failed else _SUCCEEDED}
        if failed:
            state["errorMessage"] = "driver container failed"
        status["applicationState"] = state
        status["executorState"] = self._executor_state(obj, "FAILED" if failed else "COMPLETED")
        status["terminationTime"] = now
        return status


FAMILIES: tuple[KindFamily, ...] = (
    KindFamily(
        group="sparkoperator.k8s.io",
        plural="sparkapplications",
        kind="SparkApplication",
        versions=("v1beta2",),
        emulated_versions=("v1beta2",),
        suspend_path=("suspend",),
        pod_sets=_pod_sets,
        templates=_templates,
        selector_patch=_selector_patch,
        outcome=_outcome,
        active=_active,
        kubelet=SparkDriver(),
        short_names=("sparkapp",),
        priority_class_path=("batchSchedulerOptions", "priorityClassName"),
    ),
)
