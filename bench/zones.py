"""`python -m bench.zones`: ten zone dequeuers' reservation batches racing on one ledger.

What it does: on fresh servers (PostgreSQL durable, NATS JetStream), applies a tree whose
departments are guaranteed a share of the root and may borrow up to all of it, then runs ten
writers -- one per zone, as ten zone dequeuers propose -- each sending batches of reservations
to the ledger store on its own connection (the ledger's very transaction, ``LedgerStore.reserve``
with the outbox, request ids and views the ledger's request server passes; ten transactions in
flight at once, as ten ledger replicas would run them), while the ledger's log consumer
releases finished workloads (``apply_log``) and the outbox relay publishes every decision to
JetStream (``OutboxRelay``, as the ledger process runs it). An observer reads the usage rows
every few milliseconds (one statement: one committed state) and counts rows above their
``max`` and parents whose usage is not the sum of their children's; at the end the
allocations' running intervals are swept (every committed step: stamps are taken under the
locks) for the peak of every node, and the usage rows are compared with the live allocations.
Reports admissions/s, batch latency, CPU per batch of this process (writers, consumer, relay,
observer) and of PostgreSQL (every backend: steadier than times on a shared machine),
statements and round trips per batch (SQLAlchemy's cursor, begin and commit events on the real
connections; no BEGIN or COMMIT is counted where the driver sends none), the relay's time and
round trips per flush, and over-commit, which must be 0.
What it must never do: pass or fail on a number, or count anything it did not observe on the
real servers.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import nats
from sqlalchemy import Connection, event, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bench.common import cpu_seconds, fresh_servers, prepare_streams
from schemas import QuotaNode, QuotaPath, Reservation
from schemas.ids import QueueName, WorkloadKey, Zone
from services.ledger.outbox import outbox_builder
from services.ledger.relay import OutboxRelay
from usher.adapters.logs import get_logger
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.ledger_store import LedgerStore, Observation

PREFIX = "benchzones"
CORE = 1000
ZONES = [f"zone-{i}" for i in range(10)]
DEPARTMENTS = 4
LEAVES_PER_DEPARTMENT = 5
ROOT_CORES = 400


@dataclass
class Counted:
    """What one engine's connections sent to the server: statements (the first words of
    each in ``sent``), and the BEGINs and COMMITs the driver really sent."""

    statements: int = 0
    begins: int = 0
    commits: int = 0
    sent: list[str] = field(default_factory=list)
    stop: Callable[[], None] = lambda: None
    """Stop counting (remove the listeners)."""

    def round_trips(self) -> int:
        return self.statements + self.begins + self.commits

    def reset(self) -> None:
        self.statements = self.begins = self.commits = 0
        self.sent.clear()


def count_on(engine: AsyncEngine) -> Counted:
    """Count what ``engine``'s connections send from now on (SQLAlchemy's own events)."""
    seen = Counted()

    def on_statement(*args: Any) -> None:
        seen.statements += 1
        seen.sent.append(" ".join(str(args[2]).split()[:2]))

    def on_begin(conn: Connection) -> None:
        seen.begins += _sent(conn)

    def on_commit(conn: Connection) -> None:
        seen.commits += _sent(conn)

    listeners: list[tuple[str, Callable[..., None]]] = [
        ("before_cursor_execute", on_statement),
        ("begin", on_begin),
        ("commit", on_commit),
    ]
    for name, listener in listeners:
        event.listen(engine.sync_engine, name, listener)

    def stop() -> None:
        for name, listener in listeners:
            event.remove(engine.sync_engine, name, listener)

    seen.stop = stop
    return seen


def _sent(conn: Connection) -> int:
    """1 when a BEGIN or COMMIT goes to the server: not on an autocommit connection, where
    the driver sends neither (each statement is its own transaction)."""
    return 0 if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT" else 1


def bench_tree() -> QuotaNode:
    """A root of 400 cores over four departments guaranteed 100 each that may borrow up to
    the whole root, each over five users limited by nothing but their department."""
    share = ROOT_CORES // DEPARTMENTS
    return QuotaNode(
        name="root",
        min={"cpu": ROOT_CORES * CORE},
        max={"cpu": ROOT_CORES * CORE},
        children=[
            QuotaNode(
                name=f"dept-{d}",
                min={"cpu": share * CORE},
                max={"cpu": ROOT_CORES * CORE},
                children=[
                    QuotaNode(name=f"user-{u}", max={"cpu": ROOT_CORES * CORE})
                    for u in range(LEAVES_PER_DEPARTMENT)
                ],
            )
            for d in range(DEPARTMENTS)
        ],
    )


def limits_of(root: QuotaNode) -> dict[str, tuple[int, int]]:
    """(min, max) cpu of every node by path."""
    out: dict[str, tuple[int, int]] = {}

    def walk(node: QuotaNode, prefix: str) -> None:
        path = f"{prefix}/{node.name}" if prefix else node.name
        out[path] = (node.min.get("cpu", 0), node.max["cpu"])
        for child in node.children:
            walk(child, path)

    walk(root, "")
    return out


LEAVES = [
    QuotaPath(f"root/dept-{d}/user-{u}")
    for d in range(DEPARTMENTS)
    for u in range(LEAVES_PER_DEPARTMENT)
]


@dataclass
class Race:
    """What the writers, the releaser and the observer saw."""

    granted: int = 0
    refused: int = 0
    batch_ms: list[float] = field(default_factory=list)
    running: list[WorkloadKey] = field(default_factory=list)
    released: int = 0
    samples: int = 0
    over_max_samples: int = 0
    unsummed_samples: int = 0
    peak_borrowed_cores: int = 0


async def writer(
    store: LedgerStore, race: Race, zone: str, batches: int, size: int, seed: int, kick: Any
) -> None:
    """One zone dequeuer: ``batches`` batches of ``size`` proposals in its zone."""
    rng = random.Random(seed)
    builder = outbox_builder(Subjects(PREFIX))
    for number in range(batches):
        items = [
            Reservation(
                workload=WorkloadKey(f"ns/{zone}-{number}-{i}"),
                queue=QueueName(f"q-{zone}"),
                quota=rng.choice(LEAVES),
                zone=Zone(zone),
                requests={"cpu": rng.randint(1, 4) * CORE},
            )
            for i in range(size)
        ]
        started = time.perf_counter()
        results = await store.reserve(
            items,
            outbox=builder,
            request_ids=[f"{zone}-{number}"] * size,
            views=[number] * size,
        )
        race.batch_ms.append((time.perf_counter() - started) * 1000)
        kick()
        for result in results:
            if result.granted:
                race.granted += 1
                race.running.append(result.workload)
            else:
                race.refused += 1


async def releaser(store: LedgerStore, race: Race, stop: asyncio.Event, kick: Any) -> None:
    """The ledger's log consumer: running jobs finish in random order, up to 100 a batch."""
    rng = random.Random(7)
    builder = outbox_builder(Subjects(PREFIX))
    seq = 1_000_000
    while not stop.is_set() or race.running:
        if not race.running:
            await asyncio.sleep(0.002)
            continue
        count = min(len(race.running), 100)
        done = [race.running.pop(rng.randrange(len(race.running))) for _ in range(count)]
        seq += 1
        changes = [Observation(seq=seq, workload=w, change="Finished") for w in done]
        outcome = await store.apply_log("ledger", seq, changes, outbox=builder)
        race.released += len(outcome.released)
        kick()


