"""What the webhook answers: an AdmissionReview v1 in, an AdmissionReview v1 out.

What it does: a job of a kind Usher admits (``usher.core.intake.workload.suspend_path``), created
in a
managed namespace (labelled ``usher.io/managed: "true"``, or mapped by a valid quota tree: its
namespace is a leaf's, or its quota label names a leaf) with its suspend flag not true, gets a
``JSONPatch`` that sets it true, so it waits for the ledger's admission like every other job.
An UPDATE of such a job that was not suspended (in the old object) is refused when it changes
a field frozen while it runs (R16, ``usher.core.kinds.frozen``: its pod templates, requests
and pod counts), 403 ``Forbidden`` naming every such field, as Kueue's job webhooks refuse it;
a suspended job may change freely -- but no UPDATE may list an admission gate its old object
did not list (G1, ``usher.core.gates.admission``: gates are removed, never added).
Everything else (other kinds, other namespaces, already suspended, a child of another
controller such as a JobSet's Jobs) is allowed unchanged. A review that is neither of those
is allowed unchanged too: refusing it would block the cluster, and the watcher stops a job
that still slips through.
What it must never do: I/O, deny anything but a frozen field's change or an added admission
gate, or change anything but the suspend flag.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

from schemas import FieldError, QuotaNode
from usher.core.gates import admission
from usher.core.intake.workload import QUOTA_LABEL, suspend_path
from usher.core.kinds import family_of_kind_id
from usher.core.kinds.fields import dig
from usher.core.kinds.frozen import frozen_changes
from usher.core.tree.quota_tree import mapped_branch

MANAGED_LABEL = "usher.io/managed"
"""A namespace labelled ``"true"`` is managed even when no tree maps it (yet)."""


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def kind_of(request: dict[str, Any]) -> str:
    """``group/version/Kind`` of the reviewed object (``batch/v1/Job``), the core's kind id."""
    kind = _mapping(request.get("kind"))
    group, version = kind.get("group") or "", kind.get("version") or ""
    api_version = f"{group}/{version}" if group else str(version)
    return f"{api_version}/{kind.get('kind', '')}"


def managed(
    namespace: str, namespace_labels: dict[str, str], obj: dict[str, Any],
    trees: Iterable[QuotaNode],
) -> bool:  # fmt: skip
    """Whether Usher queues jobs of ``namespace`` (or this job's quota label)."""
    if namespace_labels.get(MANAGED_LABEL) == "true":
        return True
    quota = _mapping(_mapping(obj.get("metadata")).get("labels")).get(QUOTA_LABEL)
    quota_name = quota if isinstance(quota, str) and quota else None
    return any(mapped_branch(root, namespace, quota_name) is not None for root in trees)


def suspend_operations(obj: dict[str, Any], path: tuple[str, ...]) -> list[dict[str, Any]]:
    """The JSONPatch that sets ``spec.<path>`` true, creating what is missing on the way; empty
    when it is true already."""
    node: object = obj
    pointer = ""
    for depth, key in enumerate(("spec", *path)):
        if not isinstance(node, dict):
            return []  # not an object where one is due: the API server refuses it anyway
        if key not in node:
            value: object = True
            for inner in reversed(("spec", *path)[depth + 1 :]):
                value = {inner: value}
            return [{"op": "add", "path": f"{pointer}/{key}", "value": value}]
        node, pointer = node[key], f"{pointer}/{key}"
    if node is True:
        return []
    return [{"op": "replace", "path": pointer, "value": True}]


def controlled(obj: dict[str, Any]) -> bool:
    """Created by another controller (a JobSet's Jobs...): its owner is what Usher admits."""
    owners = _mapping(obj.get("metadata")).get("ownerReferences")
    return any(_mapping(o).get("controller") is True for o in owners or [])


def review_response(
    review: object, namespace_labels: dict[str, str], trees: Iterable[QuotaNode]
) -> dict[str, Any]:
    """The AdmissionReview answering ``review``: allowed, with the suspend patch if it needs one;
    refused when it changes a running job's frozen fields."""
    request = _mapping(_mapping(review).get("request"))
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    frozen = refused_for(request, namespace_labels, trees)
    if frozen:
        response["allowed"] = False
        response["status"] = {"code": 403, "reason": "Forbidden", "message": refusal(frozen)}
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }
    operations = patch_for(request, namespace_labels, trees)
    if operations:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(operations).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def refused_for(
    request: dict[str, Any], namespace_labels: dict[str, str], trees: Iterable[QuotaNode]
) -> list[FieldError]:
    """Why an UPDATE of a managed job is refused: the admission gates it adds (G1), then the
    frozen fields (R16) it changes while not suspended; empty: it is allowed."""
    family = family_of_kind_id(kind_of(request))
    old, new = _mapping(request.get("oldObject")), _mapping(request.get("object"))
    namespace = request.get("namespace")
    if request.get("operation") != "UPDATE" or family is None or not isinstance(namespace, str):
        return []
    if controlled(old) or not managed(namespace, namespace_labels, old, trees):
        return []
    annotations = [_mapping(obj.get("metadata")).get("annotations") for obj in (old, new)]
    added = admission.added(*annotations)
    refused = [] if added is None else [added]
    if dig(_mapping(old.get("spec")), family.suspend_path, []) is True:
        return refused  # suspended: it holds nothing, and is sized afresh when it is admitted
    return [*refused, *frozen_changes(family, old.get("spec"), new.get("spec"))]


def refusal(frozen: list[FieldError]) -> str:
    """The message of a refused update, each field as the API server names a forbidden one."""
    return "; ".join(f"{problem.path}: Forbidden: {problem.message}" for problem in frozen)


def patch_for(
    request: dict[str, Any], namespace_labels: dict[str, str], trees: Iterable[QuotaNode]
) -> list[dict[str, Any]]:
    obj = _mapping(request.get("object"))
    path = suspend_path(kind_of(request))
    namespace = request.get("namespace")
    if request.get("operation") != "CREATE" or path is None or not isinstance(namespace, str):
        return []
    if controlled(obj) or not managed(namespace, namespace_labels, obj, trees):
        return []
    return suspend_operations(obj, path)
