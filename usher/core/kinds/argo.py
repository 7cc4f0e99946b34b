"""Argo Workflows' Workflow (argoproj.io/v1alpha1).

What it does: a Workflow runs one pod per step that uses a ``container``, ``script`` or
``containerSet`` template, and Usher cannot know ahead which steps run together (steps, DAGs,
loops and retries decide that at run time). So it reserves the one bound the Workflow states
itself: ``spec.parallelism`` pods at once, each as large as the largest pod-running template,
resource by resource. That is one pod set ``main`` of ``spec.parallelism`` pods whose per-pod
requests are the per-resource maximum over the templates, each template's pod being its main
container(s) plus its ``sidecars`` (which run alongside), at least any one of its
``initContainers``. The reservation is never smaller than what the Workflow can run at once,
so a Workflow without ``spec.parallelism`` (unbounded) is rejected, as is one that only
references a WorkflowTemplate (``spec.workflowTemplateRef``: its templates are not in the
manifest). The executor's ``wait`` sidecar is injected by the controller from its own
configuration, not from the manifest, and is not counted.
Suspension is the Workflow's real ``spec.suspend`` (``argo suspend`` sets it): the controller
starts no new pod while it is true. The zone goes into the Workflow-level ``spec.nodeSelector``,
which the controller applies to every pod. It has finished when ``status.phase`` is
``Succeeded`` or ``Failed``/``Error`` (``status.finishedAt``); it is active while a ``Pod`` node
of ``status.nodes`` is Pending or Running (a suspended Workflow lets running pods finish).
What it must never do: do I/O, read a clock, or mutate a manifest it was given.
"""

from __future__ import annotations

from schemas import Resources
from usher.core.kinds.family import (
    ZONE_LABEL,
    KindFamily,
    Obj,
    Outcome,
    Phase,
    PodSetSource,
    Spec,
    condition_true,
    mapping,
    parse_time_ms,
    set_condition,
    spec_dict,
    status_copy,
    status_of,
)
from usher.core.kinds.fields import (
    Errors,
    Raw,
    add_resources,
    container_list,
    container_requests,
    count,
    error,
    max_resources,
    optional_list,
    optional_mapping,
    required_mapping,
)

MAIN_POD_SET = "main"
_POD_TEMPLATES = ("container", "script", "containerSet")
_DONE = {"Succeeded": True, "Failed": False, "Error": False}
_LIVE_PODS = frozenset({"Pending", "Running"})


def _pod_sets(spec: Raw, errors: Errors) -> list[PodSetSource]:
    if spec.get("workflowTemplateRef") is not None:
        message = (
            "spec.workflowTemplateRef is not admitted: the referenced WorkflowTemplate's "
            "templates are not in the manifest, so Usher cannot size the Workflow's pods"
        )
        errors.append(error("spec.workflowTemplateRef", "unsupported-field", message))
        return []
    pods = _parallelism(spec, errors)
    requests: Resources = {}
    found = False
    for index, raw in enumerate(optional_list(spec.get("templates"), "spec.templates", errors)):
        path = f"spec.templates[{index}]"
        template = required_mapping(raw, path, errors)
        if template is None or not any(template.get(field) is not None for field in _POD_TEMPLATES):
            continue
        found = True
        requests = max_resources(requests, _template_pod(template, path, errors))
    if not found:
        message = "spec.templates has no container, script or containerSet template: no pod runs"
        errors.append(error("spec.templates", "missing-field", message))
    kept = {resource: amount for resource, amount in sorted(requests.items()) if amount > 0}
    return [PodSetSource(MAIN_POD_SET, pods, None, "spec.templates", "spec", kept)]


def _parallelism(spec: Raw, errors: Errors) -> int:
    if spec.get("parallelism") is None:
        message = (
            "spec.parallelism is required: Usher reserves the pods a Workflow may run at once, "
            "and without it a Workflow's loops and DAGs are unbounded"
        )
        errors.append(error("spec.parallelism", "missing-field", message))
        return 0
    return count(spec.get("parallelism"), "spec.parallelism", errors)


