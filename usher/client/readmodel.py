"""The people read model: what ``usher jobs``, ``queue(s)``, ``explain`` and ``wait`` start
from instead of folding the whole log every time.

What it does: ``read_recent`` restores the people projection the preemptor keeps (object
``people-<digest of the engine configuration>`` in the installation's views bucket
``<PREFIX>_VIEWS``, encoded by ``usher.core.history.people_snapshot``) when
``usher.adapters.nats.snapshots.unusable`` finds nothing against it (format, configuration,
log, end), and folds only the log's tail through ``PeopleProjection.apply`` (the one fold).
Without a usable read model (none saved yet, another configuration, a bucket this identity may
not read) it folds the whole log, as before, and says so on stderr when that log is long.
Only the preemptor, which follows the whole log anyway, writes the read model
(``services.common.views``): deploy's console identity may read the bucket and nothing more,
so no reader can make ``usher jobs`` lie to the others.
What it must never do: write the read model; answer from one of another engine configuration,
another log, or one past the log's end; fold or decide anything itself; fail a command because
a read model cannot be read or decoded (it folds the log instead).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass

import nats.errors
from nats.js import JetStreamContext

from schemas import Millis, Retried, WorkloadKey
from usher.adapters.nats.export import read_matching
from usher.adapters.nats.snapshots import (
    SnapshotStore,
    labels,
    log_created,
    unusable,
    views_bucket_name,
)
from usher.adapters.nats.subjects import Subjects
from usher.client.state import PeopleProjection, catch_up
from usher.core.engine.snapshot import SnapshotError
from usher.core.history.explain import Explanation, believed_only, explain_about
from usher.core.history.people_snapshot import FORM, ReadModelError, decode, object_name
from usher.core.history.replay import History, decode_history
from usher.core.model.config import EngineConfig

SAY_AFTER = 2_000
"""Entries of a log folded whole without a read model past which stderr says so."""

LOOKUP_TIMEOUT_S = 1.0
"""How long the first look into the bucket may take. NATS does not answer a request its
permissions refuse (an identity the views bucket is closed to), so without a bound every
command would wait for the client's whole timeout."""
NOT_READ = "bucket not read"


@dataclass(frozen=True)
class Recent:
    """A projection at the log's end, and how it was had."""

    state: PeopleProjection
    restored_seq: int
    """The sequence the restored snapshot covered; 0 when the whole log was folded."""
    fetched: int
    """Log entries read from the stream to get there (the tail, or all of it)."""
    replayed_because: str
    """Why no read model was restored (empty when one was)."""


def _stderr(text: str) -> None:
    print(f"usher: {text}", file=sys.stderr)


async def read_recent(
    js: JetStreamContext,
    subjects: Subjects,
    config: EngineConfig,
    *,
    timeout_s: float = 30.0,
    say_after: int = SAY_AFTER,
    say: Callable[[str], None] = _stderr,
) -> Recent:
    """The projection at the log's end: the newest usable read model plus the tail, else the
    whole log (said through ``say`` when it is at least ``say_after`` entries long)."""
    start = await _start(js, subjects, config, say_after, say)
    follower = await catch_up(start.state, js, subjects, timeout_s=timeout_s)
    await follower.stop()
    return Recent(
        state=start.state,
        restored_seq=start.restored_seq,
        fetched=follower.delivered,
        replayed_because=start.why,
    )


async def starting_point(
    js: JetStreamContext, subjects: Subjects, config: EngineConfig
) -> PeopleProjection:
    """Where a follower of the log starts (``usher wait``): the newest usable read model, or
    an empty projection; it folds from its ``applied_seq`` on (``catch_up``)."""
    return (await _start(js, subjects, config, SAY_AFTER, _stderr)).state


@dataclass(frozen=True)
class _Start:
    state: PeopleProjection
    restored_seq: int
    why: str


async def _start(
    js: JetStreamContext,
    subjects: Subjects,
    config: EngineConfig,
    say_after: int,
    say: Callable[[str], None],
) -> _Start:
    stream = await js.stream_info(subjects.stream_name)
    last_seq = int(stream.state.last_seq)
    wanted = labels(config, log_created(stream), form=FORM)
    store = SnapshotStore(js, subjects, bucket=views_bucket_name(subjects))
    restored, why = await _restored(store, object_name(config), config, wanted, last_seq)
    if restored is None and last_seq >= say_after:
        say(f"no usable read model ({why}): folding the whole log ({last_seq} entries)")
    state = restored if restored is not None else PeopleProjection(config)
    return _Start(
        state=state,
        restored_seq=state.applied_seq if restored is not None else 0,
        why=why,
    )


async def _restored(
    store: SnapshotStore,
    name: str,
    config: EngineConfig,
    wanted: dict[str, str],
    last_seq: int,
) -> tuple[PeopleProjection | None, str]:
    try:
        # A first look, bounded: an identity the bucket is closed to gets no answer at all.
        found = await asyncio.wait_for(store.info(name), LOOKUP_TIMEOUT_S)
        stored = await store.load(name) if found is not None else None
    except (nats.errors.Error, TimeoutError) as exc:
        return None, f"{NOT_READ}: {type(exc).__name__}"
    if stored is None:
        return None, "none saved yet"
    problem = unusable(stored.seq, stored.labels, wanted, last_seq)
    if problem:
        return None, problem
    try:
        state = decode(stored.data, config)
    except (ReadModelError, SnapshotError) as exc:
        return None, str(exc)
    if state.applied_seq != stored.seq:
        return None, f"covers {state.applied_seq}, labelled {stored.seq}"
    return state, ""


async def explain_recent(
    js: JetStreamContext,
    subjects: Subjects,
    config: EngineConfig,
    key: WorkloadKey,
    now_ms: Millis,
    *,
    timeout_s: float = 30.0,
) -> Explanation:
    """``usher explain`` without the whole log: the engine and allocation intervals of the
    read model (``read_recent``), the entries about ``key`` fetched by subject
    (``Subjects.about_workload``, then the cluster events of the attempts that followed it),
    all up to the read model's sequence; answered by ``explain_about``, as ``explain`` answers
    on the whole log. ``UnknownWorkload`` when the log never mentions ``key``."""
    state = (await read_recent(js, subjects, config, timeout_s=timeout_s)).state
    upto = state.applied_seq
    namespace, _, name = key.partition("/")
    found = await read_matching(
        js, subjects, subjects.about_workload(namespace, name), until_seq=upto
    )
    about = believed_only(decode_history(found))
    later = _later_attempts(about, key)
    if later:
        filters = [subjects.job_anywhere(*job.split("/", 1)) for job in later]
        more = await read_matching(js, subjects, filters, until_seq=upto)
        merged = {entry.seq: entry for entry in [*found, *more]}
        about = believed_only(decode_history(merged[seq] for seq in sorted(merged)))
    return explain_about(
        about,
        lambda: state.engine,
        state.usage.intervals,
        state.last_believed or (0, 0),
        key,
        now_ms,
    )


def _later_attempts(about: History, key: WorkloadKey) -> list[str]:
    """The jobs of the retry chain ``key`` is in (R12), besides ``key``: how its last attempt
    ended is on their own subjects."""
    chain = [item.event for item in about.items if isinstance(item.event, Retried)]
    first = next((r.first for r in chain if key in (r.job, r.workload)), None)
    jobs = {r.job for r in chain if r.first == first and r.job is not None}
    return sorted(str(job) for job in jobs - {key} if "/" in job)
