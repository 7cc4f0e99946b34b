"""Usage accounting (U1) against the real ledger: its allocation intervals in PostgreSQL and the
usage folded from the decisions it published agree, after admissions, a preemption, a
requeue and finishes (over a real NATS server and a real PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

from schemas import (
    Millis,
    PodSet,
    Preempted,
    PreemptRequest,
    QueueName,
    QuotaPath,
    Reason,
    RequestId,
    Requeued,
    RequeueRequest,
    ReserveReply,
    WorkloadFinished,
    WorkloadKey,
    WorkloadObserved,
    decode,
    encode,
)
from tests.cli.history_cli import usher
from tests.services.test_ledger import ZONE, Ledger, res, running, summary, wait_decisions
from usher.adapters.nats.export import fetch_log
from usher.adapters.pg.audit_reads import read_ledger, read_usage_intervals
from usher.core.history import audit
from usher.core.history.replay import ExportHeader, decode_history, encode_export, format_time
from usher.core.history.usage import Interval, UsageBy, intervals_of, usage_totals

__all__ = ["running"]  # the fixture, shared with the ledger's own tests

CORE = 1000


def stopped(name: str, cores: int) -> WorkloadObserved:
    """The watcher's observation of ``ns/name`` suspended (its pods gone)."""
    return WorkloadObserved(
        workload=WorkloadKey(f"ns/{name}"),
        namespace="ns",
        name=name,
        kind="batch/v1/Job",
        zone=ZONE,
        created_ms=Millis(0),
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": cores * CORE})],
        suspended=True,
    )


async def preempt(service: Ledger, victim: str, preemptor: str, cores: int) -> None:
    request = PreemptRequest(
        request_id=RequestId(f"pre-{preemptor}"),
        zone=ZONE,
        preemptor=res(preemptor, "B", cores),
        victims=[
            Preempted(
                workload=WorkloadKey(f"ns/{victim}"),
                queue=QueueName("q-A"),
                quota=QuotaPath("root/A"),
                preemptor=WorkloadKey(f"ns/{preemptor}"),
                reason=Reason(code="Reclaim", message="B reclaims its guarantee"),
            )
        ],
    )
    raw = await service.nc.request(service.subjects.ledger_preempt, encode(request), timeout=5)
    assert [r.granted for r in decode(raw.data, ReserveReply).results] == [True]


async def requeue(service: Ledger, name: str, cores: int) -> None:
    item = Requeued(
        workload=WorkloadKey(f"ns/{name}"),
        queue=QueueName("q-B"),
        quota=QuotaPath("root/B"),
        zone=ZONE,
        requests={"cpu": cores * CORE},
        ready=0,
        total=1,
        attempt=1,
        max_attempts=3,
        retry_after_ms=Millis(60_000),
        reason=Reason(code="PodsNotReady", message="0/1 pods ready after 300 s"),
    )
    request = RequeueRequest(request_id=RequestId(f"rq-{name}"), zone=ZONE, requeues=[item])
    raw = await service.nc.request(service.subjects.ledger_requeue, encode(request), timeout=5)
    assert [r.granted for r in decode(raw.data, ReserveReply).results] == [True]


async def test_ledger_intervals_and_log_fold_agree(running: Ledger, tmp_path: Path) -> None:
    reply = await running.reserve(res("a", "A", 50), res("v", "A", 40), res("b", "B", 10))
    assert all(r.granted for r in reply.results)
    await preempt(running, "v", "p", 30)
    await running.publish(running.subjects.job(ZONE, "ns", "v"), stopped("v", 40))
    await running.publish(
        running.subjects.job(ZONE, "ns", "a"), WorkloadFinished(workload=WorkloadKey("ns/a"))
    )
    await requeue(running, "b", 10)
    await running.publish(running.subjects.job(ZONE, "ns", "b"), stopped("b", 10))
    found = await wait_decisions(running, 9)
    assert sorted(summary(found)) == sorted(
        [
            ("Admitted", "ns/a"),
            ("Admitted", "ns/v"),
            ("Admitted", "ns/b"),
            ("Preempted", "ns/v"),
            ("Released", "ns/v"),
            ("Admitted", "ns/p"),
            ("Released", "ns/a"),
            ("Requeued", "ns/b"),
            ("Released", "ns/b"),
        ]
    )

    _, entries = await fetch_log(running.ctx.settings.nats_url, running.subjects)
    history = decode_history(entries)
    snapshot = await read_ledger(running.database_url)
    assert snapshot.intervals is not None
    from_log = intervals_of(history.items)
    until = audit.usage_until(history)

    # The same intervals, to the millisecond: the victim's ends at its preemption, the
    # requeued one's at its requeue, the finished one's at its release; p still runs.
    def spans(intervals: list[Interval]) -> list[tuple[str, int, int | None]]:
        return sorted((i.workload, i.start_ms, i.end_ms) for i in intervals)

    assert spans(from_log) == spans(snapshot.intervals)
    ends = {i.workload: i.end_ms for i in from_log}
    preempted_at = next(e.envelope for e in found if type(e.envelope.event) is Preempted)
    assert ends[WorkloadKey("ns/v")] == int(preempted_at.time.timestamp() * 1000)
    assert ends[WorkloadKey("ns/p")] is None and ends[WorkloadKey("ns/a")] is not None

    # usher audit's comparison finds nothing, and neither does its ledger part.
    assert audit.check_usage(history, snapshot.intervals) == []
    assert audit.check_ledger(history, snapshot) == []

    # Summed by node: the root is A + B, and the window's query returns what overlaps it.
    totals = usage_totals(snapshot.intervals, since_ms=None, until_ms=until, now_ms=until)
    assert totals[("root", "cpu")] == totals[("root/A", "cpu")] + totals[("root/B", "cpu")] > 0
    by_ns = usage_totals(
        from_log, since_ms=None, until_ms=until, now_ms=until, by=UsageBy.NAMESPACE
    )
    assert by_ns == {("ns", "cpu"): totals[("root", "cpu")]}
    # usher usage says the same from the log as from the ledger (--ledger), in every grouping.
    exported = tmp_path / "log.jsonl"
    header = ExportHeader(
        prefix=running.subjects.prefix,
        stream=running.subjects.stream_name,
        entries=len(entries),
        first_seq=entries[0].seq,
        last_seq=entries[-1].seq,
    )
    exported.write_bytes(encode_export(header, entries))
    window = ["--file", str(exported), "--until", format_time(until), "-o", "json"]
    for by in ("node", "queue", "namespace"):
        said = usher("usage", *window, "--by", by)
        held = usher("usage", *window, "--by", by, "--ledger", "--database", running.database_url)
        assert said.returncode == held.returncode == 0, said.stderr + held.stderr
        assert json.loads(said.stdout)["rows"] == json.loads(held.stdout)["rows"] != []

    start_of_p = next(i.start_ms for i in from_log if i.workload == "ns/p")
    later = await read_usage_intervals(running.database_url, Millis(start_of_p), None)
    assert WorkloadKey("ns/p") in {i.workload for i in later}
    assert WorkloadKey("ns/v") not in {i.workload for i in later}
