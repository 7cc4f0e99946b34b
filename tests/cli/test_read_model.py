"""The read model of ``usher jobs``/``queue``/``explain`` against a real NATS: restoring the
people snapshot the service saved (``services.common.views``, kept by the preemptor) and
folding the tail answers byte for byte as folding the whole log, whether the snapshot is
fresh, stale, missing, of another configuration or of another log, and it reads only the tail
(entries counted as the server delivers them); the CLI never saves one itself; ``usher
explain`` fetches only the entries about its workload.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from fractions import Fraction

import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import (
    FieldError,
    Millis,
    Preempted,
    QueueName,
    QuotaPath,
    Reason,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    WorkloadRejected,
    Zone,
)
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings
from services.common.snapshots import SnapshotPolicy
from services.common.views import PeopleViews
from services.preemptor.service import main as preemptor_main
from tests.builders.events import admitted, observed
from tests.builders.trees import two_leaf_tree
from tests.conftest import Infra
from tests.services.helpers import eventually, publish, running
from usher.adapters.logs import get_logger
from usher.adapters.nats.export import read_entries
from usher.adapters.nats.snapshots import LABEL_CONFIG, SnapshotStore, views_bucket_name
from usher.adapters.nats.subjects import Subjects
from usher.client import readmodel
from usher.client.state import PeopleProjection, catch_up, read_state
from usher.core.history import people_snapshot
from usher.core.history.explain import explain, render_explain_json
from usher.core.history.replay import decode_history
from usher.core.model.config import EngineConfig

CONFIG = EngineConfig()
NOW = Millis(1_900_000_000_000)
ZONE = Zone("default")


async def _jobs(js: JetStreamContext, subjects: Subjects, first: int, count: int) -> None:
    """``count`` jobs from number ``first``: observed on A and B; some admitted, finished,
    deleted, rejected; one preempted by a job of B (a decision filed under its victim)."""
    for n in range(first, first + count):
        ns = "a1" if n % 2 else "b1"
        job = observed(ns, f"j{n}", 10, created=n)
        await publish(js, subjects.job(ZONE, ns, job.name), job)
        leaf = "root/A" if ns == "a1" else "root/B"
        if n % 5 == 0:
            decision = admitted(str(job.workload), 10, quota=leaf, queue=f"q{ns}")
            await publish(js, subjects.decision_for(decision, ZONE), decision)
        if n % 10 == 0:
            done = WorkloadFinished(workload=job.workload, succeeded=n % 20 == 0)
            await publish(js, subjects.job(ZONE, ns, job.name), done)
        if n % 15 == 0:
            await publish(
                js, subjects.job(ZONE, ns, job.name), WorkloadDeleted(workload=job.workload)
            )
    bad = WorkloadRejected(
        workload=WorkloadKey(f"a1/bad{first}"),
        kind="batch/v1/Job",
        errors=[FieldError(path="spec", code="Invalid", message="no pods")],
    )
    await publish(js, subjects.job(ZONE, "a1", f"bad{first}"), bad)


async def _victim(js: JetStreamContext, subjects: Subjects) -> WorkloadKey:
    """a1/victim admitted, then preempted by b1/j2: the decision is on the victim's subject."""
    job = observed("a1", "victim", 10)
    await publish(js, subjects.job(ZONE, "a1", "victim"), job)
    decision = admitted("a1/victim", 10, quota="root/A", queue="qa1")
    await publish(js, subjects.decision_for(decision, ZONE), decision)
    preempted = Preempted(
        workload=WorkloadKey("a1/victim"),
        queue=QueueName("qa1"),
        quota=QuotaPath("root/A"),
        preemptor=WorkloadKey("b1/j2"),
        reason=Reason(code="Reclaim", message="b1/j2 reclaims its min"),
    )
    await publish(js, subjects.decision_for(preempted, ZONE), preempted)
    return job.workload


async def _log(js: JetStreamContext, subjects: Subjects) -> None:
    await publish(js, subjects.quota, _tree())
    await _jobs(js, subjects, 0, 30)


