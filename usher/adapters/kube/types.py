"""The Kubernetes adapter's plain types: resources, list results, watch events, config errors.

What it does: names a served resource (``Resource``: group, version, plural, kind, and its URL
paths) and the shapes ``KubeClient`` returns. Kept apart from ``usher.adapters.kube.client`` so
that code which only names a resource (the client library's manifest kinds, ``usher jobs``)
does not import ``kubernetes_asyncio`` and ``aiohttp``.
What it must never do: import a network client or talk to a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from usher.adapters.kube.errors import JsonObj

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


class KubeConfigError(Exception):
    """The kubeconfig is missing or unusable; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class Resource:
    """One served resource: where it lives in the API and what kind its objects are."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage(self) -> tuple[str, str]:
        """``(group, plural)``: every version of one resource shows the same objects."""
        return (self.group, self.plural)

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path: a collection (all namespaces when ``namespace`` is None) or an object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource is not None:
                base += f"/{subresource}"
        return base


@dataclass(frozen=True, slots=True)
class ListResult:
    """A complete list (all pages) and the resourceVersion to watch from."""

    items: list[JsonObj]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event; a ``BOOKMARK`` carries only ``metadata.resourceVersion``."""

    type: WatchEventType
    object: JsonObj

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")
