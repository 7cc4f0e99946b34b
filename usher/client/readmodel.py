"""The people projection kept as a snapshot: what ``usher jobs``, ``queue(s)`` and ``explain``
read instead of folding the whole log every time.

What it does: ``encode``/``decode`` turn a ``PeopleProjection`` into bytes and back: its
engine as the core's snapshot (``usher.core.engine.snapshot``, msgpack) and everything it keeps
beside it (``PeopleRecord``: observations, rejections, outcomes, recent decisions, the tree,
allocation intervals...) as JSON, the encoding those values have on the log, so that a
restored projection answers byte for byte as the one that was saved. ``read_recent`` restores
the newest snapshot of the reader's engine configuration (object ``people-<digest>`` in the
installation's snapshot bucket) when ``usher.adapters.nats.snapshots.unusable`` finds nothing
against it, folds only the log's tail through ``PeopleProjection.apply`` (the one fold), and
saves a new snapshot when that tail was long (``SAVE_AFTER`` entries), so the next reader
folds little. Without a usable snapshot it folds the whole log, as before, and says so on
stderr when that log is long. The readers keep this read model themselves: the services'
engine snapshots hold neither what people are shown beside the engine (kinds, requests,
outcomes, decisions) nor a state that equals a replay at their sequence (a dequeuer's holds its
own decisions before the log does).
What it must never do: answer from a snapshot of another engine configuration, another log, or
one past the log's end; fold or decide anything itself; fail a command because a snapshot
cannot be read, decoded or saved (it folds the log instead, or goes on without saving).
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields

import msgspec
import nats.errors
from nats.js import JetStreamContext

from schemas import Millis, QuotaNode, Retried, WorkloadKey, WorkloadObserved, WorkloadRejected
from usher.adapters.nats.export import read_matching
from usher.adapters.nats.snapshots import SnapshotStore, labels, log_created, unusable
from usher.adapters.nats.subjects import Subjects
from usher.client.state import (
    MAX_DECISIONS,
    DecisionInfo,
    PeopleProjection,
    TreeDeletion,
    TreeRejection,
    _Skips,
    catch_up,
)
from usher.core.engine.snapshot import FORMAT as ENGINE_FORMAT
from usher.core.engine.snapshot import SnapshotError, fingerprint, restore, snapshot
from usher.core.history.explain import Explanation, believed_only, explain_about
from usher.core.history.replay import History, decode_history
from usher.core.history.usage import Interval
from usher.core.model.config import EngineConfig

FORMAT = 1
"""Of ``PeopleRecord`` and this file's layout; a snapshot of another one is not restored."""

SAVE_AFTER = 2_000
"""Entries folded past the snapshot after which a reader saves a new one (and before which a
missing snapshot is not worth a word on stderr)."""

LOOKUP_TIMEOUT_S = 1.0
"""How long the first look into the bucket may take. NATS does not answer a request its
permissions refuse (``deploy/``'s console identity may not read the services' snapshot
bucket), so without a bound every command would wait for the client's whole timeout; then
nothing is saved either."""
NOT_READ = "bucket not read"

ENCODED: frozenset[str] = frozenset(
    {
        "applied_seq",
        "observed",
        "rejected",
        "outcome",
        "preemptions",
        "decisions",
        "tree",
        "tree_rejected",
        "tree_rejection",
        "tree_deleted",
        "unreadable",
        "forged",
        "track_skips",
        "skips",
        "usage",
        "last_believed",
    }
)
"""``PeopleProjection`` fields a snapshot carries: all but ``config`` (the reader's, checked
by label) and ``engine`` (the core's snapshot); the tests check it."""


class PeopleRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a ``PeopleProjection`` keeps beside its engine, as JSON."""

    applied_seq: int
    observed: dict[WorkloadKey, WorkloadObserved]
    rejected: dict[WorkloadKey, WorkloadRejected]
    outcome: dict[WorkloadKey, bool]
    preemptions: dict[WorkloadKey, int]
    decisions: list[DecisionInfo]
    tree: QuotaNode | None
    tree_rejected: list[str]
    tree_rejection: TreeRejection | None
    tree_deleted: TreeDeletion | None
    unreadable: int
    forged: int
    track_skips: bool
    skips: dict[WorkloadKey, tuple[int, int]]
    """First time passed over (ms) and count, per head of a queue."""
    usage_open: dict[WorkloadKey, Interval]
    usage_closed: list[Interval]
    last_believed: tuple[int, int] | None


class ReadModelError(Exception):
    """Bytes that are no people snapshot of this format (the reader folds the log instead)."""


def object_name(config: EngineConfig) -> str:
    """``people-<digest>``: one read model per engine configuration, side by side."""
    digest = hashlib.sha256(fingerprint(config).encode()).hexdigest()[:16]
    return f"people-{digest}"


def encode(state: PeopleProjection) -> bytes:
    """``state`` as bytes (between two ``apply`` calls)."""
    record = PeopleRecord(
        applied_seq=state.applied_seq,
        observed=dict(state.observed),
        rejected=dict(state.rejected),
        outcome=dict(state.outcome),
        preemptions=dict(state.preemptions),
        decisions=list(state.decisions),
        tree=state.tree,
        tree_rejected=list(state.tree_rejected),
        tree_rejection=state.tree_rejection,
        tree_deleted=state.tree_deleted,
        unreadable=state.unreadable,
        forged=state.forged,
        track_skips=state.track_skips,
        skips={k: (v.first_ms, v.count) for k, v in state.skips.items()},
        usage_open=dict(state.usage.open),
        usage_closed=list(state.usage.closed),
        last_believed=state.last_believed,
    )
    return msgspec.msgpack.encode((FORMAT, snapshot(state.engine), msgspec.json.encode(record)))


def decode(data: bytes, config: EngineConfig) -> PeopleProjection:
    """The projection ``data`` was taken from, under ``config``; ``ReadModelError`` or the
    core's ``SnapshotError`` when it cannot be."""
    try:
        form, engine, extras = msgspec.msgpack.decode(data, type=tuple[int, bytes, bytes])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ReadModelError(f"not a people snapshot: {exc}") from exc
    if form != FORMAT:
        raise ReadModelError(f"format {form} (this version reads {FORMAT})")
    try:
        record = msgspec.json.decode(extras, type=PeopleRecord)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ReadModelError(f"unreadable people record: {exc}") from exc
    state = PeopleProjection(config, track_skips=record.track_skips)
    state.engine = restore(engine, config)
    state.applied_seq = record.applied_seq
    state.observed = dict(record.observed)
    state.rejected = dict(record.rejected)
    state.outcome = dict(record.outcome)
    state.preemptions = dict(record.preemptions)
    state.decisions = deque(record.decisions, maxlen=MAX_DECISIONS)
    state.tree = record.tree
    state.tree_rejected = list(record.tree_rejected)
    state.tree_rejection = record.tree_rejection
    state.tree_deleted = record.tree_deleted
    state.unreadable = record.unreadable
    state.forged = record.forged
    state.skips = {k: _Skips(first_ms=f, count=n) for k, (f, n) in record.skips.items()}
    state.usage.open = dict(record.usage_open)
    state.usage.closed = list(record.usage_closed)
    state.last_believed = record.last_believed
    return state


