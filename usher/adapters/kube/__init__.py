"""Kubernetes adapter: the only way Usher reaches a Kubernetes API server.

What it does: a thin typed client over ``kubernetes_asyncio`` (list, watch, get, create, merge
patch, status replace, delete on any resource), typed errors built from the server's ``Status``
objects, and merge-patch computation.
What it must never do: decide anything, retry by itself, or log credentials.
"""

from usher.adapters.kube.client import (
    KubeClient,
    KubeConfigError,
    ListResult,
    Resource,
    WatchEvent,
    WatchEventType,
)
from usher.adapters.kube.errors import (
    AlreadyExists,
    Cause,
    Conflict,
    Invalid,
    JsonObj,
    KubeError,
    NotFound,
    Permanent,
    Transient,
    WatchExpired,
    error_from_status,
)
from usher.adapters.kube.patch import merge_diff

__all__ = [
    "AlreadyExists",
    "Cause",
    "Conflict",
    "Invalid",
    "JsonObj",
    "KubeClient",
    "KubeConfigError",
    "KubeError",
    "ListResult",
    "NotFound",
    "Permanent",
    "Resource",
    "Transient",
    "WatchEvent",
    "WatchEventType",
    "WatchExpired",
    "error_from_status",
    "merge_diff",
]
