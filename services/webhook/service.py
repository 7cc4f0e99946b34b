"""The mutating admission webhook's HTTPS server: ``POST /mutate`` takes an AdmissionReview v1.

What it does: serves HTTPS (cert-manager's ``tls.crt``/``tls.key``) on the configured host and
port; for each review it reads the namespace's labels and the quota trees (listed at most once
per ``tree_ttl_s``; invalid trees are skipped) through the Kubernetes API and answers with
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
import signal
import ssl
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


def tls_context(settings: WebhookSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
    return context


async def serve(settings: WebhookSettings, stop: asyncio.Event, started: Any = None) -> None:
    """Serve until ``stop`` is set; ``started(port)`` is called once it listens."""
    log = get_logger(service="webhook")
    async with await KubeClient.from_kubeconfig(settings.kubeconfig) as kube:
        runner = web.AppRunner(Webhook(kube, settings, log).app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, settings.host, settings.port, ssl_context=tls_context(settings))
        await site.start()
        port = runner.addresses[0][1]
        log.info("webhook serving", host=settings.host, port=port)
        if started is not None:
            started(port)
        try:
            await stop.wait()
        finally:
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