def _tree() -> object:
    from schemas import QuotaTreeApplied

    return QuotaTreeApplied(root=two_leaf_tree(total=1000, a_max=1000, b_max=1000))


def _view(state: object) -> bytes:
    return msgspec.json.encode(state.view(NOW))  # type: ignore[attr-defined]


async def _full(js: JetStreamContext, subjects: Subjects, config: EngineConfig) -> bytes:
    return _view(await read_state(js, subjects, config))


async def _recent(
    js: JetStreamContext, subjects: Subjects, config: EngineConfig = CONFIG, say_after: int = 10
) -> tuple[readmodel.Recent, list[str]]:
    said: list[str] = []
    recent = await readmodel.read_recent(js, subjects, config, say_after=say_after, say=said.append)
    return recent, said


def _views(subjects: Subjects, js: JetStreamContext) -> SnapshotStore:
    return SnapshotStore(js, subjects, bucket=views_bucket_name(subjects))


async def _service_saves(
    nc: Client, subjects: Subjects, config: EngineConfig = CONFIG
) -> PeopleProjection:
    """What the preemptor does with the people read model (``PeopleViews``): restore it, fold
    the log's tail into it, save it on a graceful stop. Returns what it saved."""
    settings = ServiceSettings(nats_url="", prefix=subjects.prefix, engine=config)
    log = get_logger(service="preemptor")
    ctx = ServiceContext("preemptor", settings, nc, nc.jetstream(), subjects, asyncio.Event(), log)
    views = PeopleViews(ctx, config, SnapshotPolicy())
    state = await views.open()
    follower = await catch_up(state, ctx.js, subjects)
    await follower.stop()
    await views.close(state)
    return state


