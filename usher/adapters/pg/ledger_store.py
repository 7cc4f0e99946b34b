"""The ledger's PostgreSQL store: the one place where quota is arbitrated (DESIGN principle 4).

What it does: applies quota trees to ``quota_nodes``/``quota_usage``; grants or refuses batches
of reservations inside one transaction that locks every ``quota_usage`` row on each path
root..leaf and checks ``used + requested <= floor(max x oversellRate)`` (SEMANTICS section 3);
releases allocations; writes the transactional outbox and the consumer offset in the same
transaction as the rows they describe, so redelivered input changes nothing (principles 2-3).
What it must never do: decide outside a transaction holding the path's row locks, commit
row by row, grant a workload twice, evict anything because a tree changed, publish to NATS
(the outbox relay does), or tell errors apart by parsing messages (classes and SQLSTATEs only).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Final, TypeVar

import msgspec
from sqlalchemy import Table, bindparam, func, select, text, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from schemas import QuotaNode, QuotaPath, Reason, Reservation, ReservationResult, Resources
from schemas.decisions import ReleaseCause
from schemas.ids import QueueName, WorkloadKey, Zone
from usher.adapters.pg.models import Base
from usher.core.reasons import quota_exceeded
from usher.core.tree import iter_nodes

T = TypeVar("T")

NODES: Final[Table] = Base.metadata.tables["quota_nodes"]
USAGE: Final[Table] = Base.metadata.tables["quota_usage"]
ALLOCATIONS: Final[Table] = Base.metadata.tables["allocations"]
OFFSETS: Final[Table] = Base.metadata.tables["consumer_offsets"]
OUTBOX: Final[Table] = Base.metadata.tables["outbox"]

DEFAULT_STREAM: Final = "usher"
"""Stream name written to ``consumer_offsets.stream`` when the caller names none."""

# SQLSTATEs after which replaying the whole transaction may succeed.
_TRANSIENT_SQLSTATES: Final = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
        "57P01",  # admin_shutdown (server restarting)
        "08000",  # connection_exception
        "08003",  # connection_does_not_exist
        "08006",  # connection_failure
    }
)

# Same text as the partial unique index ``uq_allocations_live_workload``: ON CONFLICT can only
# infer a partial index from a literal predicate, not from a bound parameter.
_LIVE_PREDICATE: Final = text("state <> 'released'")

_Key = tuple[str, str]
"""(path, resource) of a ``quota_usage`` row."""


class LedgerError(Exception):
    """Base of the store's typed errors; ``operation`` names the call that failed."""

    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(f"{operation}: {detail}")
        self.operation = operation


class LedgerTransientError(LedgerError):
    """Retries were exhausted on conflicts (serialization, deadlock, lost connection)."""

    def __init__(self, operation: str, attempts: int, sqlstate: str | None) -> None:
        super().__init__(operation, f"gave up after {attempts} attempts (sqlstate {sqlstate})")
        self.attempts = attempts
        self.sqlstate = sqlstate


class LedgerPermanentError(LedgerError):
    """A failure a retry cannot fix (constraint violation, bad input, schema mismatch)."""

    def __init__(self, operation: str, detail: str, sqlstate: str | None = None) -> None:
        super().__init__(operation, detail)
        self.sqlstate = sqlstate


class _RaceLost(Exception):
    """A concurrent transaction inserted a live allocation we decided on; replay the batch."""


class OutboxMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message to publish once the transaction that wrote it has committed."""

    event_id: str
    subject: str
    payload: bytes
    id: int | None = None
    """Row id when read back from the outbox; ``None`` for messages to write."""


@dataclass(frozen=True, slots=True)
class LiveAllocation:
    """A workload's quota hold that has not been released."""

    id: int
    workload: WorkloadKey
    zone: Zone
    quota: QuotaPath
    queue: QueueName
    requests: Resources
    priority: int
    state: str
    admitted_at: datetime | None


def path_of(leaf: QuotaPath) -> list[QuotaPath]:
    """Every node path root..leaf of a ``/``-joined path (names never contain ``/``)."""
    parts = leaf.split("/")
    return [QuotaPath("/".join(parts[: i + 1])) for i in range(len(parts))]


