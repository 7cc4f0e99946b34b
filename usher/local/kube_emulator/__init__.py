"""A Kubernetes API server emulator for tests and the embedded one-machine stack.

What it does: serves the real Kubernetes REST and watch protocol (discovery, list/get/create/
update/patch/delete, status subresource, chunked watches with resume, 410 Expired and
bookmarks, OpenAPI v2/v3 with field validation (``openapi``), Table printer columns
(``printers``)) on 127.0.0.1 from an in-memory store (``store``, over ``resources``,
``selectors``, ``patches``, ``errors`` and ``wire``), writes a kubeconfig for
``kubernetes_asyncio`` and kubectl, calls configured mutating admission webhooks on create
and update (``admission``), and can run a fake kubelet that moves unsuspended jobs to
completion and keeps a batch Job's pods (``pods``); a batch Job with ``emulator.usher.io/*``
annotations (``playbook``) has its pods played one by one and its status counted from them
(``played``). Asked to (``validate``, ``strict_namespaces``: ``usher up``'s cluster is), it
refuses what a real API server refuses, in its words: malformed built-in objects
(``validation``), custom resources against the CRDs of deploy/base/crds and their CEL rules
(``crd_schema``), objects in a namespace nobody created; it reads kubectl's protobuf bodies
of Namespaces and ConfigMaps (``protobuf``) and takes server-side apply. Kept on disk
(``journal``, the local stack's cluster), it journals every write before answering it.
What it must never do: pretend to be a production API server (no auth, no validating admission)
or listen on a public interface by default.
"""

from usher.local.kube_emulator.errors import ApiError
from usher.local.kube_emulator.kubelet import SIM_DURATION, SIM_RESULT, FakeKubelet
from usher.local.kube_emulator.resources import RESOURCES, ResourceType, find_resource, resource
from usher.local.kube_emulator.server import KubeEmulator
from usher.local.kube_emulator.store import Store

__all__ = [
    "RESOURCES",
    "SIM_DURATION",
    "SIM_RESULT",
    "ApiError",
    "FakeKubelet",
    "KubeEmulator",
    "ResourceType",
    "Store",
    "find_resource",
    "resource",
]