async def observer(engine: AsyncEngine, race: Race, stop: asyncio.Event) -> None:
    """Sample the usage rows (one statement, one committed state) until ``stop``."""
    limits = limits_of(bench_tree())
    while not stop.is_set():
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT path, used, max FROM quota_usage WHERE resource = 'cpu'")
            )
            used = {path: (value, high) for path, value, high in rows}
        race.samples += 1
        race.over_max_samples += sum(
            1 for value, high in used.values() if high is not None and value > high
        )
        for path in limits:
            children = [p for p in limits if p.rsplit("/", 1)[0] == path and p != path]
            if children and used[path][0] != sum(used[c][0] for c in children):
                race.unsummed_samples += 1
            if path.count("/") == 1:
                borrowed = used[path][0] - limits[path][0]
                race.peak_borrowed_cores = max(race.peak_borrowed_cores, borrowed // CORE)
        await asyncio.sleep(0.005)


async def sweep_over_commit(engine: AsyncEngine) -> tuple[int, dict[str, int]]:
    """Nodes whose running usage went above their max at some committed instant (the
    allocations' [admitted_at, released_at) intervals, ends before starts at one instant),
    and the peak of every node."""
    limits = limits_of(bench_tree())
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT quota_path, requests, admitted_at, released_at FROM allocations"
                    " WHERE admitted_at IS NOT NULL"
                )
            )
        ).all()
    events: list[tuple[datetime, int, str, int]] = []
    for path, requests, start, end in rows:
        amount = int(requests.get("cpu", 0))
        events.append((start, 1, path, amount))
        if end is not None:
            events.append((end, 0, path, -amount))
    events.sort(key=lambda e: (e[0], e[1]))
    current = dict.fromkeys(limits, 0)
    peaks = dict.fromkeys(limits, 0)
    for _, _, leaf, delta in events:
        for node in _path(leaf):
            current[node] += delta
            peaks[node] = max(peaks[node], current[node])
    over = sum(1 for node, peak in peaks.items() if peak > limits[node][1])
    return over, peaks


