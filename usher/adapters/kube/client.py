"""A thin typed client for the Kubernetes API over ``kubernetes_asyncio``.

What it does: builds an ``ApiClient`` from a kubeconfig and offers the handful of verbs Usher
needs on any resource (``Resource``: group, version, plural): paginated list (items plus the
list's resourceVersion), watch from a resourceVersion (bookmarks, server-side timeout, 410 Gone
and ``ERROR`` events raised as ``WatchExpired`` / typed errors), get, create, JSON merge patch
(optionally on a subresource), status replace and delete. Requests go through
``ApiClient.call_api`` so authentication, TLS and proxies are exactly what the official client
does; bodies are plain JSON dicts. List items always carry ``apiVersion`` and ``kind`` (a real
server omits them for built-in types), so callers can hand them to the core as manifests.
A kubeconfig ``tokenFile`` is re-read (at most every ``TOKEN_REFRESH_S``): kubernetes_asyncio's
kubeconfig loader reads it once, and the bound service-account token kubelet mounts expires
(an hour by default) and is rewritten in place, as client-go's file token source re-reads it.
What it must never do: decide anything, retry on its own (callers know what a retry means),
log a token or a kubeconfig, or swallow an error (every failure is a ``KubeError``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from pathlib import Path
from types import TracebackType

import aiohttp
import yaml
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration
from yarl import URL

from usher.adapters.kube.errors import (
    JsonObj,
    KubeError,
    Permanent,
    Transient,
    error_from_body,
    error_from_status,
)
from usher.adapters.kube.types import (
    KubeConfigError,
    ListResult,
    Resource,
    WatchEvent,
)

DEFAULT_REQUEST_TIMEOUT_S = 30.0
DEFAULT_PAGE_SIZE = 500
WATCH_READ_SLACK_S = 30.0
"""A watch is given up as dead when nothing (not even its end) arrives this long after the
server-side timeout should have closed it."""

MERGE_PATCH = "application/merge-patch+json"

TOKEN_REFRESH_S = 60.0
"""How old a token read from a ``tokenFile`` may get before the next request re-reads it
(kubelet rewrites a bound token when 80% of its life is gone: minutes of slack, at least)."""


_WATCH_TYPES: frozenset[str] = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


class KubeClient:
    """The Kubernetes verbs Usher uses, on JSON dicts, with typed errors."""

    def __init__(
        self, api: ApiClient, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> None:
        self._api = api
        self._timeout = request_timeout_s

    @classmethod
    async def from_kubeconfig(
        cls,
        path: Path,
        *,
        context: str | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        token_refresh_s: float = TOKEN_REFRESH_S,
    ) -> KubeClient:
        """A client for ``context`` (default: the current context) of the kubeconfig at
        ``path``; a ``tokenFile`` is re-read before a request once the token in use is
        ``token_refresh_s`` old."""
        try:
            api = await kube_config.new_client_from_config(config_file=str(path), context=context)
        except Exception as exc:  # the loader raises many types; all mean "unusable config"
            raise KubeConfigError(
                f"kubeconfig {path} is unusable: {type(exc).__name__}: {exc}"
            ) from exc
        _look_up_the_environment_once(api)
        token_file = _token_file(path, context)
        if token_file is not None:
            api.configuration.refresh_api_key_hook = TokenFile(token_file, token_refresh_s)
        return cls(api, request_timeout_s=request_timeout_s)

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ reads

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> ListResult:
        """Every object (following ``continue`` tokens) and the list's resourceVersion."""
        items: list[JsonObj] = []
        token = ""
        while True:
            query: list[tuple[str, str]] = [("limit", str(page_size))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            page = await self._json("GET", resource.path(namespace), query=query)
            items.extend(_with_type(resource, item) for item in page.get("items") or [])
            meta = page.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return ListResult(items, str(meta.get("resourceVersion") or ""))

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JsonObj:
        return await self._json("GET", resource.path(namespace, name))

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        timeout_s: int = 300,
        bookmarks: bool = True,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Events after ``resource_version`` until the server ends the watch (``timeout_s``).

        Raises ``WatchExpired`` when the version is too old (410, as an HTTP status or as an
        ``ERROR`` event), other ``KubeError``s for other failures.
        """
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_s)),
        ]
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._timeout, sock_read=timeout_s + WATCH_READ_SLACK_S
        )
        path = resource.path(namespace)
        response = await self._send("GET", path, query=query, client_timeout=timeout)
        try:
            await _raise_for_status(response)
            async for line in _lines(response):
                yield _watch_event(resource, line)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _connection_error("watch", resource.path(namespace), exc) from exc
        finally:
            response.close()

    # ------------------------------------------------------------------ writes

    async def create(self, resource: Resource, namespace: str | None, body: JsonObj) -> JsonObj:
        return await self._json("POST", resource.path(namespace), body=body)

    async def merge_patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: JsonObj,
        *,
        subresource: str | None = None,
    ) -> JsonObj:
        """RFC 7386 merge patch; a ``metadata.resourceVersion`` in it is a precondition."""
        path = resource.path(namespace, name, subresource)
        return await self._json("PATCH", path, body=patch, content_type=MERGE_PATCH)

    async def replace_status(
        self, resource: Resource, namespace: str | None, name: str, body: JsonObj
    ) -> JsonObj:
        """PUT the ``status`` subresource (``body`` must carry the current resourceVersion)."""
        return await self._json("PUT", resource.path(namespace, name, "status"), body=body)

    async def delete(self, resource: Resource, namespace: str | None, name: str) -> JsonObj:
        return await self._json("DELETE", resource.path(namespace, name))

    # ------------------------------------------------------------------ plumbing

    async def _json(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: JsonObj | None = None,
        content_type: str = "application/json",
    ) -> JsonObj:
        response = await self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _connection_error(method, path, exc) from exc
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            raise error_from_body(response.status, raw)
        try:
            decoded = json.loads(raw or b"{}")
        except ValueError as exc:
            raise Permanent(response.status, "BadResponse", f"{method} {path}: {exc}") from exc
        if not isinstance(decoded, dict):
            raise Permanent(response.status, "BadResponse", f"{method} {path}: not an object")
        return decoded

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: JsonObj | None = None,
        content_type: str = "application/json",
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout or self._timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _connection_error(method, path, exc) from exc
        return response


class TokenFile:
    """``refresh_api_key_hook`` of a configuration whose user has a ``tokenFile``: before a
    request, re-reads the file when the token in use is ``refresh_s`` old (an unreadable or
    empty file keeps the token in use: the API server says 401 when it is really stale)."""

    def __init__(self, path: Path, refresh_s: float = TOKEN_REFRESH_S) -> None:
        self.path = path
        self.refresh_s = refresh_s
        self._read_at = time.monotonic()  # the loader has just read it

    def __call__(self, configuration: Configuration) -> None:
        now = time.monotonic()
        if now - self._read_at < self.refresh_s:
            return
        try:
            token = self.path.read_text().strip()
        except OSError:
            return
        self._read_at = now
        if token:
            configuration.api_key["BearerToken"] = f"Bearer {token}"


def _token_file(kubeconfig: Path, context: str | None = None) -> Path | None:
    """The context's (default: the current context's) user's ``tokenFile`` (relative to the
    kubeconfig's folder)."""
    try:
        config = yaml.safe_load(kubeconfig.read_text())
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        user = users[contexts[context or config["current-context"]]["user"]]
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None
    token_file = user.get("tokenFile")
    if not isinstance(token_file, str) or not token_file:
        return None
    return kubeconfig.parent / token_file


