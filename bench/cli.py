"""CLI benchmark: how long ``usher --version``, ``usher jobs`` and ``usher queues`` take to answer.

What it does: starts a fresh embedded NATS JetStream in a temporary folder, creates the log
streams and publishes a small log (a quota tree of 2 departments x 5 leaves and ``JOBS`` pending
jobs), then runs each command as a person does -- the ``usher`` console script as a new process,
``--nats`` naming that server, ``USHER_HOME`` an empty folder -- ``RUNS`` times after one warm-up,
and reports the median wall seconds of each (``<command>_s``) and its median CPU seconds
(``<command>_cpu_s``, user + system: on a busy machine wall time waits for a core, CPU time
does not), beside the bare interpreter's (``python -c pass``): start-up (imports, click,
connecting, reading and folding the log) is nearly all of it. Byte-code caching is left on for
the commands (the warm-up writes the caches, as a person's first run does). Every run's exit
code and output are checked (a command that failed fast would look fast). Then, as the log
grows (``LOG_SIZES``: 1,000 and 100,000 events, months of history: jobs observed and deleted
again, the same ``JOBS`` pending), the CPU seconds of ``usher jobs``, ``usher queue Q`` and
``usher explain J`` at each size (``<command>_<size>_cpu_s``), so their growth shows; they
read the people read model (``usher.client.readmodel``) that the preemptor keeps, saved here
by the preemptor's own code (``services.common.views.PeopleViews``) once the log is
written, whose CPU seconds (a whole fold plus the save) are ``views_<size>_save_cpu_s``.
What it must never do: print, pass or fail on a number, or leave the server running.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import nats

from bench.core import build_tree, workloads
from schemas import (
    ClusterEvent,
    Envelope,
    EventId,
    QuotaTreeApplied,
    WorkloadDeleted,
    WorkloadObserved,
    Zone,
    cloudevent_headers,
    encode,
)
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings
from services.common.snapshots import SnapshotPolicy
from services.common.views import PeopleViews
from usher.adapters.logs import get_logger
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.subjects import Subjects
from usher.client.state import catch_up
from usher.client.target import resolve_target
from usher.core.model.config import EngineConfig
from usher.local.servers import NatsServer

JOBS = 200
"""Pending jobs in the log the commands read (a busy demo's order of magnitude)."""
DEPARTMENTS, LEAVES = 2, 5
IGNORED_ENV = ("USHER_NATS_URL", "USHER_KUBECONFIG", "KUBECONFIG", "USHER_PREFIX")
"""Settings of the caller's own installation, which must not redirect the commands."""


LOG_SIZES = {"1k": 1_000, "100k": 100_000}
"""Events on the log for the growth runs (tree, gone jobs' observed/deleted pairs, pending)."""
PUBLISH_BATCH = 500


def log_events(subjects: Subjects, size: int) -> list[tuple[str, ClusterEvent]]:
    """One tree, ``JOBS`` pending jobs last, and before them observed-then-deleted jobs up to
    ``size`` events in all (0: only the tree and the pending jobs)."""
    tree = QuotaTreeApplied(root=build_tree(DEPARTMENTS, LEAVES, root_cores=40))
    events: list[tuple[str, ClusterEvent]] = [(subjects.quota, tree)]
    gone = max(size - 1 - JOBS, 0) // 2
    for n, job in enumerate(workloads(gone + JOBS, DEPARTMENTS, LEAVES, seed=7)):
        subject = subjects.job(Zone("default"), job.namespace, job.name)
        events.append((subject, job))
        if n < gone:
            events.append((subject, WorkloadDeleted(workload=job.workload)))
    return events


async def publish_log(nats_url: str, subjects: Subjects, size: int = 0) -> None:
    """Streams, then the events of ``log_events``, each acknowledged by JetStream (in batches:
    the order within a subject is kept, each job's events in one batch or in order)."""
    nc = await nats.connect(nats_url, connect_timeout=5)
    try:
        js = nc.jetstream()
        await ensure_streams(js, subjects)
        now = datetime.now(UTC)
        events = log_events(subjects, size)
        for start in range(0, len(events), PUBLISH_BATCH):
            batch = events[start : start + PUBLISH_BATCH]
            for n, (subject, event) in enumerate(batch, start):
                envelope = Envelope(
                    id=EventId(f"bench-cli:{n}"), time=now, source="bench", event=event
                )
                await js.publish(
                    subject, encode(envelope), headers=cloudevent_headers(envelope, subjects.prefix)
                )
    finally:
        await nc.drain()


def usher_command() -> list[str]:
    """The ``usher`` console script next to this interpreter (what a person runs)."""
    script = Path(sys.executable).parent / "usher"
    return [str(script)] if script.exists() else [sys.executable, "-m", "usher"]


def timed_runs(
    argv: Sequence[str], env: dict[str, str], runs: int, expect: str
) -> tuple[float, float]:
    """Median wall and CPU seconds of ``runs`` runs after a warm-up; each must print ``expect``
    and exit 0."""
    times: list[tuple[float, float]] = []
    for attempt in range(runs + 1):
        cpu_before = _children_cpu_s()
        began = time.perf_counter()
        done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=600)
        elapsed = time.perf_counter() - began
        cpu = _children_cpu_s() - cpu_before
        if done.returncode != 0 or expect not in done.stdout:
            raise RuntimeError(
                f"{' '.join(argv)} exited {done.returncode}, expected {expect!r} in its output:"
                f"\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
        if attempt:
            times.append((elapsed, cpu))
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(quick: bool) -> dict[str, float]:
    """Start NATS, publish the log, time each command, stop NATS."""
    runs = 5 if quick else 15
    with tempfile.TemporaryDirectory(prefix="usher-bench-cli-") as folder:
        home = Path(folder)
        (home / "usher-home").mkdir()
        server = NatsServer(home)
        try:
            url = server.start()
            subjects = Subjects("benchcli")
            asyncio.run(publish_log(url, subjects))
            env = {**os.environ, "USHER_HOME": str(home / "usher-home")}
            for name in (*IGNORED_ENV, "PYTHONDONTWRITEBYTECODE"):
                env.pop(name, None)
            usher = usher_command()
            target = ["--nats", url, "--prefix", subjects.prefix]
            commands = {
                "python_floor": ([sys.executable, "-c", "pass"], ""),
                "version": ([*usher, "--version"], "version"),
                "jobs": ([*usher, "jobs", *target], "ns-"),
                "queues": ([*usher, "queues", *target], "leaf-"),
            }
            numbers: dict[str, float] = {}
            for name, (argv, expect) in commands.items():
                wall, cpu = timed_runs(argv, env, runs, expect)
                numbers[f"{name}_s"], numbers[f"{name}_cpu_s"] = wall, cpu
            for label, size in LOG_SIZES.items():
                grown = Subjects(f"benchcli{label}")
                asyncio.run(publish_log(url, grown, size))
                numbers.update(growth(usher, env, url, grown, label, 3 if quick else 5))
            return numbers
        finally:
            server.stop()


async def preemptor_saves(url: str, subjects: Subjects, config: EngineConfig) -> None:
    """What the preemptor does with the people read model: fold the log into it and save it
    (``PeopleViews``, as on a graceful stop)."""
    nc = await nats.connect(url)
    try:
        settings = ServiceSettings(nats_url=url, prefix=subjects.prefix, engine=config)
        log = get_logger(service="preemptor")
        js = nc.jetstream()
        ctx = ServiceContext("preemptor", settings, nc, js, subjects, asyncio.Event(), log)
        views = PeopleViews(ctx, config, SnapshotPolicy())
        state = await views.open()
        follower = await catch_up(state, js, subjects)
        await follower.stop()
        await views.close(state)
    finally:
        await nc.close()


def growth(
    usher: list[str], env: dict[str, str], url: str, subjects: Subjects, label: str, runs: int
) -> dict[str, float]:
    """CPU seconds of ``usher jobs``, ``usher queue Q`` and ``usher explain J`` on a log of
    one size (Q: the first leaf's queue; J: the last pending job)."""
    target = ["--nats", url, "--prefix", subjects.prefix]
    last = log_events(subjects, LOG_SIZES[label])[-1][1]
    assert isinstance(last, WorkloadObserved)
    home = Path(env["USHER_HOME"])
    config = resolve_target(home=home, nats_url=url, prefix=subjects.prefix).engine
    began = time.process_time()
    asyncio.run(preemptor_saves(url, subjects, config))
    saved = time.process_time() - began
    queues = subprocess.run(
        [*usher, "queues", *target], env=env, capture_output=True, text=True, timeout=600
    )
    queue = next(line.split()[0] for line in queues.stdout.splitlines() if "leaf-" in line)
    commands = {
        "jobs": ([*usher, "jobs", *target], "ns-"),
        "queue": ([*usher, "queue", queue, *target], queue),
        "explain": ([*usher, "explain", str(last.workload), *target], last.name),
    }
    out: dict[str, float] = {f"views_{label}_save_cpu_s": saved}
    for name, (argv, expect) in commands.items():
        _, cpu = timed_runs(argv, env, runs, expect)
        out[f"{name}_{label}_cpu_s"] = cpu
    return out


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    for key, value in run(quick).items():
        print(f"{key:<16} {value:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