def _path(leaf: str) -> Iterator[str]:
    parts = leaf.split("/")
    for i in range(len(parts)):
        yield "/".join(parts[: i + 1])


async def end_mismatches(engine: AsyncEngine) -> int:
    """Usage rows whose ``used`` is not the sum of the live allocations below them."""
    async with engine.connect() as conn:
        live = (
            await conn.execute(
                text("SELECT quota_path, requests FROM allocations WHERE state <> 'released'")
            )
        ).all()
        rows = await conn.execute(text("SELECT path, used FROM quota_usage WHERE resource = 'cpu'"))
        used: dict[str, int] = {str(path): int(value) for path, value in rows}
    expected = dict.fromkeys(used, 0)
    for leaf, requests in live:
        for node in _path(leaf):
            expected[node] += int(requests.get("cpu", 0))
    return sum(1 for node, value in used.items() if value != expected[node])


async def measure(
    database_url: str, nats_url: str, postgres_pid: int | None, quick: bool
) -> dict[str, float]:
    """The race on fresh servers; every number of the suite."""
    batches, size = (10, 20) if quick else (40, 50)
    subjects = Subjects(PREFIX)
    await prepare_streams(nats_url, subjects)
    writers_engine = create_async_engine(database_url, pool_size=len(ZONES) + 2)
    ledger_engine = create_async_engine(database_url, pool_size=4)
    relay_engine = create_async_engine(database_url, pool_size=2)
    nc = await nats.connect(nats_url)
    try:
        store = LedgerStore(writers_engine)
        await LedgerStore(ledger_engine).apply_tree(bench_tree(), version=1)
        # One warm-up batch per connection of the pool: prepared statements, not the race.
        await asyncio.gather(
            *(store.reserve([_warm(i)], views=[0], request_ids=["warm"]) for i in range(len(ZONES)))
        )
        await LedgerStore(ledger_engine).apply_log(
            "ledger",
            1,
            [
                Observation(seq=1, workload=_warm(i).workload, change="Finished")
                for i in range(len(ZONES))
            ],
        )
        relay = OutboxRelay(
            LedgerStore(relay_engine), nc.jetstream(), get_logger(service="bench"), _park
        )
        await relay.flush()
        reserved, relayed = count_on(writers_engine), count_on(relay_engine)
        race = Race()
        stop, writing = asyncio.Event(), asyncio.Event()
        relay_task = asyncio.create_task(relay.run(stop))
        release = asyncio.create_task(
            releaser(LedgerStore(ledger_engine), race, writing, relay.kick)
        )
        watch = asyncio.create_task(observer(ledger_engine, race, writing))
        started = time.perf_counter()
        client_cpu, server_cpu = time.process_time(), _cpu(postgres_pid)
        await asyncio.gather(
            *(
                writer(store, race, zone, batches, size, seed, relay.kick)
                for seed, zone in enumerate(ZONES)
            )
        )
        wall = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu
        server_cpu = _cpu(postgres_pid) - server_cpu
        writing.set()
        await release
        await watch
        relay.kick()
        await asyncio.sleep(0.2)
        stop.set()
        await relay_task
        published, relay_trips = relay.published, relayed.round_trips()
        drain_rows, drain_ms, drain_trips = await relay_drain(
            LedgerStore(ledger_engine), relay, relayed
        )
        over, peaks = await sweep_over_commit(ledger_engine)
        mismatched = await end_mismatches(ledger_engine)
    finally:
        await nc.drain()
        for engine in (writers_engine, ledger_engine, relay_engine):
            await engine.dispose()
    total = len(ZONES) * batches
    ordered = sorted(race.batch_ms)
    return {
        "dequeuers": len(ZONES),
        "batches": total,
        "batch_size": size,
        "admissions": race.granted,
        "refusals": race.refused,
        "admissions_per_s": race.granted / wall,
        "batches_per_s": total / wall,
        "batch_p50_ms": statistics.median(ordered),
        "batch_p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "client_cpu_ms_per_batch": 1000 * client_cpu / total,
        "postgres_cpu_ms_per_batch": 1000 * server_cpu / total,
        "statements_per_batch": reserved.statements / total,
        "round_trips_per_batch": reserved.round_trips() / total,
        "replays_per_batch": (reserved.begins - total) / total,
        "relay_published": published,
        "relay_round_trips_per_1000_rows": 1000 * relay_trips / max(published, 1),
        "relay_drain_rows": drain_rows,
        "relay_drain_ms": drain_ms,
        "relay_drain_round_trips": drain_trips,
        "peak_root_cores": peaks["root"] / CORE,
        "peak_borrowed_cores": race.peak_borrowed_cores,
        "usage_samples": race.samples,
        "over_commit_samples": race.over_max_samples + race.unsummed_samples,
        "over_commit_nodes_swept": over,
        "over_commit_end": mismatched,
    }


