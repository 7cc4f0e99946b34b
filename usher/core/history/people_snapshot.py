"""The people read model as bytes: a ``PeopleProjection`` saved by the preemptor and restored
by ``usher jobs``, ``queue(s)``, ``explain`` and ``wait``.

What it does: ``encode``/``decode`` turn a ``PeopleProjection`` into bytes and back: its
engine as the core's snapshot (``usher.core.engine.snapshot``, msgpack) and everything it keeps
beside it (``PeopleRecord``: observations, rejections, outcomes, recent decisions, the tree,
allocation intervals...) as JSON, the encoding those values have on the log, so that a
restored projection answers byte for byte as the one that was saved. ``object_name`` names one
read model per engine configuration (``people-<digest>``); ``FORM`` is the format label a
stored one is judged by (``usher.adapters.nats.snapshots.unusable``).
What it must never do: fold or decide anything, or decode bytes of another format into a
projection (``ReadModelError``, or the core's ``SnapshotError``).
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import fields

import msgspec

from schemas import Millis, QuotaNode, WorkloadKey, WorkloadObserved, WorkloadRejected
from usher.core.engine.snapshot import FORMAT as ENGINE_FORMAT
from usher.core.engine.snapshot import fingerprint, restore, snapshot
from usher.core.history.people import (
    MAX_DECISIONS,
    DecisionInfo,
    PeopleProjection,
    TreeDeletion,
    TreeRejection,
    _Skips,
)
from usher.core.history.usage import Interval
from usher.core.model.config import EngineConfig

FORMAT = 2
"""Of ``PeopleRecord`` and this file's layout; a snapshot of another one is not restored."""

FORM = f"{ENGINE_FORMAT}.{FORMAT}"
"""The format label a read model is stored with: the engine's snapshot format and this one."""

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
        "suspending",
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
    suspending: dict[WorkloadKey, tuple[int, int]]
    """Seq and time of the watcher's suspension, per job not observed yet (its feed line)."""
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
        suspending={k: (seq, int(at)) for k, (seq, at) in state.suspending.items()},
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
    state.suspending = {k: (seq, Millis(at)) for k, (seq, at) in record.suspending.items()}
    state.usage.open = dict(record.usage_open)
    state.usage.closed = list(record.usage_closed)
    state.last_believed = record.last_believed
    return state


def projection_fields() -> frozenset[str]:
    """Every field of ``PeopleProjection`` but ``config`` and ``engine`` (for the tests)."""
    return frozenset(f.name for f in fields(PeopleProjection)) - {"config", "engine"}
