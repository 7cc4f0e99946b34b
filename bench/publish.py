"""The CPU one observation costs the watcher's process to publish (its publish path alone).

What it does: starts a fresh embedded NATS JetStream, and publishes workload observations
through the watcher's own ``Publisher`` (pipelined, CloudEvents headers, ``Nats-Msg-Id``, the
projection's "is it news" and "record it") the way a watch burst does: many objects, a few
versions each; reports this process's CPU time per observation (``time.process_time``: the
server's CPU is not in it) and, beside it, what the pieces of that path cost on their own per
call -- the CloudEvents headers (``cloudevent_headers``), the subject (``Subjects.job``) and
the envelope's JSON -- so a profile's frames can be read against them; and the CPU per
observation again with the garbage collector off (``_without_gc``): the difference is what
collecting the burst's objects costs, which a profile spreads over whatever frame allocated;
and once more with the observations arriving one at a time (``_paced``, ``PACED_PER_S``),
where each one's send is a write of its own unless the publisher puts several together.
What it must never do: pass or fail on a number, or leave its server running (stopped by its
own pid, its folder temporary).
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import nats

from bench.stack import observed
from schemas import Envelope, EventId, WorkloadObserved, encode
from schemas.envelope import cloudevent_headers
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings
from services.watcher.observe import Publisher
from services.watcher.options import WatcherOptions
from services.watcher.projection import WatcherProjection
from services.watcher.translate import Outgoing
from usher.adapters.logs import configure, get_logger
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.subjects import Subjects, installation_of
from usher.core.engine.facade import Engine
from usher.local.servers import NatsServer

PACED_PER_S = 2_000.0
"""The paced run's arrival rate: one observation at a time, as a busy watch delivers them."""


def observation(subjects: Subjects, n: int, version: int) -> Outgoing:
    """Workload ``n``'s ``version``-th watch event (the stack suite's job, its priority the
    version), as the watcher's translation gives it."""
    _, envelope = observed("publish", n)
    event = msgspec.structs.replace(envelope.event, priority=version)
    assert isinstance(event, WorkloadObserved)
    subject = subjects.job(event.zone, event.namespace, event.name)
    return Outgoing(subject, EventId(f"watcher:Job:{event.workload}:{version}"), event)


def per_call_us(call: Callable[[], object], number: int) -> float:
    """Median over five rounds of ``number`` calls, in microseconds per call."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(number):
            call()
        rounds.append((time.perf_counter() - start) / number * 1e6)
    return sorted(rounds)[2]


def pieces(subjects: Subjects, number: int) -> dict[str, float]:
    """What each piece of one publish costs on its own (µs per call)."""
    out = observation(subjects, 1, 1)
    envelope = Envelope(id=out.id, time=datetime.now(UTC), source="usher/watcher", event=out.event)
    event = out.event
    assert isinstance(event, WorkloadObserved)
    return {
        "headers_us": per_call_us(
            lambda: cloudevent_headers(envelope, installation_of(out.subject)), number
        ),
        "subject_us": per_call_us(
            lambda: subjects.job(event.zone, event.namespace, event.name), number
        ),
        "encode_us": per_call_us(lambda: encode(envelope), number),
    }


async def publish_path(
    url: str,
    subjects: Subjects,
    objects: int,
    versions: int,
    *,
    collect: bool = True,
    per_s: float | None = None,
) -> float:
    """This process's CPU µs per observation through ``Publisher`` (sent, acknowledged,
    recorded); with ``collect`` false, the garbage collector is off while it publishes; with
    ``per_s``, the observations arrive one at a time at that rate (as a watch delivers them)
    instead of all at once."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, subjects)
        settings = ServiceSettings(nats_url=url, prefix=subjects.prefix)
        log = get_logger(service="watcher")
        ctx = ServiceContext("watcher", settings, nc, js, subjects, asyncio.Event(), log)
        view = WatcherProjection.empty(Engine(settings.engine), subjects)
        publisher = Publisher(ctx, view, WatcherOptions())
        burst = [
            observation(subjects, n, version)
            for version in range(1, versions + 1)
            for n in range(objects)
        ]
        if not collect:
            gc.disable()
        start = time.process_time()
        try:
            began = time.perf_counter()
            for n, out in enumerate(burst):
                if per_s is not None:
                    await asyncio.sleep(max(0.0, began + n / per_s - time.perf_counter()))
                await publisher.publish(out, log)
            await publisher.settle()
            return (time.process_time() - start) / len(burst) * 1e6
        finally:
            gc.enable()
    finally:
        await nc.close()


def run(quick: bool) -> dict[str, float]:
    configure("INFO")
    objects, versions = (2_000, 3) if quick else (10_000, 3)
    subjects = Subjects("bench")
    numbers = pieces(subjects, 5_000 if quick else 20_000)
    with tempfile.TemporaryDirectory(prefix="usher-bench-publish-") as home:
        server = NatsServer(Path(home))
        server.start()
        try:
            cpu = asyncio.run(publish_path(server.url, subjects, objects, versions))
            # A prefix of its own: the same ids again would be duplicates to the server.
            again = Subjects(f"{subjects.prefix}-nogc")
            no_gc = asyncio.run(publish_path(server.url, again, objects, versions, collect=False))
            paced = Subjects(f"{subjects.prefix}-paced")
            trickle = asyncio.run(
                publish_path(server.url, paced, objects, versions, per_s=PACED_PER_S)
            )
        finally:
            server.stop()
    return {
        "watcher_cpu_us_per_observation": cpu,
        "watcher_cpu_us_per_observation_without_gc": no_gc,
        "watcher_cpu_us_per_observation_paced": trickle,
        **numbers,
        "observations": objects * versions,
    }


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    print(json.dumps(run(quick), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
