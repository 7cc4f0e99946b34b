"""The mutating admission webhook's HTTPS server: ``POST /mutate`` takes an AdmissionReview v1.

What it does: serves HTTPS (cert-manager's ``tls.crt``/``tls.key``) on the configured host and
port, and re-reads the two files every ``tls_reload_s``: when cert-manager renews the
certificate (a new key by default) the next handshake serves the new one, without a restart; a
pair that does not load (a key that does not match) is logged and the last good one kept.
For each review it reads the namespace's labels and the quota trees (listed at most once per
``tree_ttl_s``; invalid trees are skipped) through the Kubernetes API and answers with
``mutate.review_response``: managed jobs are created suspended, and an update that changes a
running job's frozen fields is refused (R16). ``GET /healthz`` answers ok.
A review it cannot parse is answered 400; an API error while reading namespaces or trees
answers 500, so the API server applies the configuration's ``failurePolicy`` (``Fail`` in
``deploy/``: no managed job is created unsuspended while Usher cannot tell).
What it must never do: talk to NATS, deny anything but a frozen field's change, listen without
TLS, or log an object's spec.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web

from schemas import QuotaNode
from services.common.settings import WebhookSettings
from services.webhook.mutate import review_response
from usher.adapters.kube import KubeClient, KubeError, NotFound, Resource
from usher.adapters.logs import configure, get_logger
from usher.core.model.errors import TreeInvalid
from usher.core.tree.quota_tree import parse_tree

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
QUOTA_TREES = Resource("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", "ElasticQuotaTree")


class Webhook:
    """The request handlers and the small cache of quota trees."""

    def __init__(self, kube: KubeClient, settings: WebhookSettings, log: Any) -> None:
        self.kube = kube
        self.settings = settings
        self.log = log
        self._trees: list[QuotaNode] = []
        self._trees_at: float | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=4 * 2**20)
        app.router.add_post("/mutate", self.mutate)
        app.router.add_get("/healthz", self.healthz)
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def mutate(self, request: web.Request) -> web.Response:
        try:
            review = await request.json()
        except ValueError:
            return web.Response(status=400, text="the body is not an AdmissionReview (JSON)")
        if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
            return web.Response(status=400, text="the body has no AdmissionReview request")
        namespace = review["request"].get("namespace")
        try:
            labels = await self._namespace_labels(namespace)
            trees = await self._quota_trees()
        except KubeError as exc:
            self.log.error("cannot read the cluster", error=type(exc).__name__, detail=exc.message)
            return web.Response(status=500, text=f"cannot read the cluster: {exc.message}")
        answer = review_response(review, labels, trees)
        obj = review["request"].get("object")
        metadata = obj.get("metadata") if isinstance(obj, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if "patch" in answer["response"]:
            self.log.info("created suspended", namespace=namespace, name=name)
        if answer["response"]["allowed"] is not True:
            self.log.info("update refused: frozen while running", namespace=namespace, name=name)
        return web.json_response(answer)

    async def _namespace_labels(self, namespace: object) -> dict[str, str]:
        if not isinstance(namespace, str) or not namespace:
            return {}
        try:
            obj = await self.kube.get(NAMESPACES, None, namespace)
        except NotFound:
            return {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    async def _quota_trees(self) -> list[QuotaNode]:
        now = asyncio.get_running_loop().time()
        if self._trees_at is not None and now - self._trees_at < self.settings.tree_ttl_s:
            return self._trees
        try:
            listed = await self.kube.list(QUOTA_TREES)
        except NotFound:
            listed = None  # the CRD is not installed: no tree maps anything
        trees: list[QuotaNode] = []
        for obj in listed.items if listed else []:
            with contextlib.suppress(TreeInvalid):  # the watcher reports invalid trees
                trees.append(parse_tree(obj))
        self._trees, self._trees_at = trees, now
        return trees


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    return context


class ServingCertificate:
    """The listener's TLS context, whose every handshake is handed the context of the files as
    last read (``sni_callback`` runs for each ClientHello, with or without a server name), so
    a renewed certificate is served from the next connection on."""

    def __init__(self, cert: Path, key: Path, log: Any) -> None:
        self.cert, self.key, self.log = cert, key, log
        self._files = self._read()
        self.current = tls_context(cert, key)
        self.listener = tls_context(cert, key)
        self.listener.sni_callback = self._choose

    def _read(self) -> tuple[bytes, bytes]:
        return self.cert.read_bytes(), self.key.read_bytes()

    def _choose(self, connection: ssl.SSLObject, server_name: str | None, _: object) -> None:
        connection.context = self.current

    def reload_if_changed(self) -> bool:
        """Load the files if they changed since the last load; whether the served pair did."""
        try:
            files = self._read()
            if files == self._files:
                return False
            context = tls_context(self.cert, self.key)
            if self._read() != files:
                return False  # written while loading: the next tick loads the finished pair
        except (OSError, ssl.SSLError) as exc:
            self.log.error("serving certificate not reloaded, the last one kept",
                           error=type(exc).__name__, detail=str(exc))  # fmt: skip
            return False
        self.current, self._files = context, files
        self.log.info("serving certificate reloaded",
                      sha256=hashlib.sha256(files[0]).hexdigest()[:16])  # fmt: skip
        return True

    async def watch(self, stop: asyncio.Event, every_s: float) -> None:
        """Re-read the files every ``every_s`` until ``stop`` (kubelet swaps a Secret volume's
        files at once, through its ``..data`` link, a minute or so after cert-manager renews)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            if not stop.is_set():
                self.reload_if_changed()


async def serve(settings: WebhookSettings, stop: asyncio.Event, started: Any = None) -> None:
    """Serve until ``stop`` is set; ``started(port)`` is called once it listens."""
    log = get_logger(service="webhook")
    async with await KubeClient.from_kubeconfig(settings.kubeconfig) as kube:
        runner = web.AppRunner(Webhook(kube, settings, log).app(), access_log=None)
        await runner.setup()
        certificate = ServingCertificate(settings.tls_cert, settings.tls_key, log)
        site = web.TCPSite(runner, settings.host, settings.port, ssl_context=certificate.listener)
        await site.start()
        watcher = asyncio.create_task(certificate.watch(stop, settings.tls_reload_s))
        port = runner.addresses[0][1]
        log.info("webhook serving", host=settings.host, port=port)
        if started is not None:
            started(port)
        try:
            await stop.wait()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await runner.cleanup()
            log.info("webhook stopped")


def run_webhook(settings: WebhookSettings) -> None:
    """Run until SIGTERM or SIGINT (``usher run webhook``, ``python -m services.webhook``)."""
    configure()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, stop)

    asyncio.run(main())