def projection_fields() -> frozenset[str]:
    """Every field of ``PeopleProjection`` but ``config`` and ``engine`` (for the tests)."""
    return frozenset(f.name for f in fields(PeopleProjection)) - {"config", "engine"}


@dataclass(frozen=True)
class Recent:
    """A projection at the log's end, and how it was had."""

    state: PeopleProjection
    restored_seq: int
    """The sequence the restored snapshot covered; 0 when the whole log was folded."""
    fetched: int
    """Log entries read from the stream to get there (the tail, or all of it)."""
    replayed_because: str
    """Why no snapshot was restored (empty when one was)."""
    saved: bool
    """Whether a new snapshot was saved afterwards."""


def _stderr(text: str) -> None:
    print(f"usher: {text}", file=sys.stderr)


async def read_recent(
    js: JetStreamContext,
    subjects: Subjects,
    config: EngineConfig,
    *,
    timeout_s: float = 30.0,
    save_after: int = SAVE_AFTER,
    say: Callable[[str], None] = _stderr,
) -> Recent:
    """The projection at the log's end: the newest usable snapshot plus the tail, else the
    whole log (said through ``say`` when it is at least ``save_after`` entries long); then a
    new snapshot when ``save_after`` entries or more were folded."""
    start = await _start(js, subjects, config, save_after, say)
    state, restored_seq, why = start.state, start.restored_seq, start.why
    follower = await catch_up(state, js, subjects, timeout_s=timeout_s)
    await follower.stop()
    saved = False
    if state.applied_seq - restored_seq >= save_after and not why.startswith(NOT_READ):
        saved = await _save(start.store, start.name, state, start.wanted)
    return Recent(
        state=state,
        restored_seq=restored_seq,
        fetched=follower.delivered,
        replayed_because=why,
        saved=saved,
    )


async def starting_point(
    js: JetStreamContext, subjects: Subjects, config: EngineConfig
) -> PeopleProjection:
    """Where a follower of the log starts (``usher wait``): the newest usable read model, or
    an empty projection; it folds from its ``applied_seq`` on (``catch_up``)."""
    return (await _start(js, subjects, config, SAVE_AFTER, _stderr)).state


@dataclass(frozen=True)
class _Start:
    state: PeopleProjection
    restored_seq: int
    why: str
    store: SnapshotStore
    name: str
    wanted: dict[str, str]


async def _start(
    js: JetStreamContext,
    subjects: Subjects,
    config: EngineConfig,
    save_after: int,
    say: Callable[[str], None],
) -> _Start:
    stream = await js.stream_info(subjects.stream_name)
    last_seq = int(stream.state.last_seq)
    wanted = labels(config, log_created(stream), form=f"{ENGINE_FORMAT}.{FORMAT}")
    store = SnapshotStore(js, subjects)
    name = object_name(config)
    restored, why = await _restored(store, name, config, wanted, last_seq)
    if restored is None and last_seq >= save_after:
        say(f"no usable read model ({why}): folding the whole log ({last_seq} entries)")
    state = restored if restored is not None else PeopleProjection(config)
    return _Start(
        state=state,
        restored_seq=state.applied_seq if restored is not None else 0,
        why=why,
        store=store,
        name=name,
        wanted=wanted,
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


async def _save(
    store: SnapshotStore, name: str, state: PeopleProjection, wanted: dict[str, str]
) -> bool:
    """Save ``state``; False when the store refuses (no permission, unreachable): the answer
    is right anyway, the next reader folds more."""
    try:
        await store.save(name, state.applied_seq, encode(state), wanted)
    except (nats.errors.Error, TimeoutError):
        return False
    return True


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
