"""Shared plumbing of the ``limits``, ``stack`` and ``kueue`` benchmark suites.

What it does: starts a fresh embedded NATS JetStream and PostgreSQL (the same servers and
settings ``bench/stack.py`` and ``usher up`` use) in a temporary folder and migrates the
ledger's schema; starts the Kubernetes API emulator with its fake kubelet and the services
(``python -m usher run <service>``) as separate processes; reads a whole stream back with an
ordered consumer (one round trip per batch, not one per message).
What it must never do: leave a process behind (each is stopped by its own pid, and every child
dies with us through ``PR_SET_PDEATHSIG``), signal anything it did not start, or touch a
folder outside its temporary one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from schemas import Envelope, decode_envelope
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.migrate import upgrade
from usher.local.processes import ManagedProcess
from usher.local.servers import NatsServer, PostgresServer


@dataclass
class Servers:
    """A running NATS + PostgreSQL pair, their URLs and the temporary folder they live in."""

    home: Path
    nats_url: str
    database_url: str
    procs: list[ManagedProcess] = field(default_factory=list)
    server_pids: dict[str, int] = field(default_factory=dict)

    def start(self, name: str, argv: Sequence[str], env: dict[str, str]) -> ManagedProcess:
        """Start a child process whose output goes to ``home/logs/<name>.log``."""
        proc = ManagedProcess(name, list(argv), self.home / "logs" / f"{name}.log", env=env)
        proc.start()
        self.procs.append(proc)
        return proc

    def pids(self) -> dict[str, int]:
        """Every process this run started, by name: the servers and the children."""
        out = dict(self.server_pids)
        out.update({p.name: p.pid for p in self.procs if p.pid is not None})
        return out

    def tails(self, lines: int = 15) -> str:
        """The last lines of every child's log, for a report when something went wrong."""
        return "\n".join(f"--- {p.name} (pid {p.pid}):\n{p.log_tail(lines)}" for p in self.procs)


@contextlib.contextmanager
def fresh_servers(prefix: str) -> Iterator[Servers]:
    """NATS + PostgreSQL (durable, as deployed) in a temporary folder, the schema migrated.

    Every process started through ``Servers.start`` is stopped on exit, newest first, then
    PostgreSQL and NATS.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        home = Path(folder)
        nats_server = NatsServer(home)
        postgres = PostgresServer(home, durable=True)
        servers: Servers | None = None
        try:
            nats_url = nats_server.start()
            database_url = postgres.start()
            upgrade(database_url)
            servers = Servers(home=home, nats_url=nats_url, database_url=database_url)
            for name, server in (("nats", nats_server), ("postgres", postgres)):
                if server.process is not None and server.process.pid is not None:
                    servers.server_pids[name] = server.process.pid
            yield servers
        finally:
            if servers is not None:
                for proc in reversed(servers.procs):
                    proc.stop(timeout=10)
            postgres.stop(remove_data=True)  # a temporary folder: its data goes with it
            nats_server.stop()


async def prepare_streams(nats_url: str, subjects: Subjects) -> None:
    """Create the log and DLQ streams of ``subjects`` (as ``usher up`` does before services)."""
    nc = await nats.connect(nats_url)
    try:
        await ensure_streams(nc.jetstream(), subjects)
    finally:
        await nc.drain()


def start_emulator(
    servers: Servers,
    kubeconfig: Path,
    history: int = 400_000,
    namespaces: Sequence[str] = (),
) -> ManagedProcess:
    """The Kubernetes API emulator with its fake kubelet as a process, starting with
    ``namespaces`` (as a cluster has them: it refuses objects in a namespace that does not
    exist); waits for its kubeconfig."""
    proc = servers.start(
        "kube-emulator",
        [
            sys.executable,
            "-m",
            "usher.local.kube_emulator",
            "--kubeconfig",
            str(kubeconfig),
            "--kubelet",
            "--history",
            str(history),
            *(arg for namespace in namespaces for arg in ("--namespace", namespace)),
        ],
        env=_inherit(),
    )
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if time.monotonic() > deadline or not proc.running():
            raise RuntimeError(f"emulator did not start:\n{proc.log_tail()}")
        time.sleep(0.05)
    return proc


def start_services(
    servers: Servers, env: dict[str, str], zones: Sequence[str], *, watcher: bool = True
) -> None:
    """Ledger, preemptor, one dequeuer per zone and (unless told not to) the watcher, each its
    own process."""
    plan: list[tuple[str, list[str]]] = [("ledger", ["ledger"]), ("preemptor", ["preemptor"])]
    plan += [(f"dequeuer-{z}", ["dequeuer", "--zone", z]) for z in zones]
    if watcher:
        plan.append(("watcher", ["watcher"]))
    for name, args in plan:
        servers.start(
            name, [sys.executable, "-m", "usher", "run", *args], env={**_inherit(), **env}
        )


def _inherit() -> dict[str, str]:
    return dict(os.environ)


async def last_seq(js: JetStreamContext, stream: str) -> int:
    """The stream's last sequence number (0 when empty)."""
    info = await js.stream_info(stream)
    return int(info.state.last_seq)


async def quiesce(
    js: JetStreamContext, stream: str, *, quiet_s: float = 1.0, timeout_s: float = 60.0
) -> int:
    """Wait until ``stream``'s last sequence has not moved for ``quiet_s``; returns it."""
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        seq = await last_seq(js, stream)
        if seq != last:
            last, since = seq, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return seq
        await asyncio.sleep(0.1)
    return last


async def read_stream(
    js: JetStreamContext, subjects: Subjects, upto: int | None = None
) -> list[tuple[int, str, Envelope]]:
    """Every log entry up to sequence ``upto`` (default: the last) as (seq, subject, envelope).

    The limits suite times this loop as the client's raw read+decode ceiling, so it stays the
    bare ordered consumer; reports that just need the log use the export adapter's reader.
    """
    stop = upto if upto is not None else await last_seq(js, subjects.stream_name)
    out: list[tuple[int, str, Envelope]] = []
    if stop <= 0:
        return out
    done = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        if seq <= stop:
            out.append((seq, msg.subject, decode_envelope(msg.data)))
        if seq >= stop:
            done.set()

    sub = await js.subscribe(
        f"{subjects.prefix}.>",
        stream=subjects.stream_name,
        cb=on_message,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        pending_msgs_limit=-1,
        pending_bytes_limit=-1,
    )
    try:
        await done.wait()
    finally:
        await sub.unsubscribe()
    return out


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of ``pid`` and its live descendants so far; 0 when gone.

    Reads ``/proc`` (Linux); PostgreSQL's work is in its backends, children of the postmaster.
    """
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    family, frontier = {pid}, [pid]
    while frontier:
        current = frontier.pop()
        for child, parent in parents.items():
            if parent == current and child not in family:
                family.add(child)
                frontier.append(child)
    return sum(times.get(p, 0.0) for p in family)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN for nothing (a number the table can still print)."""
    return sum(values) / len(values) if values else float("nan")
