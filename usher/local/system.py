"""The whole Usher system on one machine, every part its own process (what ``usher up`` runs).

What it does: starts, in order, the embedded NATS JetStream and PostgreSQL
(``EmbeddedStack``), the Kubernetes API emulator with its fake kubelet (objects kept under
``$USHER_HOME/cluster``, kubeconfig at ``$USHER_HOME/kubeconfig``), and the services as
``python -m usher run ...`` processes: the admission webhook (HTTPS on 127.0.0.1 with a
certificate made at each start under ``$USHER_HOME/webhook``, 0600; the emulator registers it
before it serves, so a job of a managed namespace is always created suspended), ledger,
preemptor, one dequeuer per zone, watcher; then
the read-only web console (``python -m usher console``, on 127.0.0.1, port 8470 or a free one
when that is taken) with the ``console`` NATS identity. It
writes ``$USHER_HOME/stack.json`` once everything is up, restarts a service that died (with a
growing pause, recorded in ``stack.json`` and served as kube-state-metrics serves a pod's
restarts: ``usher.local.kube_state``), restarts a NATS or PostgreSQL that died on the
same port with the same data and configuration (with a growing pause; after
``SERVER_MAX_FAILURES`` restarts in a row that did not stay up it gives up and says so), and
stops everything in the reverse order:
services first, then the emulator, PostgreSQL, NATS. Every child is started with
``PR_SET_PDEATHSIG``, so even a SIGKILL of the parent leaves nothing behind.
What it must never do: signal a process it did not start, put a URL with a secret on a
command line (settings travel in the environment), or leave ``stack.json`` behind after stop.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from schemas import DEFAULT_CLUSTER, ClusterName, Zone
from usher.adapters.nats.permissions import CONSOLE, watcher_name
from usher.adapters.stack_file import (
    CONSOLE_PORT,
    CRASH_LOOP_RESTARTS,
    STABLE_S,
    STACK_FILE,
    Restarts,
    StackInfo,
)
from usher.core.values.clusters import ClusterZones, format_cluster_zones
from usher.local.credentials import private_dir, write_private
from usher.local.kube_emulator.server import self_signed_certificate
from usher.local.kube_state import KubeStateMetrics, RestartCounts
from usher.local.processes import ManagedProcess, ServerStartError, free_port, port_open
from usher.local.servers import HOST, PG_LEDGER, NatsServer, PostgresServer
from usher.local.stack import EmbeddedStack, write_stack_info

DEFAULT_ZONES = ("a", "b")
DEFAULT_ZONE = "default"
EMULATOR = "kube-emulator"
WEBHOOK = "webhook"
RESTART_PAUSE_S = (0.5, 1.0, 2.0, 5.0, 10.0)
WATCHER_READY = b'"carrying out decisions"'
"""What the watcher logs once every kind is listed and decisions flow (its readiness)."""
SERVER_RESTART_PAUSE_S = (0.2, 1.0, 2.0, 4.0, 8.0)
SERVER_READY_TIMEOUT_S = 60.0
"""A restarted server that accepts no connection by then counts as a failed restart."""
SERVER_STABLE_S = 30.0
"""A server up this long after a restart is healthy again: its failure count starts over."""
SERVER_MAX_FAILURES = 5
"""Restarts in a row that died (or never listened) before ``SERVER_STABLE_S``: then give up."""
CONSOLE_READY_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class SystemOptions:
    """How the system decides, and where (every service of one installation shares these)."""

    zones: tuple[str, ...] = DEFAULT_ZONES
    """Zones with nodes and a dequeuer each; ``default`` (unlabelled jobs) is always served."""
    burst_zones: tuple[str, ...] = ()
    """Those of ``zones`` whose node is a virtual kubelet's, with large allocatable (Z3)."""
    policy: str = "Round"
    oversell_rate: str = "1"
    within_quota: str = "Never"
    min_runtime_s: float = 0.0
    half_life_s: float | None = None
    """Fair share with memory (F1): the half-life of decayed usage; None: off."""
    kubelet_speed: float = 1.0
    racks: str = ""
    """``BxRxN``: each zone's nodes in B blocks of R racks of N nodes, labelled with their
    topology (TP1); '': one node per zone."""
    settle_ms: int = 20
    durable: bool = False
    """NATS fsyncs before acknowledging (``sync_interval: always``): survives a machine crash."""
    stream_replicas: int = 1
    """Replicas of the log (one local server: 1; deploy/ uses 3)."""
    console_port: int | None = CONSOLE_PORT
    """The web console's port (0: any free one); None starts no console."""
    clusters: int = 1
    """Emulated clusters (M1): the default one holds ``zones``; each other one, ``c<n>``,
    has one zone of its name, its own emulator and its own watcher."""

    @property
    def served_zones(self) -> tuple[str, ...]:
        """``default`` first (jobs without a zone label), then the named zones, then the
        other clusters' (M1)."""
        own = (DEFAULT_ZONE, *(z for z in self.zones if z != DEFAULT_ZONE))
        return (*own, *self.other_clusters)

    @property
    def other_clusters(self) -> tuple[ClusterName, ...]:
        """The clusters besides the default one (M1): ``c2``, ``c3``..."""
        return tuple(ClusterName(f"c{n}") for n in range(2, self.clusters + 1))

    @property
    def cluster_zones(self) -> ClusterZones | None:
        """Every cluster's zones when there are several (M1); None for one cluster."""
        if self.clusters <= 1:
            return None
        own = (DEFAULT_ZONE, *(z for z in self.zones if z != DEFAULT_ZONE))
        mapping: ClusterZones = {DEFAULT_CLUSTER: tuple(Zone(z) for z in own)}
        for name in self.other_clusters:
            mapping[name] = (Zone(name),)
        return mapping


