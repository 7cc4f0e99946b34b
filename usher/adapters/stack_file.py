"""``stack.json``: how every ``usher`` command finds the running one-machine stack.

What it does: the ``StackInfo`` record (URLs, pids, settings of the running ``usher up``), the
data folder (``$USHER_HOME``, else ``~/.usher``), and reading the file. Only the one-machine
system (``usher.local.stack``) writes it; the services, the client and every ``usher`` command
read it, so it lives below them all (with how often each process was restarted, so that
``usher status`` can tell a crash-looping one) and a command that only reads it (``usher jobs``,
``usher queues``) does not import the servers, NATS or the migrations.
What it must never do: import a server, a database driver or a network client, start anything,
or write the file (``usher.local`` writes it, 0600 and atomically).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import msgspec

STACK_FILE = "stack.json"
CONSOLE_PORT = 8470
"""The web console's port by default (``usher console``; ``usher up`` takes another free one
when it is taken, and ``console_url`` says which)."""


STABLE_S = 30.0
"""A restarted process up this long is well again (its restarts in a row start over)."""
CRASH_LOOP_RESTARTS = 3
"""Restarts in a row, none of which stayed up ``STABLE_S``: the process is crash-looping."""


class Restarts(msgspec.Struct, frozen=True, kw_only=True):
    """How often ``usher up`` restarted one process."""

    count: int = 0
    """Since ``usher up`` started."""
    in_a_row: int = 0
    """Restarts since it last stayed up ``STABLE_S`` (0: well)."""
    last_at: datetime | None = None

    @property
    def crash_looping(self) -> bool:
        return self.in_a_row >= CRASH_LOOP_RESTARTS


class StackInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What ``stack.json`` says about a running embedded stack.

    Fields after ``started_at`` came with the whole one-machine system (``usher up``); they
    have defaults so that a file written by the bare stack still decodes.
    """

    home: str
    nats_url: str
    """The read-only ``console`` identity's URL (with its password: the file is 0600)."""
    database_url: str
    """The read-only ``usher_audit`` role's URL."""
    prefix: str
    pids: dict[str, int]
    """Infrastructure processes by name: ``nats``, ``postgres``, ``kube-emulator``."""
    started_at: datetime
    kubeconfig: str = ""
    """Kubeconfig of the Kubernetes API (the emulator's, under ``$USHER_HOME``)."""
    zones: list[str] = msgspec.field(default_factory=list)
    """Zones served by a dequeuer each (``default`` takes jobs without ``usher.io/zone``)."""
    burst_zones: list[str] = msgspec.field(default_factory=list)
    """Those of ``zones`` whose node is a virtual kubelet's (``usher up --burst-zones``, Z3)."""
    clusters: str = ""
    """Every cluster's zones (``usher up --clusters``, M1: ``default=default,a,b;c2=c2``);
    empty for one cluster."""
    service_pids: dict[str, int] = msgspec.field(default_factory=dict)
    """Service processes by name: ``ledger``, ``preemptor``, ``dequeuer-<zone>``, ``watcher``."""
    policy: str = "Round"
    oversell_rate: str = "1"
    within_quota: str = "Never"
    min_runtime_s: float = 0.0
    half_life_s: float | None = None
    """Fair share's half-life (F1, ``usher up --half-life``); None: off."""
    admin_nats_url: str = ""
    """The admin identity's URL: creates streams, imports a log (``usher import``)."""
    stream_replicas: int = 1
    durable: bool = False
    """``usher up --durable``: NATS fsyncs before it acknowledges (``sync_interval: always``)."""
    up_pid: int = 0
    """The ``usher up`` process that owns the system (``usher down`` sends it SIGTERM); 0
    when the system was started otherwise (a test, a library)."""
    console_url: str = ""
    """The web console's address (``usher console``, read-only); empty when not started."""
    console_pid: int = 0
    restarts: dict[str, Restarts] = msgspec.field(default_factory=dict)
    """Restarts by process name (only those restarted at least once)."""
    health_ports: dict[str, int] = msgspec.field(default_factory=dict)
    """Each service's /healthz port on 127.0.0.1 (``usher status`` asks it)."""
    kube_state_metrics_port: int = 0
    """``/metrics`` on 127.0.0.1 with each supervised process's restarts as kube-state-metrics
    exports a pod's (``kube_pod_container_status_restarts_total``); 0: none."""

    def all_pids(self) -> dict[str, int]:
        """Every process of the system: infrastructure, services and the web console."""
        console = {"console": self.console_pid} if self.console_pid else {}
        return {**self.pids, **self.service_pids, **console}


def usher_home() -> Path:
    """``$USHER_HOME``, else ``~/.usher``."""
    return Path(os.environ.get("USHER_HOME") or Path.home() / ".usher").expanduser()


def home_problem(home: Path) -> str | None:
    """Why ``home`` cannot be Usher's data folder (a file, or below one), or None if it can."""
    for part in (home, *home.parents):
        if part.is_dir():
            return None
        if part.exists():
            below = "" if part == home else f" ({home} would be inside it)"
            return f"{part} is a file, not a folder{below}"
    return None


def read_stack_info(home: Path) -> StackInfo:
    """The running stack's info; ``FileNotFoundError`` when none was started there."""
    return msgspec.json.decode((home / STACK_FILE).read_bytes(), type=StackInfo)
