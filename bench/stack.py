"""Stack benchmark: job events on the log -> committed ``Admitted`` decisions, end to end.

What it does: starts a fresh embedded NATS + PostgreSQL, the ledger, the preemptor and one
dequeuer as separate processes (as deployed), then
1. measures JetStream pipelined publish with acks on the same server (the ceiling to compare
   with),
2. publishes N ``WorkloadObserved`` events as fast as possible into a tree that admits them
   all and measures admissions/s until the N-th ``Admitted`` is on the log (saturation),
3. offers events at a fixed rate below saturation (a third of it, at most 1,000/s) and at
   500/s, and reports p50/p99 from publish to the ``Admitted`` decision on the log; at 500/s
   also split at the ledger's stamp in the granting transaction (``stages``);
4. ``cpu_cores_busy``: the CPU seconds of every process (servers, services, this client) over
   the measurement, divided by its wall time: how much of the machine the stack got.
The watcher is not involved: the metric starts at "job event on the log", per the issue.
What it must never do: pass or fail on a number; it reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from datetime import UTC, datetime

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from bench.common import cpu_seconds, fresh_servers, prepare_streams, start_services
from bench.profile import Profiler
from schemas import (
    Envelope,
    EventId,
    Millis,
    PodSet,
    QuotaNode,
    QuotaTreeApplied,
    WorkloadKey,
    WorkloadObserved,
    Zone,
    cloudevent_headers,
    decode_envelope,
    encode,
)
from usher.adapters.nats.subjects import Subjects

LEAVES = 10


def tree() -> QuotaNode:
    big = {"cpu": 10_000_000 * 1000}
    return QuotaNode(
        name="root",
        min=big,
        max=big,
        children=[
            QuotaNode(
                name=f"leaf-{i}",
                min={"cpu": 1_000_000 * 1000},
                max={"cpu": 10_000_000 * 1000},
                namespaces=[f"ns-{i}"],
            )
            for i in range(LEAVES)
        ],
    )


def observed(run: str, n: int) -> tuple[str, Envelope]:
    namespace, name = f"ns-{n % LEAVES}", f"{run}-{n}"
    event = WorkloadObserved(
        workload=WorkloadKey(f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        kind="batch/v1/Job",
        zone=Zone("default"),
        created_ms=Millis(n),
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": 1000})],
    )
    envelope = Envelope(
        id=EventId(f"bench:{run}:{n}"), time=datetime.now(UTC), source="bench", event=event
    )
    return f"{namespace}/{name}", envelope


async def publish_rate(js: JetStreamContext, subjects: Subjects, count: int) -> float:
    """JetStream publish with acks, pipelined in windows (the same way the stack publishes).

    Into a scratch stream of its own: bytes that are not envelopes on the log would be parked
    as poison by every service and slow down the measurement that follows.
    """
    stream = f"{subjects.prefix.upper()}_RAW"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{subjects.prefix}raw.>"]))
    payload = b"x" * 400
    began = time.perf_counter()
    window = 500
    for start in range(0, count, window):
        await asyncio.gather(
            *(
                js.publish(f"{subjects.prefix}raw.bench", payload)
                for _ in range(min(window, count - start))
            )
        )
    rate = count / (time.perf_counter() - began)
    await js.delete_stream(stream)
    return rate


class AdmissionClock:
    """Records when each workload's ``Admitted`` reached the log (via a core subscription)."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.stamped: dict[str, float] = {}
        """The ledger's stamp of each ``Admitted`` (its envelope's time, written in the
        transaction that granted it), wall-clock seconds."""
        self.seen_wall: dict[str, float] = {}
        self.changed = asyncio.Event()

    async def on_message(self, msg: Msg) -> None:
        envelope = decode_envelope(msg.data)
        key = str(getattr(envelope.event, "workload", ""))
        if key not in self.seen:
            self.seen[key] = time.perf_counter()
            self.seen_wall[key] = time.time()
            self.stamped[key] = envelope.time.timestamp()
        self.changed.set()

    async def wait_count(self, count: int, timeout_s: float) -> None:
        deadline = time.perf_counter() + timeout_s
        while len(self.seen) < count:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{len(self.seen)}/{count} admitted")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=1)


async def _publish(js: JetStreamContext, subjects: Subjects, envelope: Envelope) -> None:
    event = envelope.event
    assert isinstance(event, WorkloadObserved)
    await js.publish(
        subjects.job(event.zone, event.namespace, event.name),
        encode(envelope),
        headers=cloudevent_headers(envelope, subjects.prefix),
    )