@dataclass
class Supervised:
    """One service process and its restart history."""

    name: str
    argv: list[str]
    process: ManagedProcess
    restarts: int = 0
    down_since: float | None = None
    in_a_row: int = 0
    """Restarts since it last stayed up ``STABLE_S``: ``CRASH_LOOP_RESTARTS`` is a loop."""
    up_since: float = field(default_factory=time.monotonic)
    last_restart: datetime | None = None

    def exited(self, now: float) -> None:
        """It died: a restart in a row unless it had stayed up ``STABLE_S``."""
        self.down_since = now
        self.in_a_row = 1 if now - self.up_since >= STABLE_S else self.in_a_row + 1

    def started_again(self, now: float) -> None:
        self.process.start()
        self.restarts += 1
        self.down_since, self.up_since = None, now
        self.last_restart = datetime.now(UTC)

    def settled(self, now: float) -> bool:
        """Whether it has just been up ``STABLE_S`` since its last restart (well again)."""
        if self.in_a_row and self.process.running() and now - self.up_since >= STABLE_S:
            self.in_a_row = 0
            return True
        return False

    def record(self) -> Restarts:
        return Restarts(count=self.restarts, in_a_row=self.in_a_row, last_at=self.last_restart)


@dataclass
class ServerWatch:
    """A NATS or PostgreSQL server under watch: its restarts and where it stands."""

    name: str
    server: NatsServer | PostgresServer
    failures: int = 0
    """Restarts in a row that did not stay up ``SERVER_STABLE_S``."""
    down_since: float | None = None
    starting_since: float | None = None
    """Set from a restart until the port accepts connections."""
    up_since: float | None = None
    gave_up: str | None = None

    def check(self, now: float) -> tuple[list[str], bool]:
        """One look: restart if due; (what happened, whether its pid changed)."""
        process = self.server.process
        if process is None or self.gave_up is not None:
            return [], False
        if process.running():
            return self._while_running(now, process)
        notes: list[str] = []
        if self.down_since is None:
            code = process.popen.returncode if process.popen else None
            self._count_failure(now)
            then = "giving up" if self.gave_up else f"restarting it on port {self.server.port}"
            notes.append(f"{self.name} exited (code {code}); {then}")
        return self._restart_if_due(now, notes)

    def _while_running(self, now: float, process: ManagedProcess) -> tuple[list[str], bool]:
        if self.starting_since is None:
            if self.up_since is not None and now - self.up_since >= SERVER_STABLE_S:
                self.failures = 0
            return [], False
        if port_open(HOST, self.server.port):
            self.starting_since, self.up_since = None, now
            return [f"{self.name} is back (pid {process.pid}, port {self.server.port})"], False
        if now - self.starting_since < SERVER_READY_TIMEOUT_S:
            return [], False
        process.stop(timeout=5.0)  # never listened: the next look restarts it again
        return [f"{self.name} did not listen within {SERVER_READY_TIMEOUT_S:g}s"], False

    def _count_failure(self, now: float) -> None:
        self.down_since, self.starting_since = now, None
        stayed_up = self.up_since is not None and now - self.up_since >= SERVER_STABLE_S
        self.failures = 1 if stayed_up else self.failures + 1
        if self.failures > SERVER_MAX_FAILURES:
            self.gave_up = (
                f"{self.name} keeps dying ({SERVER_MAX_FAILURES} restarts in a row did not stay"
                f" up {SERVER_STABLE_S:g}s; see logs/{self.name}.log); stopping"
            )

    def _restart_if_due(self, now: float, notes: list[str]) -> tuple[list[str], bool]:
        if self.gave_up is not None:
            return notes, False
        assert self.down_since is not None
        pause = SERVER_RESTART_PAUSE_S[min(self.failures, len(SERVER_RESTART_PAUSE_S)) - 1]
        if now - self.down_since < pause:
            return notes, False
        try:
            self.server.launch()
        except (OSError, ServerStartError) as exc:
            self._count_failure(now)
            notes.append(f"{self.name} could not be started again: {exc}")
            return notes, False
        self.down_since, self.starting_since, self.up_since = None, now, None
        return notes, True


