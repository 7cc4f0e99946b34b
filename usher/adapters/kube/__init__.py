"""Kubernetes adapter: the only way Usher reaches a Kubernetes API server.

What it does: a thin typed client over ``kubernetes_asyncio`` (list, watch, get, create, merge
patch, status replace, delete on any resource), typed errors built from the server's ``Status``
objects, and merge-patch computation.
What it must never do: decide anything, retry by itself, or log credentials.

``KubeClient`` is imported on first use: ``kubernetes_asyncio`` and ``aiohttp`` take a quarter
of a second, and a command that only names a resource or catches a ``KubeError`` (``usher
jobs``) must not pay for them.
"""

from typing import TYPE_CHECKING, Any

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
from usher.adapters.kube.types import (
    KubeConfigError,
    ListResult,
    Resource,
    WatchEvent,
    WatchEventType,
)

if TYPE_CHECKING:
    from usher.adapters.kube.client import KubeClient

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


def __getattr__(name: str) -> Any:
    """``KubeClient`` on first use (PEP 562), so that importing the package stays light."""
    if name == "KubeClient":
        from usher.adapters.kube.client import KubeClient

        return KubeClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