def _look_up_the_environment_once(api: ApiClient) -> None:
    """Resolve the proxy from the environment now, not on every request.

    kubernetes_asyncio's session trusts the environment, so aiohttp looks up the proxy and
    ``~/.netrc`` for every request, each time in a worker thread (about 5% of the watcher's
    CPU, parsing the netrc file at every call). The API server does not change, so the proxy
    it needs (``HTTPS_PROXY``/``NO_PROXY``, as aiohttp reads them) is resolved once; the
    session is rebuilt on the same connection pool without the per-request lookups. A netrc
    login never applied: Kubernetes requests carry their own credentials.
    """
    rest = api.rest_client
    if not rest.proxy:
        try:
            proxy, auth = get_env_proxy_for_url(URL(str(api.configuration.host or "")))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {
                    **(rest.proxy_headers or {}),
                    "Proxy-Authorization": auth.encode(),
                }
    session: aiohttp.ClientSession = rest.pool_manager
    connector = session.connector
    session.detach()  # the pool stays open; only the old session lets go of it
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=_READ_BUFSIZE
    )


_READ_BUFSIZE = 2**21
"""Watch events of large objects exceed aiohttp's default buffer (kubernetes_asyncio's value)."""


def _with_type(resource: Resource, item: JsonObj) -> JsonObj:
    """A list item as a full manifest: built-in list items come without apiVersion and kind."""
    return {**item, "apiVersion": resource.api_version, "kind": resource.kind}


async def _raise_for_status(response: aiohttp.ClientResponse) -> None:
    if 200 <= response.status <= 299:
        return
    raw = await response.read()
    raise error_from_body(response.status, raw)


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Newline-delimited chunks of any size (``readline`` refuses lines above 128 KiB)."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _watch_event(resource: Resource, line: bytes) -> WatchEvent:
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise Transient(0, "BadWatchLine", f"undecodable watch line: {exc}") from exc
    kind = raw.get("type") if isinstance(raw, dict) else None
    obj = raw.get("object") if isinstance(raw, dict) else None
    if kind == "ERROR":
        raise error_from_status(500, obj)
    if kind not in _WATCH_TYPES or not isinstance(obj, dict):
        raise Transient(0, "BadWatchEvent", f"unexpected watch event type {kind!r}")
    if kind != "BOOKMARK":
        obj = {**obj, "apiVersion": resource.api_version, "kind": resource.kind}
    return WatchEvent(kind, obj)


def _connection_error(method: str, path: str, exc: BaseException) -> KubeError:
    detail = str(exc) or type(exc).__name__
    return Transient(0, "ConnectionError", f"{method} {path}: {type(exc).__name__}: {detail}")