def _warm(index: int) -> Reservation:
    return Reservation(
        workload=WorkloadKey(f"ns/warm-{index}"),
        queue=QueueName("q-warm"),
        quota=LEAVES[index % len(LEAVES)],
        zone=Zone(ZONES[index]),
        requests={"cpu": CORE},
    )


def _cpu(pid: int | None) -> float:
    """CPU seconds of PostgreSQL (its backends are children of ``pid``); NaN if unknown."""
    return cpu_seconds(pid) if pid is not None else float("nan")


async def _park(*_: Any) -> None:
    """The relay parks a row it cannot decode: none here (every row is the ledger's own)."""


async def relay_drain(
    store: LedgerStore, relay: OutboxRelay, relayed: Counted
) -> tuple[int, float, int]:
    """A backlog of outbox rows (a full tree admitted in batches of 50 and released in one
    log batch), then one ``flush`` of the relay: rows, milliseconds, round trips."""
    builder = outbox_builder(Subjects(PREFIX))
    names = [WorkloadKey(f"ns/drain-{i}") for i in range(ROOT_CORES)]
    for start in range(0, len(names), 50):
        await store.reserve(
            [
                Reservation(
                    workload=name,
                    queue=QueueName("q-drain"),
                    quota=LEAVES[i % len(LEAVES)],
                    zone=Zone(ZONES[0]),
                    requests={"cpu": CORE},
                )
                for i, name in enumerate(names[start : start + 50])
            ],
            outbox=builder,
        )
    seq = 2_000_000
    await store.apply_log(
        "ledger",
        seq,
        [Observation(seq=seq, workload=name, change="Finished") for name in names],
        outbox=builder,
    )
    before, trips = relay.published, relayed.round_trips()
    started = time.perf_counter()
    await relay.flush()
    elapsed = (time.perf_counter() - started) * 1000
    return relay.published - before, elapsed, relayed.round_trips() - trips


def run(quick: bool) -> dict[str, float]:
    """Start fresh servers, race, stop everything."""
    with fresh_servers("usher-bench-zones-") as servers:
        pid = servers.server_pids.get("postgres")
        return asyncio.run(measure(servers.database_url, servers.nats_url, pid, quick))


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    for key, value in run(quick).items():
        print(f"{key:<34} {value:>14,.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