async def measure(
    nats_url: str,
    subjects: Subjects,
    quick: bool,
    sampling: contextlib.AbstractContextManager[None] | None = None,
) -> dict[str, float]:
    """The numbers; ``sampling`` (a profiler's) is entered after the warm-up, for the rest."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    clock = AdmissionClock()
    await nc.subscribe(f"{subjects.prefix}.decision.*.admitted.>", cb=clock.on_message)
    raw = await publish_rate(js, subjects, 5_000 if quick else 20_000)
    tree_env = Envelope(
        id=EventId("bench:tree"),
        time=datetime.now(UTC),
        source="bench",
        event=QuotaTreeApplied(root=tree()),
    )
    await js.publish(
        subjects.quota, encode(tree_env), headers=cloudevent_headers(tree_env, subjects.prefix)
    )
    # Warm-up: the dequeuer has replayed and the ledger has the tree.
    warm = [observed("warm", n) for n in range(200)]
    for _, envelope in warm:
        await _publish(js, subjects, envelope)
    await clock.wait_count(len(warm), 60)
    with sampling or contextlib.nullcontext():
        count = 5_000 if quick else 20_000
        batch = [observed("sat", n) for n in range(count)]
        began = time.perf_counter()
        window = 500
        for start in range(0, count, window):
            await asyncio.gather(
                *(_publish(js, subjects, e) for _, e in batch[start : start + window])
            )
        published = time.perf_counter()
        await clock.wait_count(len(warm) + count, 300)
        elapsed = max(clock.seen[k] for k, _ in batch) - began
        saturation = count / elapsed

        rate = min(1000.0, saturation / 3)
        seconds = 4 if quick else 10
        latencies, _ = await offered_latencies(js, subjects, clock, "lat", rate, seconds)
        at_500, sent_500 = await offered_latencies(
            js, subjects, clock, "lat500", FIXED_RATE, seconds
        )
    split = stages(clock, sent_500)
    await nc.drain()
    return {
        "jetstream_publish_per_s": raw,
        "admissions_per_s": saturation,
        "admissions_vs_publish": saturation / raw,
        "publish_phase_s": published - began,
        "offered_rate_per_s": rate,
        "latency_p50_ms": statistics.median(latencies),
        "latency_p99_ms": percentile(latencies, 0.99),
        "latency_500_p50_ms": statistics.median(at_500),
        "latency_500_p99_ms": percentile(at_500, 0.99),
        **{f"latency_500_{part}": value for part, value in split.items()},
    }


FIXED_RATE = 500.0
"""The issue's fixed offered rate (jobs/s), measured beside a third of saturation."""


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[max(0, int(len(sorted_values) * fraction) - 1)]


async def offered_latencies(
    js: JetStreamContext,
    subjects: Subjects,
    clock: AdmissionClock,
    run: str,
    rate: float,
    seconds: float,
) -> tuple[list[float], dict[str, float]]:
    """Offer ``rate`` job events per second for ``seconds``; ms from each publish to its
    ``Admitted`` on the log, sorted, and the wall-clock second each was published."""
    offered = int(rate * seconds)
    sent: dict[str, float] = {}
    sent_wall: dict[str, float] = {}
    before = len(clock.seen)
    start_time = time.perf_counter()
    for n in range(offered):
        key, envelope = observed(run, n)
        target = start_time + n / rate
        delay = target - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sent[key] = time.perf_counter()
        sent_wall[key] = time.time()
        await _publish(js, subjects, envelope)
    await clock.wait_count(before + offered, 120)
    return sorted((clock.seen[k] - t) * 1000 for k, t in sent.items()), sent_wall


def stages(clock: AdmissionClock, sent_wall: dict[str, float]) -> dict[str, float]:
    """Where the time from a job event to its ``Admitted`` went, p50 and p99 of each part:
    ``to_ledger`` up to the ledger's stamp in the granting transaction (the event read by the
    dequeuer, its pass, the request, the ledger's batch), ``after_ledger`` from that stamp to
    the decision seen on the log (the commit, the outbox relay, NATS). Wall clocks of one
    machine."""
    to_ledger = sorted((clock.stamped[k] - t) * 1000 for k, t in sent_wall.items())
    after = sorted((clock.seen_wall[k] - clock.stamped[k]) * 1000 for k in sent_wall)
    return {
        "to_ledger_p50_ms": statistics.median(to_ledger),
        "to_ledger_p99_ms": percentile(to_ledger, 0.99),
        "after_ledger_p50_ms": statistics.median(after),
        "after_ledger_p99_ms": percentile(after, 0.99),
    }


def run(quick: bool, profiler: Profiler | None = None) -> dict[str, float]:
    """Start a fresh stack in a temporary folder, measure, stop everything.

    With a ``profiler`` (``python -m bench --profile``) every process is sampled while the
    numbers are measured.
    """
    subjects = Subjects("bench")
    with fresh_servers("usher-bench-") as servers:
        env = {
            "USHER_NATS_URL": servers.nats_url,
            "USHER_DATABASE_URL": servers.database_url,
            "USHER_PREFIX": subjects.prefix,
            "USHER_HOME": str(servers.home / "home"),
            "USHER_SETTLE_MS": "5",
        }
        asyncio.run(prepare_streams(servers.nats_url, subjects))
        start_services(servers, env, zones=["default"], watcher=False)
        try:
            sampling = profiler.sampling(servers.pids()) if profiler else None
            cpu_before = sum(cpu_seconds(pid) for pid in servers.pids().values())
            client_before, began = time.process_time(), time.monotonic()
            numbers = asyncio.run(measure(servers.nats_url, subjects, quick, sampling))
            cpu = sum(cpu_seconds(pid) for pid in servers.pids().values()) - cpu_before
            cpu += time.process_time() - client_before
            numbers["cpu_cores_busy"] = cpu / (time.monotonic() - began)
            return numbers
        except Exception:
            print(servers.tails(20), file=sys.stderr)
            raise
