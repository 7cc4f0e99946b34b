"""HTTP front of the Kubernetes API emulator: the real REST + watch protocol over aiohttp.

What it does: serves discovery (``/api``, ``/apis``, ``/version``, ``/openapi/v2`` and
``/openapi/v3`` from ``openapi``; ``fieldValidation=Strict`` refuses unknown fields and ``Warn``
warns about them, as kubectl's default validation expects), list/get/create/update/
patch/delete (and the status subresource) for the resources in ``resources.RESOURCES``, streams
watches as chunked newline-delimited JSON events (with resume, 410 Expired, bookmarks and
``timeoutSeconds``), renders ``Table`` responses for kubectl (``printers``), binds 127.0.0.1 on
a free port and writes a kubeconfig that the unmodified ``kubernetes_asyncio`` client and
kubectl can load.
Authentication as the real server does it for a bearer token: every request must carry
``Authorization: Bearer <token>`` with the emulator's token (random unless given, written to the
kubeconfig); a missing or wrong one is answered ``401 Unauthorized`` with a ``Status``, and no
request is looked at further. There is no authorization beyond that (one user, all verbs).
It serves HTTPS with a self-signed certificate made at start (for 127.0.0.1), given to clients
as the kubeconfig's ``certificate-authority-data``: kubectl sends a token only over TLS.
Creates, and updates (PUT or PATCH, the patch applied first) of an object itself, go through
the configured mutating admission webhooks first (``admission``), over real HTTPS.
What it must never do: keep state of its own besides open watches (the store is the truth);
block the event loop; listen on anything but the host it was given (127.0.0.1 by default).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import ipaddress
import json
import os
import secrets
import shutil
import socket
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from usher.local.kube_emulator import printers, protobuf
from usher.local.kube_emulator.admission import Admission, ServiceAddresses
from usher.local.kube_emulator.errors import ApiError, bad_request
from usher.local.kube_emulator.kubelet import FakeKubelet
from usher.local.kube_emulator.openapi import (
    unknown_fields,
    v2_document,
    v3_discovery,
    v3_document,
)
from usher.local.kube_emulator.patches import PatchType
from usher.local.kube_emulator.resources import RESOURCES, ResourceType, find_resource
from usher.local.kube_emulator.selectors import FieldSelector, Filter, LabelSelector
from usher.local.kube_emulator.store import Store, StoreEvent
from usher.local.kube_emulator.wire import JsonObj, encode_json

KUBE_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0+usher-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
PATCH_TYPES: dict[str, PatchType] = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
APPLY_PATCH = "application/apply-patch+yaml"
"""Server-side apply (``kubectl apply --server-side``): the whole intended object, in YAML."""
TABLE_CONTENT_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
CREATED_BY_APPLY = web.RequestKey("created_by_apply", bool)
"""Request key: a server-side apply created the object (201, as a POST)."""
FIELD_VALIDATION = ("Ignore", "Warn", "Strict")
WATCH_LINES_PER_WRITE = 256
"""A watch sends the events queued at once in one write, up to this many (the same lines,
fewer sends: a send per event was a sixth of the emulator's CPU under load)."""
TRUE_VALUES = frozenset({"1", "t", "T", "true", "TRUE", "True"})
CLUSTER_NAME = "usher-emulator"


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Target:
    """What a resource URL addresses."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool


def route_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def split_api_path(segments: list[str]) -> tuple[str, str, list[str]] | None:
    """``(group, version, rest)`` of ``/api/v1/...`` or ``/apis/<g>/<v>/...``."""
    if len(segments) >= 2 and segments[0] == "api":
        return "", segments[1], segments[2:]
    if len(segments) >= 3 and segments[0] == "apis":
        return segments[1], segments[2], segments[3:]
    return None


def resolve_target(group: str, version: str, rest: list[str]) -> Target:
    """The resource, namespace, name and subresource a path after the version names."""
    watch_path = bool(rest) and rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        scoped = find_resource(group, version, rest[2])
        if scoped is not None and scoped.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise route_not_found()
    rt = find_resource(group, version, rest[0])
    if rt is None:
        raise route_not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and (sub != "status" or not rt.status_subresource):
        raise route_not_found()
    if rt.namespaced and namespace is None and name is not None:
        raise route_not_found()
    return Target(rt, namespace, name, sub, watch_path)


def flag(query: Any, name: str) -> bool:
    return str(query.get(name, "")) in TRUE_VALUES


def int_param(query: Any, name: str) -> int:
    raw = query.get(name, "")
    if raw == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f'invalid value for {name}: "{raw}"') from None


def request_filter(target: Target, query: Any) -> Filter:
    return Filter(
        namespace=target.namespace,
        labels=LabelSelector.parse(query.get("labelSelector", "")),
        fields=FieldSelector.parse(query.get("fieldSelector", ""), target.rt),
    )


def patch_type(content_type: str) -> PatchType:
    kind = PATCH_TYPES.get(content_type.split(";")[0].strip().lower())
    if kind is None:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{', '.join(PATCH_TYPES)}",
        )
    return kind


async def json_body(request: web.Request) -> Any:
    media = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    decoded = protobuf.decode(await request.read()) if media == protobuf.MEDIA_TYPE else None
    if decoded is not None:  # kubectl create namespace / configmap: typed, in protobuf
        return decoded
    if media == APPLY_PATCH:
        try:
            return yaml.safe_load(await request.read() or b"null")
        except yaml.YAMLError as exc:
            raise bad_request(f"error decoding YAML: {exc}") from None
    if media and "json" not in media:
        # Protobuf of another kind is not decoded here: 415, as a server that cannot read it.
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types "
            f"include: application/json, {', '.join(PATCH_TYPES)}",
        )
    raw = await request.read()
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise bad_request(f"the body of the request is not valid JSON: {exc}") from None


def wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


# --------------------------------------------------------------------------- responses


def present(rt: ResourceType, obj: JsonObj) -> JsonObj:
    """The object as served at ``rt``'s version (versions share storage, as with a CRD)."""
    if obj.get("apiVersion") == rt.api_version:
        return obj
    return {**obj, "apiVersion": rt.api_version}


def list_item(rt: ResourceType, obj: JsonObj) -> JsonObj:
    """Built-in list items carry no kind/apiVersion; custom resource list items do."""
    if rt.builtin:
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    return present(rt, obj)


def json_response(
    body: Any, status: int = 200, content_type: str = "application/json"
) -> web.Response:
    return web.Response(
        body=encode_json(body),
        status=status,
        headers={"Content-Type": content_type},
    )


def error_response(err: ApiError) -> web.Response:
    return json_response(err.status(), status=err.code)


def openapi_response(request: web.Request, rest: list[str]) -> web.Response:
    """``/openapi/v2`` (JSON only: a client asking for protobuf alone gets 406) and
    ``/openapi/v3`` with one document per group/version, as kube-apiserver serves them."""
    if rest == ["v2"]:
        accept = request.headers.get("Accept", "")
        if accept and "json" not in accept and "*/*" not in accept:
            raise ApiError(406, "NotAcceptable", f"only application/json is served, not {accept}")
        return web.Response(body=v2_document(), headers={"Content-Type": "application/json"})
    if rest == ["v3"]:
        return json_response(v3_discovery())
    parts = split_api_path(rest[1:]) if rest[:1] == ["v3"] else None
    document = v3_document(parts[0], parts[1]) if parts is not None and not parts[2] else None
    if document is None:
        raise route_not_found()
    return web.Response(body=document, headers={"Content-Type": "application/json"})


def field_directive(query: Any) -> str:
    """The request's ``fieldValidation`` (empty when not given: unknown fields are dropped)."""
    value = str(query.get("fieldValidation", ""))
    if value and value not in FIELD_VALIDATION:
        raise bad_request(
            f"fieldValidation parameter unsupported: {value}; "
            f"must be one of {', '.join(FIELD_VALIDATION)}"
        )
    return value


def check_fields(rt: ResourceType, body: Any, directive: str) -> list[str]:
    """What the server says about fields the schema does not know: ``Strict`` refuses them
    (400, as a real server's strict decoding), ``Warn`` returns them as warnings."""
    if directive not in ("Strict", "Warn") or not isinstance(body, dict):
        return []
    unknown = [f for f in unknown_fields(rt, body) if "$" not in f]  # patch directives
    messages = [f'unknown field "{f}"' for f in unknown]
    if messages and directive == "Strict":
        raise bad_request(f"strict decoding error: {', '.join(messages)}")
    return messages


def warning_headers(messages: list[str]) -> dict[str, str]:
    """RFC 7234 ``Warning`` headers as kube-apiserver sends them (code 299, agent ``-``)."""
    if not messages:
        return {}
    return {"Warning": ", ".join('299 - "' + m.replace('"', '\\"') + '"' for m in messages)}


def watch_line(kind: str, obj: JsonObj) -> bytes:
    return encode_json({"type": kind, "object": obj}) + b"\n"


def bookmark(rt: ResourceType, rv: int, *, initial_events_end: bool = False) -> JsonObj:
    meta: JsonObj = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}


