"""The local stack's stand-in for kube-state-metrics: its processes' restarts as pod series.

What it does: ``usher up`` restarts a service process that died, as the kubelet restarts a
crashed container. In a cluster kube-state-metrics turns the kubelet's restart counts into
``kube_pod_container_status_restarts_total{namespace, pod, uid, container}``, which the
``UsherServiceRestarting`` alert of ``deploy/monitoring`` reads. This module exports the same
counter, with the same labels, for each process ``usher up`` supervises (namespace
``usher-system``; pod: the process's name, as ``stack.json`` names it; container: its
component, as ``deploy/`` names the container; uid: stable for the life of the stack, as a
pod's is across its container's restarts), on ``/metrics`` of a port on 127.0.0.1
(``stack.json``'s ``kube_state_metrics_port``), so that a Prometheus scraping the local stack
evaluates that alert as it would in a cluster. Every series is there from the start, at 0.
What it must never do: count anything but restarts ``usher up`` made, export another
kube-state-metrics series, listen beyond 127.0.0.1, or change what it reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

NAMESPACE = "usher-system"
"""Where ``deploy/`` runs the services, and what the alert selects."""
RESTARTS = "kube_pod_container_status_restarts"
"""kube-state-metrics' name (the exposition adds ``_total``)."""


def container_of(process: str) -> str:
    """The container name ``deploy/`` gives a process: its component (``dequeuer-a`` ->
    ``dequeuer``)."""
    return process.split("-", 1)[0]


@dataclass(frozen=True)
class RestartCounts(Collector):
    """The restart counter of every process ``counts`` returns (name -> restarts so far)."""

    counts: Callable[[], Mapping[str, int]]
    stack: str
    """Makes each process's uid (the stack's home: another stack, other uids)."""

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            RESTARTS,
            "The number of container restarts per container.",
            labels=["namespace", "pod", "uid", "container"],
        )
        for name, count in sorted(self.counts().items()):
            uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"usher-up:{self.stack}/{name}"))
            family.add_metric([NAMESPACE, name, uid, container_of(name)], count)
        yield family


@dataclass
class KubeStateMetrics:
    """The ``/metrics`` endpoint, served by a thread of ``usher up`` until ``stop``."""

    collector: RestartCounts
    host: str
    port: int
    _server: WSGIServer | None = field(default=None, init=False)

    def start(self) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        self._server, _ = start_http_server(self.port, self.host, registry)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