class LedgerStore:
    """Quota tree, usage and allocations in PostgreSQL, arbitrated under row locks."""

    def __init__(
        self,
        engine: AsyncEngine,
        oversell_rate: Fraction = Fraction(1),
        *,
        max_attempts: int = 6,
        backoff_seconds: float = 0.005,
    ) -> None:
        if oversell_rate <= 0:
            raise ValueError(f"oversell_rate must be positive, got {oversell_rate}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self._engine = engine
        self._rate = oversell_rate
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds

    # ------------------------------------------------------------------ transactions

    async def run(self, operation: str, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``work`` in one transaction, replaying it whole on transient conflicts.

        Replaying the whole transaction (not a statement) is the only correct retry: the
        decisions made in it depended on rows read under locks that were rolled back.
        """
        last_state: str | None = None
        for attempt in range(1, self._max_attempts + 1):
            try:
                async with self._engine.begin() as conn:
                    return await work(conn)
            except _RaceLost:
                last_state = None
            except DBAPIError as exc:
                state = _sqlstate(exc)
                if not (exc.connection_invalidated or state in _TRANSIENT_SQLSTATES):
                    raise LedgerPermanentError(operation, type(exc.orig).__name__, state) from exc
                last_state = state
            except (OSError, TimeoutError) as exc:
                # The server went away before or while connecting; a new connection may work.
                last_state = type(exc).__name__
            if attempt < self._max_attempts:
                # Exponential backoff with jitter so racing callers do not collide again in step.
                delay = self._backoff * (2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random()))
        raise LedgerTransientError(operation, self._max_attempts, last_state)

    # ------------------------------------------------------------------ tree

    async def apply_tree(self, root: QuotaNode, version: int) -> None:
        """Make ``root`` the tree in force; dropped nodes stay (present=false) with their usage.

        Idempotent. A tree older than the one in force (lower ``version``) is ignored, so a
        redelivered old ``QuotaTreeApplied`` never rolls limits back.
        """
        nodes = list(iter_nodes(root))

        async def work(conn: AsyncConnection) -> None:
            # One tree writer at a time; reservations are serialised by the usage row locks.
            await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('usher.quota_tree'))"))
            newest = await conn.scalar(select(func.max(NODES.c.tree_version)))
            if newest is not None and newest > version:
                return
            paths = [str(path) for path, _, _ in nodes]
            node_insert = pg_insert(NODES)
            await conn.execute(
                node_insert.on_conflict_do_update(
                    index_elements=[NODES.c.path],
                    set_={
                        "parent_path": node_insert.excluded.parent_path,
                        "name": node_insert.excluded.name,
                        "attributes": node_insert.excluded.attributes,
                        "tree_version": node_insert.excluded.tree_version,
                        "present": True,
                    },
                ),
                [
                    {
                        "path": path,
                        "parent_path": parent,
                        "name": node.name,
                        "attributes": dict(node.attributes),
                        "tree_version": version,
                        "present": True,
                    }
                    for path, node, parent in nodes
                ],
            )
            await conn.execute(
                update(NODES)
                .where(NODES.c.path.not_in(paths), NODES.c.present)
                .values(present=False, tree_version=version)
            )
            limits: dict[_Key, tuple[int, int | None]] = {}
            for path, node, _ in nodes:
                for resource in sorted(set(node.max) | set(node.min)):
                    limits[(path, resource)] = (node.min.get(resource, 0), node.max.get(resource))
            existing = await conn.execute(
                select(USAGE.c.path, USAGE.c.resource).where(USAGE.c.path.in_(paths))
            )
            # A resource the node no longer names is no longer limited there (usage kept).
            for path, resource in existing:
                limits.setdefault((path, resource), (0, None))
            if not limits:
                return
            usage_insert = pg_insert(USAGE)
            # Sorted like the reservation locks, so a tree change cannot deadlock with them.
            await conn.execute(
                usage_insert.on_conflict_do_update(
                    index_elements=[USAGE.c.path, USAGE.c.resource],
                    set_={"min": usage_insert.excluded.min, "max": usage_insert.excluded.max},
                ),
                [
                    {"path": path, "resource": resource, "min": low, "max": high, "used": 0}
                    for (path, resource), (low, high) in sorted(limits.items())
                ],
            )

        await self.run("apply_tree", work)

    # ------------------------------------------------------------------ reserve

    async def reserve(
        self,
        reservations: Sequence[Reservation],
        *,
        consumer: str | None = None,
        stream_seq: int | None = None,
        stream: str = DEFAULT_STREAM,
        outbox: Sequence[OutboxMessage] = (),
    ) -> list[ReservationResult]:
        """Grant or refuse each reservation, in order, in one transaction.

        With ``consumer``, a batch whose ``stream_seq`` was already applied changes nothing and
        reports ``granted`` iff the workload holds a live allocation now.
        """
        _check_offset("reserve", consumer, stream_seq)
        for item in reservations:
            for resource, amount in item.requests.items():
                if amount < 0:
                    raise LedgerPermanentError(
                        "reserve", f"{item.workload} requests {amount} {resource}"
                    )

        async def work(conn: AsyncConnection) -> list[ReservationResult]:
            if (
                consumer is not None
                and stream_seq is not None
                and not await _advance_offset(conn, consumer, stream, stream_seq)
            ):
                live = await _live_paths(conn, [r.workload for r in reservations])
                return [
                    ReservationResult(workload=r.workload, granted=r.workload in live)
                    for r in reservations
                ]
            results = await self._reserve_in(conn, reservations)
            await _write_outbox(conn, outbox)
            return results

        return await self.run("reserve", work)

    async def _reserve_in(
        self, conn: AsyncConnection, reservations: Sequence[Reservation]
    ) -> list[ReservationResult]:
        live = await _live_paths(conn, [r.workload for r in reservations])
        known = await _leaves(conn, {r.quota for r in reservations})
        keys: set[_Key] = set()
        for item in reservations:
            if item.quota in known:
                keys.update(_keys(item.quota, item.requests))
        usage = await _lock_usage(conn, keys)

        results: list[ReservationResult] = []
        granted: list[Reservation] = []
        touched: set[_Key] = set()
        for item in reservations:
            held = live.get(item.workload)
            if held is not None:
                results.append(_already_held(item, held))
                continue
            if item.quota not in known:
                results.append(_unknown(item))
                continue
            refusal = self._refusal(item, usage)
            if refusal is not None:
                results.append(
                    ReservationResult(workload=item.workload, granted=False, reason=refusal)
                )
                continue
            for key in _keys(item.quota, item.requests):
                used, high = usage[key]
                usage[key] = (used + item.requests[key[1]], high)
                touched.add(key)
            live[item.workload] = item.quota
            granted.append(item)
            results.append(ReservationResult(workload=item.workload, granted=True))

        if granted:
            now = func.now()
            inserted = await conn.execute(
                pg_insert(ALLOCATIONS)
                .values(
                    [
                        {
                            "workload": item.workload,
                            "zone": item.zone,
                            "quota_path": item.quota,
                            "queue": item.queue,
                            "requests": dict(item.requests),
                            "priority": item.priority,
                            "state": "admitted",
                            "admitted_at": now,
                        }
                        for item in granted
                    ]
                )
                .on_conflict_do_nothing(index_elements=["workload"], index_where=_LIVE_PREDICATE)
                .returning(ALLOCATIONS.c.workload)
            )
            if len(inserted.all()) != len(granted):
                # Another transaction committed a live allocation for one of these workloads
                # (on another path) after we read; our decisions counted on its absence.
                raise _RaceLost
            await conn.execute(
                update(USAGE)
                .where(USAGE.c.path == bindparam("k_path"), USAGE.c.resource == bindparam("k_res"))
                .values(used=bindparam("k_used")),
                [
                    {"k_path": path, "k_res": resource, "k_used": usage[(path, resource)][0]}
                    for path, resource in sorted(touched)
                ],
            )
        return results

    def _refusal(
        self, item: Reservation, usage: dict[_Key, tuple[int, int | None]]
    ) -> Reason | None:
        # Root first, then down the path: the reason names the most general node that is full.
        for node in path_of(item.quota):
            for resource in sorted(item.requests):
                requested = item.requests[resource]
                if requested == 0:
                    continue
                used, high = usage[(node, resource)]
                if high is None:
                    continue
                cap = high * self._rate.numerator // self._rate.denominator
                if used + requested > cap:
                    return quota_exceeded(node, resource, used, requested, high, cap, self._rate)
        return None

    # ------------------------------------------------------------------ release

    async def release(
        self,
        workload: WorkloadKey,
        cause: ReleaseCause,
        *,
        consumer: str | None = None,
        stream_seq: int | None = None,
        stream: str = DEFAULT_STREAM,
        outbox: Sequence[OutboxMessage] = (),
    ) -> Resources | None:
        """Free what ``workload`` holds; ``None`` when nothing is live (or already applied).

        The outbox rows are written only when something was released.
        """
        _check_offset("release", consumer, stream_seq)

        async def work(conn: AsyncConnection) -> Resources | None:
            if (
                consumer is not None
                and stream_seq is not None
                and not await _advance_offset(conn, consumer, stream, stream_seq)
            ):
                return None
            # Lock the allocation first: a concurrent release of the same workload waits here
            # and then finds it released, so usage is decremented once.
            row = (
                await conn.execute(
                    select(ALLOCATIONS.c.id, ALLOCATIONS.c.quota_path, ALLOCATIONS.c.requests)
                    .where(ALLOCATIONS.c.workload == workload, _LIVE_PREDICATE)
                    .with_for_update()
                )
            ).first()
            if row is None:
                return None
            requests: Resources = {str(k): int(v) for k, v in row.requests.items()}
            keys = _keys(QuotaPath(row.quota_path), requests)
            await _lock_usage(conn, keys)
            if keys:
                await conn.execute(
                    update(USAGE)
                    .where(
                        USAGE.c.path == bindparam("k_path"), USAGE.c.resource == bindparam("k_res")
                    )
                    .values(used=USAGE.c.used - bindparam("k_amount")),
                    [
                        {"k_path": path, "k_res": resource, "k_amount": requests[resource]}
                        for path, resource in sorted(keys)
                    ],
                )
            await conn.execute(
                update(ALLOCATIONS)
                .where(ALLOCATIONS.c.id == row.id)
                .values(state="released", released_at=func.now(), release_cause=cause)
            )
            await _write_outbox(conn, outbox)
            return requests

        return await self.run("release", work)

    # ------------------------------------------------------------------ reads

    async def usage(self) -> dict[QuotaPath, dict[str, int]]:
        """``used`` of every (node, resource) row, present or dropped nodes alike."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(USAGE.c.path, USAGE.c.resource, USAGE.c.used))
            out: dict[QuotaPath, dict[str, int]] = {}
            for path, resource, used in rows:
                out.setdefault(QuotaPath(path), {})[resource] = used
            return out

    async def live_allocations(self) -> list[LiveAllocation]:
        """Every allocation not released, oldest first."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(ALLOCATIONS).where(_LIVE_PREDICATE).order_by(ALLOCATIONS.c.id)
            )
            return [
                LiveAllocation(
                    id=row.id,
                    workload=WorkloadKey(row.workload),
                    zone=Zone(row.zone),
                    quota=QuotaPath(row.quota_path),
                    queue=QueueName(row.queue),
                    requests={str(k): int(v) for k, v in row.requests.items()},
                    priority=row.priority,
                    state=row.state,
                    admitted_at=row.admitted_at,
                )
                for row in rows
            ]

    async def pending_outbox(self, limit: int) -> list[OutboxMessage]:
        """Unpublished outbox rows in insertion order."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(OUTBOX.c.id, OUTBOX.c.event_id, OUTBOX.c.subject, OUTBOX.c.payload)
                .where(OUTBOX.c.published_at.is_(None))
                .order_by(OUTBOX.c.id)
                .limit(limit)
            )
            return [
                OutboxMessage(id=i, event_id=e, subject=s, payload=bytes(p)) for i, e, s, p in rows
            ]

    async def mark_published(self, ids: Iterable[int]) -> None:
        """Stamp outbox rows as published (idempotent)."""
        wanted = list(ids)
        if not wanted:
            return

        async def work(conn: AsyncConnection) -> None:
            await conn.execute(
                update(OUTBOX)
                .where(OUTBOX.c.id.in_(wanted), OUTBOX.c.published_at.is_(None))
                .values(published_at=func.now())
            )

        await self.run("mark_published", work)

    async def offset(self, consumer: str) -> int | None:
        """Last stream sequence ``consumer`` applied, or ``None``."""
        async with self._engine.connect() as conn:
            value = await conn.scalar(
                select(OFFSETS.c.last_seq).where(OFFSETS.c.consumer == consumer)
            )
            return None if value is None else int(value)


# ---------------------------------------------------------------------- helpers


def _sqlstate(exc: DBAPIError) -> str | None:
    for candidate in (exc.orig, getattr(exc.orig, "__cause__", None)):
        state = getattr(candidate, "sqlstate", None)
        if isinstance(state, str):
            return state
    return None


def _check_offset(operation: str, consumer: str | None, stream_seq: int | None) -> None:
    if (consumer is None) != (stream_seq is None):
        raise LedgerPermanentError(operation, "consumer and stream_seq go together")


def _keys(leaf: QuotaPath, requests: Resources) -> set[_Key]:
    return {(node, r) for node in path_of(leaf) for r, amount in requests.items() if amount}


async def _advance_offset(conn: AsyncConnection, consumer: str, stream: str, seq: int) -> bool:
    """Move the consumer's offset to ``seq``; False when it was already there or beyond.

    The upsert takes the offset row's lock first, so two deliveries of the same batch
    serialise here and the second sees the first's committed offset.
    """
    insert = pg_insert(OFFSETS).values(consumer=consumer, stream=stream, last_seq=seq)
    stmt = insert.on_conflict_do_update(
        index_elements=[OFFSETS.c.consumer],
        set_={
            "last_seq": insert.excluded.last_seq,
            "stream": insert.excluded.stream,
            "updated_at": func.now(),
        },
        where=OFFSETS.c.last_seq < insert.excluded.last_seq,
    ).returning(OFFSETS.c.last_seq)
    return (await conn.execute(stmt)).first() is not None


async def _live_paths(
    conn: AsyncConnection, workloads: Sequence[WorkloadKey]
) -> dict[WorkloadKey, QuotaPath]:
    if not workloads:
        return {}
    rows = await conn.execute(
        select(ALLOCATIONS.c.workload, ALLOCATIONS.c.quota_path).where(
            ALLOCATIONS.c.workload.in_(set(workloads)), _LIVE_PREDICATE
        )
    )
    return {WorkloadKey(w): QuotaPath(p) for w, p in rows}


async def _leaves(conn: AsyncConnection, paths: set[QuotaPath]) -> set[QuotaPath]:
    """The paths among ``paths`` that are present leaves of the tree in force."""
    if not paths:
        return set()
    child = NODES.alias("child")
    has_child = (
        select(child.c.path).where(child.c.parent_path == NODES.c.path, child.c.present).exists()
    )
    rows = await conn.execute(
        select(NODES.c.path).where(NODES.c.path.in_(paths), NODES.c.present, ~has_child)
    )
    return {QuotaPath(p) for p in rows.scalars()}


async def _lock_usage(conn: AsyncConnection, keys: set[_Key]) -> dict[_Key, tuple[int, int | None]]:
    """Lock the usage rows of ``keys`` (creating missing ones) and return (used, max) of each.

    Every caller locks in the same global (path, resource) order, so two transactions that
    need overlapping rows queue behind each other instead of deadlocking.
    """
    if not keys:
        return {}
    ordered = sorted(keys)
    # Usage is tracked on every node of the path, even where the node sets no limit.
    await conn.execute(
        pg_insert(USAGE)
        .values([{"path": p, "resource": r, "min": 0, "max": None, "used": 0} for p, r in ordered])
        .on_conflict_do_nothing(index_elements=[USAGE.c.path, USAGE.c.resource])
    )
    # Under READ COMMITTED, FOR UPDATE returns the newest committed version of each row once
    # its lock is granted, so the (used, max) read here is what we decide on.
    rows = await conn.execute(
        select(USAGE.c.path, USAGE.c.resource, USAGE.c.used, USAGE.c.max)
        .where(tuple_(USAGE.c.path, USAGE.c.resource).in_(ordered))
        .order_by(USAGE.c.path, USAGE.c.resource)
        .with_for_update()
    )
    return {(p, r): (used, high) for p, r, used, high in rows}


async def _write_outbox(conn: AsyncConnection, outbox: Sequence[OutboxMessage]) -> None:
    if not outbox:
        return
    await conn.execute(
        pg_insert(OUTBOX)
        .values(
            [{"event_id": m.event_id, "subject": m.subject, "payload": m.payload} for m in outbox]
        )
        .on_conflict_do_nothing(index_elements=[OUTBOX.c.event_id])
    )


def _already_held(item: Reservation, held: QuotaPath) -> ReservationResult:
    if held == item.quota:
        # A redelivered request: the grant stands, nothing is counted twice.
        return ReservationResult(workload=item.workload, granted=True)
    # Schema gap: ReasonCode has no "AlreadyAdmitted"; QuotaExceeded with the workload as its
    # own blocker is the closest (it is pending until the other allocation is released).
    return ReservationResult(
        workload=item.workload,
        granted=False,
        reason=Reason(
            code="QuotaExceeded",
            message=f"{item.workload} already holds a live allocation on {held}, "
            f"not on {item.quota}",
            node=held,
            blocker=item.workload,
        ),
    )


def _unknown(item: Reservation) -> ReservationResult:
    return ReservationResult(
        workload=item.workload,
        granted=False,
        reason=Reason(
            code="UnknownQuota",
            message=f"{item.quota} is not a leaf of the quota tree in force",
            node=item.quota,
        ),
    )


__all__ = [
    "DEFAULT_STREAM",
    "LedgerError",
    "LedgerPermanentError",
    "LedgerStore",
    "LedgerTransientError",
    "LiveAllocation",
    "OutboxMessage",
    "path_of",
]