# --------------------------------------------------------------------------- discovery


def group_versions() -> dict[str, list[str]]:
    """Served groups (core excluded) and their versions, preferred version first."""
    groups: dict[str, list[str]] = {}
    for rt in RESOURCES:
        if rt.group and rt.version not in groups.setdefault(rt.group, []):
            groups[rt.group].append(rt.version)
    return groups


def api_group(name: str, versions: list[str]) -> JsonObj:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_resource_list(group: str, version: str) -> JsonObj | None:
    served = [rt for rt in RESOURCES if (rt.group, rt.version) == (group, version)]
    if not served:
        return None
    resources: list[JsonObj] = []
    for rt in served:
        entry: JsonObj = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        resources.append(entry)
        if rt.status_subresource:
            resources.append(
                {
                    "name": f"{rt.plural}/status",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


# --------------------------------------------------------------------------- the emulator


def self_signed_certificate(host: str) -> tuple[bytes, bytes]:
    """A fresh key and a one-year certificate for ``host`` (an IP), both PEM; it is its own CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "usher-kube-emulator")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def server_ssl_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS server context from PEM bytes (``ssl`` loads only files: a private temp dir)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    folder = Path(tempfile.mkdtemp(prefix="usher-kube-tls-"))  # mode 0700
    try:
        (folder / "cert.pem").write_bytes(cert_pem)
        key = os.open(folder / "key.pem", os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(key, "wb") as handle:
            handle.write(key_pem)
        context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return context


PUBLIC_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
"""What a real server's default RBAC (system:public-info-viewer) shows anyone."""


class KubeEmulator:
    """A Kubernetes API server on 127.0.0.1 backed by a :class:`Store` (+ optional kubelet).

    ``async with KubeEmulator(kubelet=True) as emu:`` then use ``emu.url``,
    ``emu.kubeconfig_path`` and ``emu.store``; or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: str | Path | None = None,
        store: Store | None = None,
        kubelet: bool = False,
        kubelet_speed: float = 1.0,
        bookmark_interval: float = 60.0,
        history_size: int = 1000,
        strict_namespaces: bool = False,
        validate: bool = False,
        token: str | None = None,
        tls_identity: tuple[bytes, bytes] | None = None,
        webhook_services: ServiceAddresses | None = None,
    ) -> None:
        self.store = store or Store(
            history_size=history_size, strict_namespaces=strict_namespaces, validate=validate
        )
        self.admission = Admission(self.store, webhook_services)
        """Mutating webhooks; ``webhook_services`` maps a webhook Service (namespace, name) to
        the ``host:port`` serving it (the emulator has no cluster DNS)."""
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.token = token or secrets.token_urlsafe(32)
        # A server restarted with the same token and certificate is the same server to its
        # clients (their kubeconfig stays valid), as a real API server across restarts.
        self.tls_identity = tls_identity or self_signed_certificate(host)
        self.certificate = self.tls_identity[0]
        self._ssl = server_ssl_context(*self.tls_identity)
        self.kubelet = FakeKubelet(self.store, speed=kubelet_speed) if kubelet else None
        self._kubeconfig_path = Path(kubeconfig_path) if kubeconfig_path else None
        self._tmpdir: Path | None = None
        self._runner: web.AppRunner | None = None
        self._watches: set[asyncio.Queue[StoreEvent | None]] = set()
        self.app = web.Application()
        self.app.router.add_route("*", "/{path:.*}", self._dispatch)

    # ---- lifecycle

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        if self._kubeconfig_path is None:
            raise RuntimeError("the emulator is not started")
        return self._kubeconfig_path

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(
            self.app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        await web.SockSite(self._runner, sock, ssl_context=self._ssl).start()
        self._write_kubeconfig()
        if self.kubelet is not None:
            self.kubelet.start()

    async def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        for queue in list(self._watches):
            queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    async def __aenter__(self) -> KubeEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def client_ssl_context(self) -> ssl.SSLContext:
        """What a client trusts to talk to this emulator (its own certificate)."""
        return ssl.create_default_context(cadata=self.certificate.decode())

    @property
    def auth_headers(self) -> dict[str, str]:
        """The header a client presents (what the kubeconfig's user does)."""
        return {"Authorization": f"Bearer {self.token}"}

    def kubeconfig(self) -> JsonObj:
        """A kubeconfig with one cluster, one token user and the current context."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CLUSTER_NAME,
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self.certificate).decode(),
                    },
                }
            ],
            "users": [{"name": CLUSTER_NAME, "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": CLUSTER_NAME,
                    "context": {
                        "cluster": CLUSTER_NAME,
                        "user": CLUSTER_NAME,
                        "namespace": "default",
                    },
                }
            ],
            "current-context": CLUSTER_NAME,
            "preferences": {},
        }

    def _write_kubeconfig(self) -> None:
        if self._kubeconfig_path is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="usher-kube-"))
            self._kubeconfig_path = self._tmpdir / "kubeconfig"
        self._kubeconfig_path.parent.mkdir(parents=True, exist_ok=True)
        # It holds the token: only its owner may read it, from the first byte on.
        partial = self._kubeconfig_path.with_name(f".{self._kubeconfig_path.name}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        os.replace(partial, self._kubeconfig_path)

    # ---- dispatch

    def _authenticated(self, request: web.Request) -> bool:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), self.token.encode()
        )

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.path not in PUBLIC_PATHS and not self._authenticated(request):
            # What kube-apiserver answers for a missing or unknown token.
            return error_response(ApiError(401, "Unauthorized", "Unauthorized"))
        try:
            return await self._route(request)
        except ApiError as err:
            return error_response(err)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        segments = [s for s in request.path.split("/") if s]
        if request.method != "GET" and not split_api_path(segments):
            raise method_not_allowed()
        discovery = self._discovery(request, segments)
        if discovery is not None:
            if request.method != "GET":
                raise method_not_allowed()
            return discovery
        parts = split_api_path(segments)
        if parts is None:
            raise route_not_found()
        target = resolve_target(*parts)
        if "dryRun" in request.query:
            raise bad_request("dryRun is not supported by the emulator")
        return await self._serve(request, target)

    def _discovery(self, request: web.Request, segments: list[str]) -> web.StreamResponse | None:
        """Answers for ``/version``, ``/healthz``, ``/api``, ``/apis`` and group/version roots."""
        if segments == ["version"]:
            return json_response(KUBE_VERSION)
        if segments[:1] == ["openapi"]:
            return openapi_response(request, segments[1:])
        if len(segments) == 1 and segments[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok", content_type="text/plain")
        if segments == ["api"]:
            return json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
                    ],
                }
            )
        groups = group_versions()
        if segments == ["apis"]:
            return json_response(
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [api_group(g, vs) for g, vs in groups.items()],
                }
            )
        if len(segments) == 2 and segments[0] == "apis" and segments[1] in groups:
            return json_response(
                {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    **api_group(segments[1], groups[segments[1]]),
                }
            )
        parts = split_api_path(segments)
        if parts is not None and not parts[2]:
            listing = api_resource_list(parts[0], parts[1])
            if listing is None:
                raise route_not_found()
            return json_response(listing)
        return None

    async def _serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        method, q = request.method, request.query
        if method == "GET" and target.name is None:
            if target.watch_path or flag(q, "watch"):
                return await self._watch(request, target)
            return self._list(request, target)
        if method == "GET" and target.name is not None:
            obj = self.store.get(target.rt, target.namespace, target.name, shared=True)
            return self._object_response(request, target.rt, obj)
        handler = self._write_handler(method, target)
        warnings: list[str] = []
        if method in ("POST", "PUT", "PATCH"):
            warnings = check_fields(target.rt, await json_body(request), field_directive(q))
        written = await handler(request, target)
        created = method == "POST" or request.get(CREATED_BY_APPLY, False)
        response = json_response(present(target.rt, written), 201 if created else 200)
        response.headers.update(warning_headers(warnings))
        return response

    def _write_handler(self, method: str, target: Target) -> Callable[[web.Request, Target], Any]:
        """Which write a method means on this URL (405 when none)."""
        if method == "POST" and target.name is None and not target.watch_path:
            if target.rt.namespaced and target.namespace is None:
                raise method_not_allowed()
            return self._create
        if method == "PUT" and target.name is not None:
            return self._update
        if method == "PATCH" and target.name is not None:
            return self._patch
        if method == "DELETE" and target.name is not None and target.subresource is None:
            return self._delete
        if method == "DELETE" and target.name is None:
            return self._delete_collection
        raise method_not_allowed()

    def _object_response(
        self, request: web.Request, rt: ResourceType, obj: JsonObj
    ) -> web.Response:
        if wants_table(request):
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            table = printers.table(rt, [obj], meta, self.store.now())
            return json_response(table, content_type=TABLE_CONTENT_TYPE)
        return json_response(present(rt, obj))

    # ---- verbs

    def _list(self, request: web.Request, target: Target) -> web.Response:
        q = request.query
        result = self.store.list_page(
            target.rt,
            request_filter(target, q),
            limit=int_param(q, "limit"),
            continue_token=q.get("continue", ""),
            resource_version=q.get("resourceVersion", ""),
            resource_version_match=q.get("resourceVersionMatch", ""),
        )
        meta: JsonObj = {"resourceVersion": str(result.resource_version)}
        if result.continue_token:
            meta["continue"] = result.continue_token
            meta["remainingItemCount"] = result.remaining
        if wants_table(request):
            table = printers.table(target.rt, result.items, meta, self.store.now())
            return json_response(table, content_type=TABLE_CONTENT_TYPE)
        return json_response(
            {
                "kind": target.rt.list_kind,
                "apiVersion": target.rt.api_version,
                "metadata": meta,
                "items": [list_item(target.rt, o) for o in result.items],
            }
        )

    async def _create(self, request: web.Request, target: Target) -> JsonObj:
        body = await self.admission.mutate(target.rt, target.namespace, await json_body(request))
        return self.store.create(target.rt, target.namespace, body, shared=True)

    async def _update(self, request: web.Request, target: Target) -> JsonObj:
        assert target.name is not None
        body = await json_body(request)
        if self._admits_update(target):
            old = self.store.get(target.rt, target.namespace, target.name)
            body = await self.admission.mutate(target.rt, target.namespace, body, old)
        return self.store.update(
            target.rt,
            target.namespace,
            target.name,
            body,
            subresource=target.subresource,
            shared=True,
        )

    async def _patch(self, request: web.Request, target: Target) -> JsonObj:
        assert target.name is not None
        if request.headers.get("Content-Type", "").split(";")[0].strip().lower() == APPLY_PATCH:
            return await self._apply(request, target)
        kind = patch_type(request.headers.get("Content-Type", ""))
        body = await json_body(request)
        rt, namespace, name = target.rt, target.namespace, target.name
        if self._admits_update(target):
            # As the API server: the patch is applied, the result goes through admission.
            old = self.store.get(rt, namespace, name)
            proposed = self.store.patched(rt, namespace, name, kind, body)
            admitted = await self.admission.mutate(rt, namespace, proposed, old)
            if admitted != proposed:  # a webhook changed it: that object is stored
                return self.store.update(rt, namespace, name, admitted, shared=True)
        return self.store.patch(
            rt, namespace, name, kind, body, subresource=target.subresource, shared=True
        )

    async def _apply(self, request: web.Request, target: Target) -> JsonObj:
        """Server-side apply, simplified: the applied object is created when missing, else
        merged into the stored one as a merge patch (no field ownership: fields another
        manager set are kept, fields the applier drops are not removed)."""
        assert target.name is not None
        body = await json_body(request)
        if not isinstance(body, dict):
            raise bad_request("the body of an apply patch must be an object")
        meta = body.setdefault("metadata", {})
        if meta.get("name", target.name) != target.name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({target.name})"
            )
        meta["name"] = target.name
        rt, namespace = target.rt, target.namespace
        if self.store.find(rt, namespace, target.name) is None:
            admitted = await self.admission.mutate(rt, namespace, body)
            request[CREATED_BY_APPLY] = True
            return self.store.create(rt, namespace, admitted, shared=True)
        body.get("metadata", {}).pop("resourceVersion", None)
        if self._admits_update(target):
            old = self.store.get(rt, namespace, target.name)
            proposed = self.store.patched(rt, namespace, target.name, "merge", body)
            admitted = await self.admission.mutate(rt, namespace, proposed, old)
            if admitted != proposed:
                return self.store.update(rt, namespace, target.name, admitted, shared=True)
        return self.store.patch(
            rt, namespace, target.name, "merge", body, subresource=target.subresource, shared=True
        )

    def _admits_update(self, target: Target) -> bool:
        """An update of the object itself (a subresource such as ``status`` is not what the
        webhooks' rules name) that some configured webhook has a rule for."""
        return target.subresource is None and self.admission.calls_on(target.rt, "UPDATE")

    async def _delete(self, request: web.Request, target: Target) -> JsonObj:
        assert target.name is not None
        options = await json_body(request) if request.can_read_body else None
        preconditions = options.get("preconditions") if isinstance(options, dict) else None
        return self.store.delete(
            target.rt, target.namespace, target.name, preconditions=preconditions, shared=True
        )

    async def _delete_collection(self, request: web.Request, target: Target) -> JsonObj:
        flt = request_filter(target, request.query)
        deleted = [
            self.store.delete(
                target.rt, o["metadata"].get("namespace"), o["metadata"]["name"], shared=True
            )
            for o in self.store.objects(target.rt, flt)
        ]
        return {
            "kind": target.rt.list_kind,
            "apiVersion": target.rt.api_version,
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": [list_item(target.rt, o) for o in deleted],
        }

    # ---- watch

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        """A chunked stream of watch events until timeoutSeconds, disconnect or shutdown."""
        q = request.query
        flt = request_filter(target, q)
        timeout = int_param(q, "timeoutSeconds")
        bookmarks = flag(q, "allowWatchBookmarks")
        initial_end = flag(q, "sendInitialEvents") and bookmarks
        rv = "" if flag(q, "sendInitialEvents") else q.get("resourceVersion", "")
        queue: asyncio.Queue[StoreEvent | None] = asyncio.Queue()
        failure: ApiError | None = None
        backlog: list[StoreEvent] = []
        try:
            backlog = self.store.watch_backlog(target.rt, rv)
        except ApiError as err:
            failure = err
        storage_key = target.rt.storage_key
        render = self._watch_renderer(request, target.rt)

        def enqueue(event: StoreEvent) -> None:
            if event.storage_key == storage_key:
                queue.put_nowait(event)

        unsubscribe = self.store.subscribe(enqueue)
        self._watches.add(queue)
        media = TABLE_CONTENT_TYPE if wants_table(request) else "application/json"
        resp = web.StreamResponse(status=200, headers={"Content-Type": media})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            if failure is not None:
                await resp.write(watch_line("ERROR", failure.status()))
            else:
                await self._send_backlog(resp, target.rt, flt, backlog, render)
                if initial_end:
                    mark = bookmark(target.rt, self.store.resource_version, initial_events_end=True)
                    await resp.write(watch_line("BOOKMARK", mark))
                await self._stream(resp, target.rt, flt, queue, timeout, bookmarks, render)
            await resp.write_eof()
        except ConnectionError:
            pass
        finally:
            unsubscribe()
            self._watches.discard(queue)
        return resp

    def _watch_renderer(
        self, request: web.Request, rt: ResourceType
    ) -> Callable[[JsonObj], JsonObj]:
        """How a watch event shows its object: as stored, or (kubectl get --watch) as a
        one-row Table, the columns named in every event."""
        if not wants_table(request):
            return lambda obj: present(rt, obj)

        def one_row(obj: JsonObj) -> JsonObj:
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            return printers.table(rt, [obj], meta, self.store.now())

        return one_row

    async def _send_backlog(
        self,
        resp: web.StreamResponse,
        rt: ResourceType,
        flt: Filter,
        backlog: list[StoreEvent],
        render: Callable[[JsonObj], JsonObj],
    ) -> None:
        for start in range(0, len(backlog), WATCH_LINES_PER_WRITE):
            lines = [
                watch_line(seen[0], render(seen[1]))
                for event in backlog[start : start + WATCH_LINES_PER_WRITE]
                if (seen := event.as_seen_through(flt)) is not None
            ]
            if lines:
                await resp.write(b"".join(lines))

    async def _stream(
        self,
        resp: web.StreamResponse,
        rt: ResourceType,
        flt: Filter,
        queue: asyncio.Queue[StoreEvent | None],
        lifetime: int,
        bookmarks: bool,
        render: Callable[[JsonObj], JsonObj],
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + lifetime if lifetime > 0 else None
        next_bookmark = loop.time() + self.bookmark_interval if bookmarks else None
        while True:
            wakes = [t for t in (deadline, next_bookmark) if t is not None]
            wait = max(min(wakes) - loop.time(), 0.0) if wakes else None
            try:
                event = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                now = loop.time()
                if deadline is not None and now >= deadline:
                    return
                if next_bookmark is not None and now >= next_bookmark:
                    mark = bookmark(rt, self.store.resource_version)
                    await resp.write(watch_line("BOOKMARK", mark))
                    next_bookmark = now + self.bookmark_interval
                continue
            lines, ended = _drain(event, queue, flt, render)
            if lines:  # every event already queued in one write (one TLS record, one send)
                await resp.write(b"".join(lines))
            if ended:
                return


def _drain(
    first: StoreEvent | None,
    queue: asyncio.Queue[StoreEvent | None],
    flt: Filter,
    render: Callable[[JsonObj], JsonObj],
) -> tuple[list[bytes], bool]:
    """The watch lines of ``first`` and of every event queued behind it, up to
    ``WATCH_LINES_PER_WRITE``, and whether the watch ends (the shutdown's None)."""
    lines: list[bytes] = []
    event = first
    while event is not None:
        seen = event.as_seen_through(flt)
        if seen is not None:
            lines.append(watch_line(seen[0], render(seen[1])))
        if len(lines) >= WATCH_LINES_PER_WRITE or queue.empty():
            return lines, False
        event = queue.get_nowait()
    return lines, True
