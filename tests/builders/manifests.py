"""Builders of the Kubernetes objects tests hand to the emulator, the watcher, the webhook or the
scenario loader: containers, pod templates, batch Jobs and ElasticQuotaTrees, as plain dicts.
Only what a caller asks for is set (an omitted field stays absent, never defaulted here), so
each test states the shape it depends on. Pure values; never talks to a cluster."""

from __future__ import annotations

from typing import Any

JsonObj = dict[str, Any]

TREE_API = "scheduling.sigs.k8s.io/v1beta1"


def container(
    name: str = "main",
    image: str | None = "busybox",
    *,
    cpu: object = None,
    memory: str | None = None,
    command: list[str] | None = None,
) -> JsonObj:
    """A container requesting ``cpu`` and ``memory`` when given (no resources otherwise)."""
    out: JsonObj = {"name": name}
    if image is not None:
        out["image"] = image
    if command is not None:
        out["command"] = command
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    if requests:
        out["resources"] = {"requests": requests}
    return out


def pod_template(
    *containers: JsonObj,
    restart_policy: str | None = "Never",
    priority_class: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> JsonObj:
    """``{"spec": ...}`` of a pod running ``containers``."""
    spec: JsonObj = {}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    spec["containers"] = list(containers)
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {"spec": spec}


def batch_job(
    name: str | None,
    namespace: str | None = None,
    *,
    template: JsonObj,
    suspend: bool | None = True,
    parallelism: int | None = None,
    completions: int | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    generate_name: str | None = None,
    spec: JsonObj | None = None,
) -> JsonObj:
    """A ``batch/v1`` Job; ``suspend=None`` leaves the field out, ``spec`` adds fields."""
    metadata = _given(
        name=name,
        generateName=generate_name,
        namespace=namespace,
        labels=labels,
        annotations=annotations,
    )
    job_spec = _given(suspend=suspend, parallelism=parallelism, completions=completions)
    job_spec["template"] = template
    job_spec.update(spec or {})
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def elastic_quota_tree(
    root: JsonObj, name: str = "elasticquotatree", namespace: str = "kube-system"
) -> JsonObj:
    """An ElasticQuotaTree object whose spec holds ``root``."""
    return {
        "apiVersion": TREE_API,
        "kind": "ElasticQuotaTree",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"root": root},
    }


def sleeping_job(
    name: str,
    namespace: str,
    *,
    cpu: str,
    memory: str,
    pods: int = 1,
    annotations: dict[str, str] | None = None,
    spec: JsonObj | None = None,
) -> JsonObj:
    """A suspended Job of ``pods`` pods (parallelism and completions), each one ``main``
    container sleeping a day asking ``cpu`` and ``memory``: what an end-to-end test submits."""
    main = container(cpu=cpu, memory=memory, command=["sleep", "1d"])
    return batch_job(name, namespace, template=pod_template(main), parallelism=pods,
                     completions=pods, annotations=annotations, spec=spec)  # fmt: skip


def one_department_tree(
    namespace: str,
    *,
    root: dict[str, str],
    department: dict[str, str],
    attributes: dict[str, str] | None = None,
) -> JsonObj:
    """An ElasticQuotaTree of ``root`` over one ``Department-a`` holding ``namespace``, each with
    its quantities as both min and max; the department's ``attributes`` only when given."""
    leaf = {
        "name": "Department-a",
        "min": dict(department),
        "max": dict(department),
        "namespaces": [namespace],
        **_given(attributes=attributes),
    }
    return elastic_quota_tree({"name": "root", "min": dict(root), "max": dict(root),
                               "children": [leaf]})  # fmt: skip


def quota_node(
    name: str,
    *,
    max_cpu: str | None = None,
    min_cpu: str | None = None,
    namespaces: list[str] | None = None,
    attributes: dict[str, str] | None = None,
    children: list[JsonObj] | None = None,
) -> JsonObj:
    """A node of an ElasticQuotaTree's spec in cpu, as a manifest writes it; ``min_cpu``,
    ``namespaces``, ``attributes`` and ``children`` are set only when given."""
    return {
        "name": name,
        **_given(
            max=None if max_cpu is None else {"cpu": max_cpu},
            min=None if min_cpu is None else {"cpu": min_cpu},
            namespaces=namespaces,
            attributes=attributes,
            children=children,
        ),
    }


def _given(**fields: object) -> JsonObj:
    """The fields a caller gave, in order: one left as None stays absent."""
    return {key: value for key, value in fields.items() if value is not None}