async def test_snapshot_plus_tail_answers_as_the_whole_log(
    nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    await _log(js, subjects)
    first, said = await _recent(js, subjects)
    assert first.restored_seq == 0  # none yet: the whole log, said on stderr
    assert said and "none saved yet" in said[0]
    assert _view(first.state) == await _full(js, subjects, CONFIG)
    saved = await _service_saves(nc, subjects)
    end = saved.applied_seq
    assert end == first.state.applied_seq

    # Fresh: nothing to fold, nothing read from the log.
    again, said = await _recent(js, subjects)
    assert (again.restored_seq, again.fetched, said) == (end, 0, [])
    assert _view(again.state) == await _full(js, subjects, CONFIG)

    # Stale: the log grew; only the tail is read, and the answer is the whole log's.
    await _jobs(js, subjects, 30, 4)
    await _victim(js, subjects)
    tail, said = await _recent(js, subjects)
    grown = tail.state.applied_seq
    assert tail.restored_seq == end and tail.fetched == grown - end < end
    assert said == []
    assert _view(tail.state) == await _full(js, subjects, CONFIG)

    # The service restores its own read model and folds the tail on: the same state again.
    again_saved = await _service_saves(nc, subjects)
    assert again_saved.applied_seq == grown
    assert _view(again_saved) == _view(tail.state)


async def test_the_cli_never_saves_the_read_model(
    infra: Infra, js: JetStreamContext, subjects: Subjects
) -> None:
    """Only the service that owns it writes the read model: ``usher jobs`` on a log long
    enough that it used to save one folds it, says so, and leaves both buckets empty."""
    await publish(js, subjects.quota, _tree())
    for n in range(readmodel.SAY_AFTER):
        job = observed("a1", f"j{n}", 1, created=n)
        await publish(js, subjects.job(ZONE, "a1", job.name), job)
    done = _usher(infra, subjects, "jobs")
    assert done.returncode == 0, done.stderr
    assert "no usable read model (none saved yet): folding the whole log" in done.stderr
    name = people_snapshot.object_name(CONFIG)
    assert await _views(subjects, js).info(name) is None
    assert await SnapshotStore(js, subjects).info(name) is None


async def test_a_snapshot_of_another_configuration_or_log_is_not_restored(
    nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    await _log(js, subjects)
    await _service_saves(nc, subjects)  # saves one under CONFIG
    other = dataclasses.replace(CONFIG, oversell_rate=Fraction(3, 2))
    recent, said = await _recent(js, subjects, other, say_after=10_000)
    assert recent.restored_seq == 0 and said == []  # short log: folded without a word
    assert _view(recent.state) == await _full(js, subjects, other)

    # An object under this configuration's name that carries another's label: refused.
    store = _views(subjects, js)
    name = people_snapshot.object_name(CONFIG)
    stored = await store.load(name)
    assert stored is not None
    forged = {**stored.labels, LABEL_CONFIG: "policy=Block"}
    await store.save(name, stored.seq, stored.data, forged)
    refused, said = await _recent(js, subjects)
    assert refused.restored_seq == 0 and "another engine configuration" in said[0]
    assert _view(refused.state) == await _full(js, subjects, CONFIG)

    # Past the log's end (a log re-created under the same name): refused as well.
    await store.save(name, stored.seq + 10_000, stored.data, stored.labels)
    past, said = await _recent(js, subjects)
    assert past.restored_seq == 0 and "past the log's end" in said[0]

    # Undecodable bytes under good labels: folded from the start, never an error.
    await store.save(name, stored.seq, b"not a snapshot", stored.labels)
    broken, said = await _recent(js, subjects)
    assert broken.restored_seq == 0 and "not a people snapshot" in said[0]
    assert _view(broken.state) == await _full(js, subjects, CONFIG)
    await store.drop_bucket()


def test_a_snapshot_carries_every_field_of_the_projection() -> None:
    assert people_snapshot.projection_fields() == people_snapshot.ENCODED
    assert (
        set(people_snapshot.PeopleRecord.__struct_fields__) - {"usage_open", "usage_closed"}
        | {"usage"}
        == people_snapshot.ENCODED
    )


async def _explained(js: JetStreamContext, subjects: Subjects, key: str) -> tuple[bytes, bytes]:
    """explain from the read model and from the whole log, as JSON."""
    fast = await readmodel.explain_recent(js, subjects, CONFIG, WorkloadKey(key), NOW)
    history = decode_history(await read_entries(js, subjects))
    slow = explain(history, CONFIG, WorkloadKey(key), NOW)
    return render_explain_json(fast).encode(), render_explain_json(slow).encode()


@pytest.mark.parametrize(
    "key",
    ["a1/j5", "b1/j2", "a1/victim", "b1/j4", "a1/j15", "a1/bad30", "b1/j30", "a1/j33"],
)
async def test_explain_from_the_read_model_is_explain_on_the_whole_log(
    nc: Client, js: JetStreamContext, subjects: Subjects, key: str
) -> None:
    await _log(js, subjects)
    await _service_saves(nc, subjects)
    await _jobs(js, subjects, 30, 4)  # a tail after the snapshot
    await _victim(js, subjects)
    fast, slow = await _explained(js, subjects, key)
    assert fast == slow


async def test_explain_fetches_only_the_entries_about_its_workload(
    js: JetStreamContext, subjects: Subjects
) -> None:
    await _log(js, subjects)
    await _victim(js, subjects)
    filters = subjects.about_workload("b1", "j2")
    from usher.adapters.nats.export import read_matching

    about = await read_matching(js, subjects, filters)
    everything = await read_entries(js, subjects)
    # Its observation, and the preemption it caused (on its victim's subject).
    assert [e.subject for e in about] == [
        subjects.job(ZONE, "b1", "j2"),
        subjects.decision(ZONE, "preempted", "a1", "victim"),
    ]
    assert len(everything) > 10 * len(about)
    none = await read_matching(js, subjects, subjects.about_workload("b1", "nobody"))
    assert [e for e in none if "nobody" in e.subject] == []


def _usher(infra: Infra, subjects: Subjects, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("USHER_")}
    return subprocess.run(
        [sys.executable, "-m", "usher.cli", *args, "--nats", infra.nats_url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "USHER_PREFIX": subjects.prefix},
    )


def _unclocked(printed: str) -> str:
    """``printed`` without the one line that follows the clock: when an estimate was made
    (``made_ms`` in explain's JSON, E1), which differs between two runs of a command."""
    return "".join(line for line in printed.splitlines(True) if '"made_ms":' not in line)


async def test_the_cli_prints_the_same_from_the_preemptors_read_model_as_from_the_whole_log(
    infra: Infra, js: JetStreamContext, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The preemptor, running, keeps the read model (saved as soon as it is due: every entry
    here); the CLI then answers from it and prints what it printed from the whole log."""
    await _log(js, subjects)
    await _victim(js, subjects)
    # Tables: their estimates are relative to the clock (JSON's are absolute times), and
    # explain of a job that does not wait has no clock in it.
    commands = [["jobs"], ["queue", "root-a-a1"], ["explain", "a1/victim", "-o", "json"]]
    before = [_usher(infra, subjects, *argv) for argv in commands]
    assert all(done.returncode == 0 for done in before), [d.stderr for d in before]
    end = (await js.stream_info(subjects.stream_name)).state.last_seq
    store, name = _views(subjects, js), people_snapshot.object_name(CONFIG)
    monkeypatch.setenv("USHER_SNAPSHOT_EVERY_ENTRIES", "1")
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix, engine=CONFIG)
    async with running("preemptor", preemptor_main, settings, subjects):

        async def saved_to_the_end() -> bool:
            info = await store.info(name)
            return info is not None and info.seq == end

        assert await eventually(saved_to_the_end, timeout_s=30)
    after = [_usher(infra, subjects, *argv) for argv in commands]
    assert [_unclocked(d.stdout) for d in after] == [_unclocked(d.stdout) for d in before]
    assert [d.stderr for d in after] == ["", "", ""]
    recent, _ = await _recent(js, subjects)
    assert recent.restored_seq == end and recent.fetched == 0


async def test_a_preemptor_restored_from_its_snapshot_still_folds_a_missing_read_model(
    infra: Infra, js: JetStreamContext, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installation upgraded to a preemptor that keeps the read model has an engine
    snapshot and no read model: the preemptor follows the log from the older of the two, so
    the read model it saves covers the whole log and answers as a full replay."""
    await _log(js, subjects)
    end = (await js.stream_info(subjects.stream_name)).state.last_seq
    store, name = _views(subjects, js), people_snapshot.object_name(CONFIG)
    monkeypatch.setenv("USHER_SNAPSHOT_EVERY_ENTRIES", "1")
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix, engine=CONFIG)

    async def saved_to_the_end() -> bool:
        info = await store.info(name)
        return info is not None and info.seq == end

    async with running("preemptor", preemptor_main, settings, subjects):
        assert await eventually(saved_to_the_end, timeout_s=30)
    engine = await SnapshotStore(js, subjects).info("preemptor")
    assert engine is not None and engine.seq == end  # the engine's own snapshot, at the end
    assert await store.delete(name)
    async with running("preemptor", preemptor_main, settings, subjects):
        assert await eventually(saved_to_the_end, timeout_s=30)
    recent, _ = await _recent(js, subjects)
    assert recent.restored_seq == end and recent.fetched == 0
    assert _view(recent.state) == await _full(js, subjects, CONFIG)


async def test_wait_starts_from_the_read_model(
    infra: Infra, nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    """``usher wait`` follows the log from the read model's sequence, and sees the same job."""
    from usher.client import AsyncClient

    await _log(js, subjects)
    saved = await _service_saves(nc, subjects)
    start = await readmodel.starting_point(js, subjects, CONFIG)
    assert start.applied_seq == saved.applied_seq > 0
    full = await read_state(js, subjects, CONFIG)
    async with AsyncClient(nats_url=infra.nats_url, prefix=subjects.prefix) as client:
        finished = await client.wait("b1/j10")  # finished, failed: settled at once
    assert finished.state == "Finished" and finished.succeeded is False
    assert finished == full.job("b1/j10")