def _template_pod(template: Raw, path: str, errors: Errors) -> Resources:
    """One pod of a template: its main container(s) plus sidecars, at least each init step."""
    running: Resources = {}
    for field in ("container", "script"):
        if template.get(field) is not None:
            main = required_mapping(template.get(field), f"{path}.{field}", errors)
            if main is not None:
                running = add_resources(
                    running, container_requests(main, f"{path}.{field}", errors)
                )
    if template.get("containerSet") is not None:
        set_path = f"{path}.containerSet"
        container_set = optional_mapping(template.get("containerSet"), set_path, errors)
        listed = container_set.get("containers")
        for index, item in enumerate(container_list(listed, f"{set_path}.containers", errors)):
            step = container_requests(item, f"{set_path}.containers[{index}]", errors)
            running = add_resources(running, step)
    for index, item in enumerate(
        container_list(template.get("sidecars"), f"{path}.sidecars", errors)
    ):
        running = add_resources(
            running, container_requests(item, f"{path}.sidecars[{index}]", errors)
        )
    init_path = f"{path}.initContainers"
    for index, item in enumerate(container_list(template.get("initContainers"), init_path, errors)):
        running = max_resources(running, container_requests(item, f"{init_path}[{index}]", errors))
    return running


def _templates(spec: Spec) -> list[object]:
    # The Workflow-level nodeSelector applies to every pod it runs: the spec is the one template.
    return [{"spec": spec}]


def _selector_patch(spec: Spec, zone: str) -> Spec:
    return {"nodeSelector": {ZONE_LABEL: zone}}


def _phase(obj: Obj) -> str:
    phase = status_of(obj).get("phase")
    return phase if isinstance(phase, str) else ""


def _outcome(obj: Obj) -> Outcome | None:
    phase = _phase(obj)
    if phase not in _DONE:
        return None
    return Outcome(_DONE[phase], parse_time_ms(status_of(obj).get("finishedAt")))


def _active(obj: Obj) -> bool:
    nodes = mapping(status_of(obj).get("nodes")).values()
    return any(
        mapping(node).get("type") == "Pod" and str(mapping(node).get("phase")) in _LIVE_PODS
        for node in nodes
    )


class WorkflowDriver:
    """Workflow: ``spec.suspend``; phase Running/Succeeded/Failed, Pod nodes, PodRunning."""

    def wants_suspended(self, obj: Obj) -> bool:
        return spec_dict(obj).get("suspend") is True

    def phase(self, obj: Obj) -> Phase:
        status = obj.get("status") or {}
        if _phase(obj) in _DONE:
            return "finished"
        if _phase(obj) != "Running":
            return "new"
        return "running" if condition_true(status, "PodRunning") else "suspended"

    def _nodes(self, obj: Obj, phase: str) -> Obj:
        name = obj["metadata"]["name"]
        pods = spec_dict(obj).get("parallelism", 1)
        pods = pods if isinstance(pods, int) and not isinstance(pods, bool) else 1
        nodes: Obj = {}
        for index in range(pods):
            node_id = f"{name}-{index}"
            nodes[node_id] = {"id": node_id, "name": f"{name}[{index}]", "type": "Pod",
                              "phase": phase}  # fmt: skip
        return nodes

    def run(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        status["phase"] = "Running"
        status.setdefault("startedAt", now)
        status["nodes"] = self._nodes(obj, "Running")
        set_condition(status, "PodRunning", True, "", "", now)
        return status

    def suspend(self, obj: Obj, now: str) -> Obj:
        status = status_copy(obj)
        status["phase"] = "Running"
        status.setdefault("startedAt", now)
        status["nodes"] = {}
        set_condition(status, "PodRunning", False, "", "", now)
        return status

    def finish(self, obj: Obj, now: str, failed: bool) -> Obj:
        status = status_copy(obj)
        phase = "Failed" if failed else "Succeeded"
        status["phase"] = phase
        status["finishedAt"] = now
        status["nodes"] = self._nodes(obj, phase)
        set_condition(status, "PodRunning", False, "", "", now)
        set_condition(status, "Completed", True, "", "", now)
        return status


FAMILIES: tuple[KindFamily, ...] = (
    KindFamily(
        group="argoproj.io",
        plural="workflows",
        kind="Workflow",
        versions=("v1alpha1",),
        emulated_versions=("v1alpha1",),
        suspend_path=("suspend",),
        pod_sets=_pod_sets,
        templates=_templates,
        selector_patch=_selector_patch,
        outcome=_outcome,
        active=_active,
        kubelet=WorkflowDriver(),
        short_names=("wf",),
        priority_class_path=("podPriorityClassName",),
    ),
)