@dataclass
class EmbeddedSystem:
    """Start, watch over and stop the one-machine system as one unit."""

    home: Path
    options: SystemOptions = field(default_factory=SystemOptions)
    prefix: str = "usher"
    up_pid: int = 0
    """The process to signal to stop everything (``usher up`` itself), for ``stack.json``."""
    stack: EmbeddedStack = field(init=False)
    emulator: ManagedProcess | None = field(default=None, init=False)
    cluster_emulators: dict[str, ManagedProcess] = field(default_factory=dict, init=False)
    """The other clusters' emulators (M1), by cluster."""
    services: dict[str, Supervised] = field(default_factory=dict, init=False)
    servers: list[ServerWatch] = field(default_factory=list, init=False)
    console: Supervised | None = field(default=None, init=False)
    webhook: Supervised | None = field(default=None, init=False)
    health_ports: dict[str, int] = field(default_factory=dict, init=False)
    """Each service's /metrics, /healthz and /readyz port on 127.0.0.1 (``usher status``)."""
    kube_state: KubeStateMetrics | None = field(default=None, init=False)
    """The stand-in for kube-state-metrics: each supervised process's restarts."""
    console_url: str = field(default="", init=False)
    console_port: int = field(default=0, init=False)
    _console_listening: socket.socket | None = field(default=None, init=False)
    info: StackInfo | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.stack = EmbeddedStack(
            self.home,
            prefix=self.prefix,
            zones=self.options.served_zones,
            sync_always=self.options.durable,
            stream_replicas=self.options.stream_replicas,
            clusters=self.options.cluster_zones,
        )
        self.servers = [
            ServerWatch("nats", self.stack.nats),
            ServerWatch("postgres", self.stack.postgres),
        ]

    @property
    def kubeconfig(self) -> Path:
        return self.home / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    # ------------------------------------------------------------------ start

    def start(self, timeout_s: float = 30.0) -> StackInfo:
        """Start everything; on any failure stop what was started and re-raise."""
        try:
            base = self.stack.start(write_file=False)
            webhook_port = self._webhook_certificate()
            self._start_emulator(timeout_s, webhook_port)
            for cluster in self.options.other_clusters:
                self._start_emulator(timeout_s, webhook_port, cluster)
            env = self._service_env()
            self._start_webhook(env, webhook_port, timeout_s)
            watcher_log = self.logs / "watcher.log"
            offset = watcher_log.stat().st_size if watcher_log.exists() else 0
            for name, argv in self._service_commands():
                self.health_ports[name] = free_port(HOST)  # kept across its restarts
                own = {
                    **env,
                    **self._credentials_of(name),
                    "USHER_METRICS_PORT": str(self.health_ports[name]),
                }
                process = ManagedProcess(name, argv, self.logs / f"{name}.log", env=own)
                process.start()
                self.services[name] = Supervised(name, argv, process)
            if self.options.console_port is not None:  # it starts while the watcher lists
                self._start_console(env, self.options.console_port)
            self._start_kube_state_metrics()
            self._check_services_alive(grace_s=0.5)
            self._wait_for_watcher(watcher_log, offset, timeout_s)
            self._wait_for_console()
            # Inside the try: a Ctrl-C landing as stack.json is written still stops all and
            # removes it (else the caller's "stopped before it was up" left it behind).
            self.info = self._info(base)
            write_stack_info(self.home, self.info)
        except BaseException:
            self.stop()
            raise
        return self.info

    def _webhook_certificate(self) -> int:
        """A fresh serving certificate for the webhook (its own CA, 0600 under
        ``$USHER_HOME/webhook``) and the port it will listen on."""
        folder = private_dir(self.home / WEBHOOK)
        cert, key = self_signed_certificate(HOST)
        write_private(folder / "tls.key", key)
        write_private(folder / "tls.crt", cert)
        return free_port(HOST)

    def _start_webhook(self, env: dict[str, str], port: int, timeout_s: float) -> None:
        """The admission webhook (``usher run webhook``) over HTTPS on 127.0.0.1: the emulator
        calls it for every job of a managed namespace, which is created suspended."""
        folder = self.home / WEBHOOK
        own = {
            **env,
            "USHER_KUBECONFIG": str(self.kubeconfig),
            "USHER_WEBHOOK_TLS_CERT": str(folder / "tls.crt"),
            "USHER_WEBHOOK_TLS_KEY": str(folder / "tls.key"),
            "USHER_WEBHOOK_HOST": HOST,
            "USHER_WEBHOOK_PORT": str(port),
        }
        argv = [sys.executable, "-m", "usher", "run", WEBHOOK]
        process = ManagedProcess(WEBHOOK, argv, self.logs / f"{WEBHOOK}.log", env=own)
        process.start()
        self.webhook = Supervised(WEBHOOK, argv, process)
        process.wait_for_port(HOST, port, timeout_s)

    def kubeconfig_of(self, cluster: str) -> Path:
        """The kubeconfig of ``cluster``'s emulator (the default cluster's: ``kubeconfig``)."""
        if cluster == DEFAULT_CLUSTER:
            return self.kubeconfig
        return self.home / "clusters" / cluster / "kubeconfig"

    def _start_emulator(
        self, timeout_s: float, webhook_port: int, cluster: str = DEFAULT_CLUSTER
    ) -> None:
        kubeconfig = self.kubeconfig_of(cluster)
        with contextlib.suppress(FileNotFoundError):
            kubeconfig.unlink()  # a stale one would look ready at once
        default = cluster == DEFAULT_CLUSTER
        state = self.home / "cluster" if default else kubeconfig.parent
        zones = self.options.zones if default else (cluster,)
        argv = [
            sys.executable,
            "-m",
            "usher.local.cluster",
            "--kubeconfig",
            str(kubeconfig),
            "--state",
            str(state / "objects.json"),
            "--zones",
            ",".join(zones),
            "--speed",
            str(self.options.kubelet_speed),
        ]
        if self.options.burst_zones and default:
            argv += ["--burst-zones", ",".join(self.options.burst_zones)]
        if self.options.racks:
            argv += ["--racks", self.options.racks]
        argv += [
            "--webhook-url",
            f"https://{HOST}:{webhook_port}/mutate",
            "--webhook-ca",
            str(self.home / WEBHOOK / "tls.crt"),
        ]
        name = EMULATOR if default else f"{EMULATOR}-{cluster}"
        emulator = ManagedProcess(name, argv, self.logs / f"{name}.log")
        if default:
            self.emulator = emulator
        else:
            self.cluster_emulators[cluster] = emulator
        emulator.start()
        deadline = time.monotonic() + timeout_s
        while not kubeconfig.exists():
            if not emulator.running():
                raise ServerStartError(name, "exited", emulator.log_tail())
            if time.monotonic() > deadline:
                raise ServerStartError(
                    name, f"no kubeconfig after {timeout_s}s", emulator.log_tail()
                )
            time.sleep(0.05)

    def _credentials_of(self, service: str) -> dict[str, str]:
        """Only this service's own secrets: its NATS user; the ledger's database role; the
        watcher's kubeconfig. Nobody else gets the ledger's role or the cluster's token."""
        own = {"USHER_NATS_URL": self.stack.nats_url_for(service)}
        if service == "ledger":
            own["USHER_DATABASE_URL"] = self.stack.database_url_for(PG_LEDGER)
        if service == "watcher":
            own["USHER_KUBECONFIG"] = str(self.kubeconfig)
        mapping = self.options.cluster_zones
        if mapping is not None and service.startswith("watcher"):
            cluster = service.removeprefix("watcher").removeprefix("-") or DEFAULT_CLUSTER
            own["USHER_KUBECONFIG"] = str(self.kubeconfig_of(cluster))
            own["USHER_CLUSTER"] = cluster
            own["USHER_CLUSTERS"] = format_cluster_zones(mapping)
        return own

    def _service_env(self) -> dict[str, str]:
        options = self.options
        inherited = {
            k: v
            for k, v in os.environ.items()
            if k not in ("USHER_NATS_URL", "USHER_DATABASE_URL", "USHER_KUBECONFIG", "KUBECONFIG")
        }
        return {
            **inherited,
            "USHER_HOME": str(self.home),
            "USHER_PREFIX": self.prefix,
            "USHER_STREAM_REPLICAS": str(options.stream_replicas),
            "USHER_POLICY": options.policy,
            "USHER_OVERSELL_RATE": options.oversell_rate,
            "USHER_WITHIN_QUOTA": options.within_quota,
            "USHER_MIN_RUNTIME_SECONDS": str(options.min_runtime_s),
            "USHER_SETTLE_MS": str(options.settle_ms),
            "USHER_HALF_LIFE_SECONDS": "off"
            if options.half_life_s is None
            else str(options.half_life_s),
            # Every service on one machine: each gets its own port for /metrics and probes.
            "USHER_METRICS_PORT": "0",
            "PYTHONUNBUFFERED": "1",
        }

    def _service_commands(self) -> list[tuple[str, list[str]]]:
        run = [sys.executable, "-m", "usher", "run"]
        commands = [("ledger", [*run, "ledger"]), ("preemptor", [*run, "preemptor"])]
        for zone in self.options.served_zones:
            commands.append((f"dequeuer-{zone}", [*run, "dequeuer", "--zone", zone]))
        commands.append(("watcher", [*run, "watcher"]))
        for cluster in self.options.other_clusters:
            commands.append((watcher_name(cluster), [*run, "watcher"]))
        return commands

    def _start_console(self, env: dict[str, str], wanted: int) -> None:
        """The web console as a process reading the log as the read-only ``console`` user."""
        listening = self._console_socket(wanted)
        port = listening.getsockname()[1]
        fd = listening.fileno()
        argv = [sys.executable, "-m", "usher", "console", "--host", HOST, "--port", str(port)]
        argv += ["--listen-fd", str(fd)]
        own = {**env, "USHER_NATS_URL": self.stack.nats_url_for(CONSOLE)}
        process = ManagedProcess(
            CONSOLE, argv, self.logs / f"{CONSOLE}.log", env=own, pass_fds=(fd,)
        )
        process.start()
        self.console = Supervised(CONSOLE, argv, process)
        self.console_port = port
        self.console_url = f"http://{HOST}:{port}/"

    def _start_kube_state_metrics(self) -> None:
        """Serve every supervised process's restart count as kube-state-metrics does a
        pod's (``usher.local.kube_state``), from a thread of this process."""
        counts = RestartCounts(
            lambda: {s.name: s.restarts for s in self._supervised()}, str(self.home)
        )
        self.kube_state = KubeStateMetrics(counts, HOST, free_port(HOST))
        self.kube_state.start()

    def _console_socket(self, wanted: int) -> socket.socket:
        """The console's listening socket, bound here and held for the stack's life: on
        ``wanted`` when it is free, else on a free port. Binding it here (not in the console)
        leaves no moment in which another program, another ``usher up`` starting at the same
        time among them, could take the port between the check and the bind, and a restarted
        console serves the same port."""
        if self._console_listening is not None:
            return self._console_listening
        listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listening.bind((HOST, wanted))
        except OSError:
            listening.bind((HOST, 0))
        listening.listen(128)
        listening.set_inheritable(True)
        self._console_listening = listening
        return listening

    def _wait_for_console(self) -> None:
        """Best effort: wait until the console serves, so the printed URL answers at once."""
        if self.console is None:
            return
        process = self.console.process
        deadline = time.monotonic() + CONSOLE_READY_TIMEOUT_S
        while not self._console_serving() and time.monotonic() < deadline:
            if not process.running():
                raise ServerStartError(CONSOLE, "exited", process.log_tail())
            time.sleep(0.05)

    def _console_serving(self) -> bool:
        """Whether the console answers on its port (the socket listens from the start: only
        an answer tells that the console accepts)."""
        try:
            with socket.create_connection((HOST, self.console_port), timeout=0.5) as conn:
                conn.sendall(b"GET /static/missing HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                return bool(conn.recv(12))
        except OSError:
            return False

    def _supervised(self) -> list[Supervised]:
        """Every process restarted when it dies: the webhook, the services and the console."""
        extra = [p for p in (self.webhook, self.console) if p is not None]
        return [*self.services.values(), *extra]

    def _check_services_alive(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        while True:
            for service in self.services.values():
                popen = service.process.popen
                if popen is not None and popen.poll() is not None:
                    raise ServerStartError(
                        service.name,
                        f"exited with code {popen.returncode}",
                        service.process.log_tail(),
                    )
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def _wait_for_watcher(self, log: Path, offset: int, timeout_s: float) -> None:
        """Best effort: wait until the watcher has listed every kind and carries out decisions.

        Jobs created before that are published in list order (by name), not creation order,
        and could be decided apart; `usher up` reports ready only after. The watcher says so
        in its log (``WATCHER_READY``); if that line never comes, this waits ``timeout_s``
        and goes on (the watcher works the same, the first jobs just may race).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_services_alive(grace_s=0.0)
            try:
                with open(log, "rb") as handle:
                    handle.seek(offset)
                    if WATCHER_READY in handle.read():
                        return
            except FileNotFoundError:
                pass
            time.sleep(0.1)

    def _info(self, base: StackInfo) -> StackInfo:
        options = self.options
        return msgspec.structs.replace(
            base,
            pids={
                **base.pids,
                EMULATOR: self.emulator.pid or 0 if self.emulator else 0,
                **{p.name: p.pid or 0 for p in self.cluster_emulators.values()},
                **self._webhook_pid(),
            },
            started_at=datetime.now(UTC),
            kubeconfig=str(self.kubeconfig),
            zones=list(options.served_zones),
            burst_zones=list(options.burst_zones),
            clusters=format_cluster_zones(options.cluster_zones or {}),
            service_pids={name: s.process.pid or 0 for name, s in self.services.items()},
            health_ports=dict(self.health_ports),
            policy=options.policy,
            oversell_rate=options.oversell_rate,
            within_quota=options.within_quota,
            min_runtime_s=options.min_runtime_s,
            half_life_s=options.half_life_s,
            up_pid=self.up_pid,
            console_url=self.console_url,
            console_pid=self.console.process.pid or 0 if self.console else 0,
            kube_state_metrics_port=self.kube_state.port if self.kube_state else 0,
        )

    def _restarts(self) -> dict[str, Restarts]:
        """Each restarted process's record, for ``usher status``."""
        return {s.name: s.record() for s in self._supervised() if s.restarts or s.in_a_row}

    def _webhook_pid(self) -> dict[str, int]:
        return {WEBHOOK: self.webhook.process.pid or 0} if self.webhook else {}

    # ------------------------------------------------------------------ watching over

    def infrastructure_down(self) -> str | None:
        """Why the system cannot go on (a server that keeps dying, the emulator gone), if so."""
        for watch in self.servers:
            if watch.gave_up is not None:
                return watch.gave_up
        # Another cluster's emulator may die: its watcher says it is disconnected (M1) and
        # the rest goes on, as with a real cluster lost.
        if self.emulator is not None and not self.emulator.running():
            return f"{EMULATOR} exited unexpectedly; stopping"
        return None

    def supervise(self) -> list[str]:
        """Restart servers and services that exited (after a growing pause); what happened."""
        notes: list[str] = []
        now = time.monotonic()
        changed = False
        for watch in self.servers:
            said, restarted = watch.check(now)
            notes.extend(said)
            changed = changed or restarted
        for service in self._supervised():
            if service.process.running():
                changed = service.settled(now) or changed
                continue
            if service.down_since is None:
                service.exited(now)
                code = service.process.popen.returncode if service.process.popen else None
                looping = " (crash-looping)" if service.in_a_row >= CRASH_LOOP_RESTARTS else ""
                notes.append(f"{service.name} exited (code {code}); restarting it{looping}")
                changed = True  # stack.json says it is down and how often it died
            assert service.down_since is not None
            pause = RESTART_PAUSE_S[min(service.in_a_row - 1, len(RESTART_PAUSE_S) - 1)]
            if now - service.down_since < pause:
                continue
            service.started_again(now)
            changed = True
        if changed and self.info is not None:
            pids = {n: s.process.pid or 0 for n, s in self.services.items()}
            servers = {w.name: w.server.process.pid or 0 for w in self.servers if w.server.process}
            console = self.console.process.pid or 0 if self.console else 0
            self.info = msgspec.structs.replace(
                self.info,
                pids={**self.info.pids, **servers, **self._webhook_pid()},
                service_pids=pids,
                console_pid=console,
                restarts=self._restarts(),
            )
            write_stack_info(self.home, self.info)
        return notes

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """The console and the services (watcher first), then the emulator, PostgreSQL, NATS;
        forget stack.json."""
        try:
            if self.kube_state is not None:
                self.kube_state.stop()
            services = [s.process for s in reversed(self._supervised())]
            for process in services:  # all at once: each drains its own work in parallel
                if process.popen is not None and process.running():
                    with contextlib.suppress(ProcessLookupError):
                        process.popen.send_signal(process.stop_signal)
            for process in services:
                process.stop(timeout=15.0)
            for emulator in [self.emulator, *self.cluster_emulators.values()]:
                if emulator is not None:
                    emulator.stop(timeout=15.0)
            self.stack.stop()
            if self._console_listening is not None:
                self._console_listening.close()
                self._console_listening = None
        finally:  # whatever failed on the way, stack.json must not name a stopped stack
            with contextlib.suppress(FileNotFoundError):
                (self.home / STACK_FILE).unlink()
