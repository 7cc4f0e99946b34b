"""The ledger's PostgreSQL store: the one place where quota is arbitrated (DESIGN principle 4).

What it does: applies quota trees to ``quota_nodes``/``quota_usage``; grants or refuses batches
of reservations inside one transaction that locks every ``quota_usage`` row on each path
root..leaf and checks ``used + requested <= floor(max x oversellRate)`` (R2, R8), and each
node's cap in the reservation's zone (Z1, ``ledger_zones``) and the idle guarantees other nodes
keep (L1, L2, ``ledger_lending``);
carries out preemptions after re-checking the reclaim rules against its own rows (victims
admitted, past their minimum runtime, borrowing what the preemptor needs or of lower priority
in its leaf; the preemptor within its guarantee and fitting without them; the leaf's
preemption policy, P1-P3, by ``policy_refusal``) and holds the
preemptor's capacity in the same transaction; applies batches of cluster events (finish,
delete, observed suspension, tree) with the consumer offset; writes the transactional outbox
(built by the caller from what was decided) in the same transaction as the rows it describes,
so redelivered input changes nothing (principles 2-3), last and under ``_OUTBOX_LOCK``, so
that outbox ids follow commit order and one transaction's rows are consecutive.

Allocation life cycle (the states, their transitions and the release rules are the core's,
``usher/core/rules/arbitration.py``): ``admitted`` (counted) -> ``released``; a preemptor is
``held`` (not admitted) until its last victim is seen stopped, then ``admitted``; a victim goes
``admitted`` -> ``preempting`` (still running, still counted) -> ``released``. A preemption *group*
(a held preemptor and its preempting victims) counts ``max(victims, hold)`` on every (node,
resource) (docs/admission-rules.md R7), so nothing is over-committed while victims wind down. Every
state is written by ``_write_states`` alone (a reservation batch's new rows by ``_write_batch``,
in the statement that counts them and writes their outbox rows), which checks each move against
the core's transition table and writes it only from the state it was checked from
(``LedgerTransitionError`` names the workload, from and to). A batch of reservations costs three
statements whatever its size (``_LOCK_BATCH``, ``_READ_BATCH``, ``_WRITE_BATCH``), plus one read
of the zone book where a node caps a zone (Z1) and two of the lending book where one restricts
lending (L1, L2). The fit check (R2, nearest failing node named), the victim refusal (R5, R6:
``victim_refusal``) and every reason it answers with are the core's too: this store keeps the SQL
and maps its rows to the core's inputs. Every stamp is ``clock_timestamp()`` read once per
transaction *after* the usage locks, so the running intervals [admitted_at, released_at) of the
rows on one node follow the lock order and never add up above ``max x rate`` at any instant.

What it must never do: decide outside a transaction holding the path's row locks or on rows
read by a statement that began before those locks were granted, write an allocation's state
anywhere but ``_write_states`` and ``_write_batch``, word a reason itself, commit row by row,
grant a workload twice, evict anything because a tree changed, publish to NATS (the outbox relay
does), or tell errors apart by parsing messages (classes and SQLSTATEs only).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any, Final, Protocol, TypeVar

import msgspec
from sqlalchemy import DateTime, Table, bindparam, func, select, text, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from schemas import (
    Admitted,
    FieldError,
    Millis,
    NodeHeld,
    NodeResumed,
    Preempted,
    QuotaNode,
    QuotaPath,
    Reason,
    Released,
    Requeued,
    Reservation,
    ReservationResult,
    Resources,
)
from schemas.decisions import ReleaseCause
from schemas.ids import ClusterName, QueueName, WorkloadKey, Zone, cluster_of
from usher.adapters.pg.ledger_lending import LENDING_KEYS, LendingBook
from usher.adapters.pg.ledger_zones import ZoneBook, ZoneGuarantees
from usher.adapters.pg.models import Base
from usher.core.model import reasons
from usher.core.model.config import ReadinessPolicy, WithinQuota
from usher.core.rules.arbitration import (
    CLAIMING,
    COUNTED,
    AllocationState,
    Change,
    IllegalTransition,
    Load,
    advance,
    earlier_preemption_refusal,
    first_shortfall,
    group_usage,
    quota_exceeded,
    release_cause,
)
from usher.core.rules.holds import HoldOrder, branch_tree, carry_out
from usher.core.rules.lending import Lending, path_lending
from usher.core.rules.preemption_policy import (
    PreemptionPolicy,
    claim_without,
    lender_keeps_guarantee,
    path_preemption_policy,
    policy_refusal,
    preempts_in_leaf,
    takes_while_borrowing,
)
from usher.core.rules.readiness import readiness_policy, requeued_preemption_refusal
from usher.core.rules.reclaim import (
    NodePolicy,
    borrowed_resource,
    path_policy,
    victim_refusal,
    within_guarantee,
)
from usher.core.state.indexed import shape_of
from usher.core.tree.quota_tree import iter_nodes, path_nodes

T = TypeVar("T")

NODES: Final[Table] = Base.metadata.tables["quota_nodes"]
USAGE: Final[Table] = Base.metadata.tables["quota_usage"]
ALLOCATIONS: Final[Table] = Base.metadata.tables["allocations"]
OFFSETS: Final[Table] = Base.metadata.tables["consumer_offsets"]
OUTBOX: Final[Table] = Base.metadata.tables["outbox"]
ENDED: Final[Table] = Base.metadata.tables["ended_workloads"]

_ENDS_LOCK: Final = text("hashtext('usher.ended_workloads')")
"""Recording ends (exclusive) against reserving on a view (shared): a reservation that
checked no end yet commits before the end is recorded, so the end releases it (R8)."""

_OUTBOX_LOCK: Final = text("hashtext('usher.outbox')")
"""Writing outbox rows (exclusive, held until commit, taken after every row lock): one
transaction's rows take consecutive ids, and ids follow commit order. The relay publishes in
id order, and the log reads a reclaim's ``Preempted`` as one decision only while they are
consecutive; without it, two transactions that share no row lock (a preemption and a requeue,
or a victim released inside its group) drew ids between each other's, and a later commit could
take lower ids than an earlier one."""

DEFAULT_STREAM: Final = "usher"
"""Stream name written to ``consumer_offsets.stream`` when the caller names none."""

# SQLSTATEs after which replaying the whole transaction may succeed.
_TRANSIENT_SQLSTATES: Final = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
        "57P01",  # admin_shutdown (server restarting)
        "57P02",  # crash_shutdown (another backend crashed: the server restarts)
        "57P03",  # cannot_connect_now (starting up, e.g. crash recovery after a restart)
        "08000",  # connection_exception
        "08001",  # sqlclient_unable_to_establish_sqlconnection
        "08003",  # connection_does_not_exist
        "08004",  # sqlserver_rejected_establishment_of_sqlconnection
        "08006",  # connection_failure
    }
)

# Same text as the partial unique index ``uq_allocations_live_workload``: ON CONFLICT can only
# infer a partial index from a literal predicate, not from a bound parameter.
_LIVE_PREDICATE: Final = text("state <> 'released'")

# Inserts of many rows are one cached statement run as an executemany: SQLAlchemy sends them
# as multi-row INSERTs ("insertmanyvalues", up to 1,000 rows a statement, in parameter order).
# A statement built with .values([...]) was compiled anew for every batch size: 40% of the
# ledger's CPU under load.
_INSERT_USAGE: Final = pg_insert(USAGE).on_conflict_do_nothing(
    index_elements=[USAGE.c.path, USAGE.c.resource]
)
_INSERT_OUTBOX: Final = pg_insert(OUTBOX).on_conflict_do_nothing(index_elements=[OUTBOX.c.event_id])
_PENDING_OUTBOX: Final = text(
    """
    SELECT id, event_id, subject, payload FROM outbox
    WHERE published_at IS NULL AND id <> ALL(CAST(:published AS bigint[]))
    ORDER BY id LIMIT :limit
    """
)
"""The relay's next rows: unpublished, in id order, but for those just stamped (the statement
that stamps them reads the rows as they were before it)."""
_MARK_PUBLISHED: Final = text(
    f"""
    WITH stamped AS (
        UPDATE outbox SET published_at = now()
        WHERE id = ANY(CAST(:published AS bigint[])) AND published_at IS NULL
        RETURNING id
    )
    {_PENDING_OUTBOX.text}
    """
)
"""Stamp the relay's acknowledged rows and read its next ones, one statement."""
_INSERT_ALLOCATION: Final = (
    pg_insert(ALLOCATIONS)
    .on_conflict_do_nothing(index_elements=["workload"], index_where=_LIVE_PREDICATE)
    .returning(ALLOCATIONS.c.id, ALLOCATIONS.c.workload)
)

_ADMITTED: Final = AllocationState.ADMITTED
_HELD: Final = AllocationState.HELD
_PREEMPTING: Final = AllocationState.PREEMPTING
_RELEASED: Final = AllocationState.RELEASED
_REQUEUED: Final[ReleaseCause] = "Requeued"
"""The cause a requeue for readiness (R10) records when its stop begins, and its release says."""

LedgerDecision = Admitted | Preempted | Released | Requeued

_Key = tuple[str, str]
"""(path, resource) of a ``quota_usage`` row."""


class LedgerError(Exception):
    """Base of the store's typed errors; ``operation`` names the call that failed."""

    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(f"{operation}: {detail}")
        self.operation = operation
        self.detail = detail


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


class LedgerRequestError(LedgerPermanentError):
    """The caller's input is invalid (checked before any database work); ``workload`` is it."""

    def __init__(self, operation: str, detail: str, workload: WorkloadKey | None = None) -> None:
        super().__init__(operation, detail)
        self.workload = workload


class LedgerTransitionError(LedgerPermanentError):
    """An allocation state write the core's transition table refuses: ``workload``'s allocation
    from ``source`` (None: no row yet) to ``target``. A bug in the ledger, never bad input:
    nothing of the transaction is committed."""

    def __init__(
        self,
        workload: WorkloadKey,
        source: AllocationState | None,
        target: AllocationState,
        why: str,
    ) -> None:
        super().__init__(
            "allocation state", f"{workload}: {source or 'no row'} -> {target} refused: {why}"
        )
        self.workload = workload
        self.source = source
        self.target = target


class _RaceLost(Exception):
    """A concurrent transaction inserted a live allocation we decided on; replay the batch."""


class _Refused(Exception):
    """Roll the transaction back and report ``result`` (a refusal decided after writes)."""

    def __init__(self, result: ReservationResult) -> None:
        super().__init__(result.workload)
        self.result = result


class OutboxMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message to publish once the transaction that wrote it has committed."""

    event_id: str
    subject: str
    payload: bytes
    id: int | None = None
    """Row id when read back from the outbox; ``None`` for messages to write."""


class OutboxBuilder(Protocol):
    """Turns a decision taken in a transaction into the outbox row that announces it.

    Called inside the transaction with the decision, the zone of the allocation and the
    allocation's id (so the event id can be deterministic); called again if the transaction is
    replayed, so it must be pure apart from reading the clock. ``at`` is the transaction's
    stamp, the very instant written in the allocation's ``admitted_at``/``preempted_at``/
    ``released_at``: the envelope carries it, so that the log's decision times and the
    ledger's allocation intervals are the same numbers (usage accounting, U1). ``None``: the
    builder's own clock.
    """

    def __call__(
        self, decision: LedgerDecision, zone: Zone, allocation_id: int, at: datetime | None = None
    ) -> OutboxMessage: ...


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
    reserved_at: datetime | None = None
    preempted_at: datetime | None = None
    preemptor: WorkloadKey | None = None
    """On a ``preempting`` victim: the workload its quota went to."""


@dataclass(frozen=True, slots=True)
class Observation:
    """A cluster event about one workload, at stream sequence ``seq``."""

    seq: int
    workload: WorkloadKey
    change: Change


@dataclass(frozen=True, slots=True)
class TreeUpdate:
    """A ``QuotaTreeApplied`` at stream sequence ``seq`` (its version)."""

    seq: int
    root: QuotaNode


@dataclass(frozen=True, slots=True)
class ClusterGone:
    """A ``ClusterLost`` at stream sequence ``seq`` (M1): every live allocation of a workload
    of ``cluster`` is observed deleted, in the batch's transaction."""

    seq: int
    cluster: ClusterName


LogChange = Observation | TreeUpdate | ClusterGone


@dataclass(frozen=True, slots=True)
class LogOutcome:
    """What ``apply_log`` did; ``applied`` is false when the whole batch was already applied."""

    applied: bool
    last_seq: int
    released: list[Released] = field(default_factory=list)
    admitted: list[Admitted] = field(default_factory=list)
    outbox_rows: int = 0


@dataclass(slots=True)
class _Alloc:
    """A live allocation row as read under lock; ``state`` is updated as the batch proceeds."""

    id: int
    workload: WorkloadKey
    zone: Zone
    quota: QuotaPath
    queue: QueueName
    requests: Resources
    priority: int
    state: AllocationState
    preemptor: WorkloadKey | None
    preempted_seq: int | None = None
    """Last log sequence that existed when this victim was preempted."""
    admitted_at: datetime | None = None
    requeued: bool = False
    """Stopping for its own requeue for readiness (R10): released with cause ``Requeued``."""


@dataclass(slots=True)
class _Group:
    """A held preemptor (if still held) and its victims still ``preempting``."""

    hold: _Alloc | None
    victims: dict[WorkloadKey, _Alloc] = field(default_factory=dict)

    def counted(self) -> dict[_Key, int]:
        """What the group counts on each (node, resource): ``max(victims, hold)`` (R7)."""
        held = self.hold if self.hold is not None and self.hold.state in COUNTED else None
        running = [v for v in self.victims.values() if v.state == _PREEMPTING]
        return _group_usage(held, running)


@dataclass(slots=True)
class _ObservePlan:
    """Row changes decided for a batch of observations, written at the end in few statements."""

    moves: list[_Move] = field(default_factory=list)
    decrements: dict[_Key, int] = field(default_factory=dict)
    decisions: list[tuple[LedgerDecision, Zone, int]] = field(default_factory=list)


def path_of(leaf: QuotaPath) -> list[QuotaPath]:
    """Every node path root..leaf of a ``/``-joined path (names never contain ``/``)."""
    parts = leaf.split("/")
    return [QuotaPath("/".join(parts[: i + 1])) for i in range(len(parts))]


def check_reservations(operation: str, reservations: Iterable[Reservation]) -> None:
    """Raise ``LedgerRequestError`` for input no transaction should see (negative amounts)."""
    for item in reservations:
        for resource, amount in item.requests.items():
            if amount < 0:
                raise LedgerRequestError(
                    operation, f"{item.workload} requests {amount} {resource}", item.workload
                )


class LedgerStore:
    """Quota tree, usage and allocations in PostgreSQL, arbitrated under row locks."""

    def __init__(
        self,
        engine: AsyncEngine,
        oversell_rate: Fraction = Fraction(1),
        *,
        within_quota: WithinQuota = "Never",
        min_runtime_ms: int = 0,
        max_attempts: int = 6,
        backoff_seconds: float = 0.005,
    ) -> None:
        if oversell_rate <= 0:
            raise ValueError(f"oversell_rate must be positive, got {oversell_rate}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self._engine = engine
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        """The same pool, for work of one statement (the relay's reads and stamps)."""
        self._rate = oversell_rate
        self._default_policy: NodePolicy = (within_quota, min_runtime_ms)
        """The deployment's within-quota mode and min runtime, for nodes that set none."""
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds

    # ------------------------------------------------------------------ transactions

    async def run(
        self,
        operation: str,
        work: Callable[[AsyncConnection], Awaitable[T]],
        *,
        autocommit: bool = False,
    ) -> T:
        """Run ``work`` in one transaction, replaying it whole on transient conflicts.

        Replaying the whole transaction (not a statement) is the only correct retry: the
        decisions made in it depended on rows read under locks that were rolled back.
        ``autocommit``: ``work`` is one statement, its own transaction (no BEGIN, no COMMIT:
        two round trips fewer).
        """
        last_state: str | None = None
        engine = self._autocommit if autocommit else self._engine
        for attempt in range(1, self._max_attempts + 1):
            try:
                async with engine.begin() as conn:
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

        async def work(conn: AsyncConnection) -> None:
            await _apply_tree_in(conn, root, version)

        await self.run("apply_tree", work)

    # ------------------------------------------------------------------ reserve

    async def reserve(
        self,
        reservations: Sequence[Reservation],
        *,
        outbox: OutboxBuilder | None = None,
        consumer: str | None = None,
        stream_seq: int | None = None,
        stream: str = DEFAULT_STREAM,
        request_ids: Sequence[str] | None = None,
        views: Sequence[int | None] | None = None,
    ) -> list[ReservationResult]:
        """Grant or refuse each reservation, in order, in one transaction.

        ``views`` (one per reservation): the last log sequence its proposer had applied. A
        workload the ledger saw finish or be deleted after that is refused (``StaleView``): a
        grant for it would never be released (R8).

        ``request_ids`` (one per reservation) make a repeated request idempotent even after
        the grant was released: a reservation whose workload already got an allocation under
        the same request id is reported granted again and changes nothing. (A dequeuer that
        timed out while the ledger died after committing repeats its request; by then the job
        may have run and finished, and must not be admitted a second time.)

        ``outbox`` is called for each *new* grant (an ``Admitted`` decision and its allocation
        id); a retried grant (same workload, same leaf) is reported granted with no new row.
        With ``consumer``, a batch whose ``stream_seq`` was already applied changes nothing and
        reports ``granted`` iff the workload holds a live admitted or held allocation now.
        """
        _check_offset("reserve", consumer, stream_seq)
        check_reservations("reserve", reservations)

        async def work(conn: AsyncConnection) -> list[ReservationResult]:
            if (
                consumer is not None
                and stream_seq is not None
                and not await _advance_offset(conn, consumer, stream, stream_seq)
            ):
                live = await _live(conn, [r.workload for r in reservations])
                return [
                    ReservationResult(
                        workload=r.workload,
                        granted=r.workload in live and live[r.workload].state in COUNTED,
                    )
                    for r in reservations
                ]
            return await self._reserve_in(conn, reservations, outbox, request_ids, views)

        if request_ids is not None and len(request_ids) != len(reservations):
            raise LedgerPermanentError("reserve", "one request id per reservation")
        if views is not None and len(views) != len(reservations):
            raise LedgerPermanentError("reserve", "one view per reservation")
        return await self.run("reserve", work)

    async def _reserve_in(
        self,
        conn: AsyncConnection,
        reservations: Sequence[Reservation],
        outbox: OutboxBuilder | None,
        request_ids: Sequence[str] | None = None,
        views: Sequence[int | None] | None = None,
    ) -> list[ReservationResult]:
        """Three statements, whatever the batch's size: lock, read, write (see ``_LOCK_BATCH``);
        a zone cap (Z1) or a lending restriction (L1, L2) on the tree adds the reads of its book."""
        ends = views is not None and any(v is not None for v in views)
        locked = await _lock_batch(conn, reservations, ends)
        read = await _read_batch(conn, reservations, locked, request_ids, ends)
        if read.leaves - locked:
            raise _RaceLost  # a leaf appeared after the lock: its rows are not locked, replay
        known = read.leaves & locked
        live, usage, ended, answered = read.live, read.usage, read.ended, read.answered
        # Read after the locks: the allocations below a capping node cannot change now (Z1).
        zones = await ZoneBook.of_nodes(conn, read.nodes, {r.quota for r in reservations} & known)
        lending = await LendingBook.load(  # L1, L2
            conn, _asked(reservations), self._rate, restricted=read.restricted
        )

        results: list[ReservationResult] = []
        granted: list[Reservation] = []
        touched: set[_Key] = set()
        granted_ids: dict[WorkloadKey, str] = {}
        for index, item in enumerate(reservations):
            current = live.get(item.workload)
            if item.workload in answered.get(_request_at(request_ids, index), ()):
                # Answered before (maybe released since): the first answer stands.
                results.append(ReservationResult(workload=item.workload, granted=True))
            elif current is not None:
                results.append(_already_live(item, current))
            elif (gone := _ended_after(item.workload, ended, views, index)) is not None:
                results.append(
                    ReservationResult(workload=item.workload, granted=False, reason=gone)
                )
            elif item.quota not in known:
                results.append(_unknown(item))
            elif (
                refusal := self._refusal(item, usage) or _beyond(zones, lending, item)
            ) is not None:
                results.append(
                    ReservationResult(workload=item.workload, granted=False, reason=refusal)
                )
            else:
                _add(usage, item.quota, item.requests, +1)
                zones.add(item.quota, item.zone, item.requests)
                lending.add(item.quota, shape_of(item.requests))
                touched |= _keys(item.quota, item.requests)
                # A second reservation of the same workload later in the batch is a retry.
                live[item.workload] = _placeholder(item, _ADMITTED)
                granted.append(item)
                if request_ids is not None:
                    granted_ids[item.workload] = request_ids[index]
                results.append(ReservationResult(workload=item.workload, granted=True))

        if granted:
            stamp = read.stamp
            created = [
                _created(item, _ADMITTED, granted_ids.get(item.workload)) for item in granted
            ]
            ids = {item.workload: read.ids[n] for n, item in enumerate(granted)}
            build = outbox
            rows = (
                []
                if build is None
                else [build(_admitted(i), i.zone, ids[i.workload], stamp) for i in granted]
            )
            await _write_batch(conn, created, ids, usage, touched, rows, stamp)
        return results

    def _refusal(
        self, item: Reservation, usage: dict[_Key, tuple[int, int | None]]
    ) -> Reason | None:
        """``QuotaExceeded`` naming the nearest node ``item`` would overfill (R2), or None."""
        short = first_shortfall(_loads(item, usage, self._rate), shape_of(item.requests))
        return None if short is None else quota_exceeded(short, self._rate)

    # ------------------------------------------------------------------ preempt

    async def preempt(
        self,
        preemptor: Reservation,
        victims: Sequence[Preempted],
        *,
        outbox: OutboxBuilder | None = None,
        log_seq: int | None = None,
    ) -> ReservationResult:
        """Move the victims' usage to a hold for ``preemptor``, in one transaction, or refuse.

        ``log_seq`` is the log's last sequence before this preemption: a suspended
        observation at or below it was made before the preemption and releases nothing.

        The reclaim rules are checked here, against the ledger's own rows and in the same
        transaction, whatever the proposer's view was (R5-R7; else ``StaleView`` naming the
        victim and why): every victim holds a live ``admitted`` allocation and has run its
        leaf's minimum runtime; a victim of another leaf needs the preemptor within its
        leaf's ``min`` and the victim's leaf borrowing a resource the preemptor requests (the
        claims of earlier victims set aside, in order); a victim of the preemptor's own leaf
        needs ``LowerPriority`` there and a strictly lower priority. The preemptor must fit on
        every node root..leaf once the victims' usage has left (else ``QuotaExceeded``).
        Nothing changes on a refusal. Granted: victims become ``preempting`` (still counted
        until seen stopped), the preemptor gets a ``held`` allocation carved out of them, and
        ``outbox`` is called with one ``Preempted`` per victim. A preemptor already holding a
        live allocation on its leaf is reported granted and nothing changes (a retried request).
        """
        check_reservations("preempt", [preemptor])
        _check_victims(preemptor.workload, victims)

        async def work(conn: AsyncConnection) -> ReservationResult:
            return await self._preempt_in(conn, preemptor, victims, outbox, log_seq)

        try:
            return await self.run("preempt", work)
        except _Refused as refused:
            return refused.result

    async def _preempt_in(
        self,
        conn: AsyncConnection,
        preemptor: Reservation,
        victims: Sequence[Preempted],
        outbox: OutboxBuilder | None,
        log_seq: int | None,
    ) -> ReservationResult:
        current = (await _live(conn, [preemptor.workload])).get(preemptor.workload)
        if current is not None:
            return _already_live(preemptor, current)
        if log_seq is not None:
            await conn.execute(select(func.pg_advisory_xact_lock_shared(_ENDS_LOCK)))
            ended = await _ended(conn, [preemptor.workload])
            gone = _ended_after(preemptor.workload, ended, [log_seq], 0)
            if gone is not None:
                return ReservationResult(workload=preemptor.workload, granted=False, reason=gone)
        if preemptor.quota not in await _leaves(conn, {preemptor.quota}):
            return _unknown(preemptor)
        earlier = earlier_preemption_refusal(
            preemptor.workload, await _still_stopping_for(conn, preemptor.workload)
        )
        if earlier is not None:  # R7: its hold ended, the victims it left still stop
            return ReservationResult(workload=preemptor.workload, granted=False, reason=earlier)
        # Allocation rows first, then usage rows: the same order as the release path, so a
        # victim stopping while it is being preempted waits here instead of deadlocking.
        rows = await _lock_live(conn, [v.workload for v in victims])
        for victim in victims:
            row = rows.get(victim.workload)
            if row is None or row.state != _ADMITTED:
                return _stale(preemptor, victim.workload, row)
        keys = _keys(preemptor.quota, preemptor.requests)
        for row in rows.values():
            keys |= _keys(row.quota, row.requests)
        usage = await _lock_usage(conn, keys)
        # Read after the locks: the victims' runtimes are measured against this instant.
        stamp = await _stamp(conn)
        ordered = [rows[v.workload] for v in victims]
        refusal = await self._reclaim_refusal(conn, preemptor, ordered, stamp)
        if refusal is None:
            lending = await LendingBook.load(conn, _asked([preemptor]), self._rate)  # L1, L2
            for row in ordered:
                _add(usage, row.quota, row.requests, -1)
                lending.add(row.quota, shape_of(row.requests), -1)
            refusal = self._refusal(preemptor, usage) or lending.refusal(preemptor)
        if refusal is not None:
            # Missing usage rows may have been created above; roll them back too.
            raise _Refused(
                ReservationResult(workload=preemptor.workload, granted=False, reason=refusal)
            )
        # The victims keep counting until seen stopped, the hold carved out of them.
        hold = _placeholder(preemptor, _HELD)
        for key, amount in _group_usage(hold, ordered).items():
            used, high = usage[key]
            usage[key] = (used + amount, high)
        # Victims end and the hold starts at the same instant: intervals are half-open.
        moves = [
            _moved(row, _PREEMPTING, preemptor=preemptor.workload, seq=log_seq) for row in ordered
        ]
        moves.append(_created(preemptor, _HELD))
        await _write_states(conn, moves, stamp)
        await _set_usage(conn, usage, keys)
        if outbox is not None:
            await _write_outbox(
                conn,
                [_preempted_row(outbox, v, rows[v.workload], preemptor, stamp) for v in victims],
            )
        return ReservationResult(workload=preemptor.workload, granted=True)

    async def _reclaim_refusal(
        self, conn: AsyncConnection, preemptor: Reservation, victims: list[_Alloc], now: datetime
    ) -> Reason | None:
        """Why this reclaim breaks R5-R7 on the ledger's rows (their usage rows are locked)."""
        leaves = {preemptor.quota} | {v.quota for v in victims}
        claims = await _claims(conn, leaves)
        minimums = await _minimums(conn, leaves)
        policies = await self._policies(conn, leaves)
        request = shape_of(preemptor.requests)
        mine = preemptor.quota
        requeues = await _requeues(conn, preemptor.workload)
        if requeues:  # R10: requeued for readiness, it may not preempt unless its tree says so
            policy = await self._readiness(conn, mine)
            refused = requeued_preemption_refusal(preemptor.workload, requeues, policy)
            if refused is not None:
                return refused
        zones = await ZoneGuarantees.load(conn, leaves, preemptor.zone)  # Z4
        preemption = await self._preemption_policy(conn, mine)  # P1-P3
        within = _within_once_own_leave(preemption, preemptor, victims, claims, minimums, zones)
        in_leaf = preempts_in_leaf(preemption, request, minimums.get(mine, {}))
        lower = policies[mine][0] == "LowerPriority"
        reclaim = await self._lending(conn, mine)  # L1
        present = await _present(conn, leaves)
        for victim in victims:
            keeps = (
                victim.quota == mine
                or victim.quota not in present
                or lender_keeps_guarantee(
                    claims.get(victim.quota, {}),
                    victim.requests,
                    minimums.get(victim.quota, {}),
                    request,
                )
            )
            may = within or takes_while_borrowing(
                preemption, preemptor.priority, victim.priority, lender_keeps=keeps
            )
            why = policy_refusal(
                preemptor.workload,
                mine,
                preemptor.priority,
                victim.workload,
                victim.quota,
                victim.priority,
                policy=preemption,
                within=within,
                in_leaf=in_leaf,
                lender_keeps=keeps,
            ) or victim_refusal(
                preemptor.workload,
                mine,
                preemptor.priority,
                victim.workload,
                victim.quota,
                victim.priority,
                ran_ms=_ran_ms(victim, now),
                min_runtime_ms=policies[victim.quota][1],
                lower_priority=lower,
                within=may,
                lending=reclaim,
                borrowing=victim.quota not in present
                or borrowed_resource(
                    claims.get(victim.quota, {}), {}, minimums.get(victim.quota, {}), request
                )
                is not None
                or zones.borrowing(mine, victim.quota, victim.zone, request),
            )
            if why is not None:
                return why
            claim = claims.setdefault(victim.quota, {})
            for resource, amount in victim.requests.items():
                claim[resource] = claim.get(resource, 0) - amount
            zones.add(victim.quota, victim.zone, dict(victim.requests), -1)
        return None

    async def _preemption_policy(self, conn: AsyncConnection, leaf: QuotaPath) -> PreemptionPolicy:
        """The preemption policy of ``leaf`` (P1-P3), inherited down the tree."""
        rows = await conn.execute(
            select(NODES.c.path, NODES.c.attributes).where(NODES.c.path.in_(path_of(leaf)))
        )
        attributes = {QuotaPath(p): dict(a or {}) for p, a in rows}
        return path_preemption_policy([attributes.get(p, {}) for p in path_of(leaf)])

    async def _readiness(self, conn: AsyncConnection, leaf: QuotaPath) -> ReadinessPolicy:
        """The readiness policy of ``leaf`` (R10), inherited down the tree."""
        rows = await conn.execute(
            select(NODES.c.path, NODES.c.attributes).where(NODES.c.path.in_(path_of(leaf)))
        )
        attributes = {QuotaPath(p): dict(a or {}) for p, a in rows}
        policy = ReadinessPolicy()
        for path in path_of(leaf):
            policy = readiness_policy(attributes.get(path, {}), policy)
        return policy

    async def _lending(self, conn: AsyncConnection, leaf: QuotaPath) -> Lending:
        """The lending policy of ``leaf`` (L1), inherited down the tree."""
        rows = await conn.execute(
            select(NODES.c.path, NODES.c.attributes).where(NODES.c.path.in_(path_of(leaf)))
        )
        attributes = {QuotaPath(p): dict(a or {}) for p, a in rows}
        return path_lending(attributes.get(path, {}) for path in path_of(leaf))

    async def _policies(
        self, conn: AsyncConnection, leaves: set[QuotaPath]
    ) -> dict[QuotaPath, NodePolicy]:
        """Within-quota mode and min runtime of each leaf, inherited down the tree."""
        prefixes = {p for leaf in leaves for p in path_of(leaf)}
        rows = await conn.execute(
            select(NODES.c.path, NODES.c.attributes).where(NODES.c.path.in_(prefixes))
        )
        attributes = {QuotaPath(p): dict(a or {}) for p, a in rows}
        return {
            leaf: path_policy([attributes.get(p, {}) for p in path_of(leaf)], self._default_policy)
            for leaf in leaves
        }

    # ------------------------------------------------------------------ requeue (R10)

    async def requeue(
        self,
        requeues: Sequence[Requeued | Preempted],
        *,
        outbox: OutboxBuilder | None = None,
        log_seq: int | None = None,
    ) -> list[ReservationResult]:
        """Carry out requeues for readiness a dequeuer decided, in one transaction (R10).

        Each is granted only while the workload's live allocation is ``admitted`` on the
        requeue's quota: it becomes ``preempting``, its own preemptor (a stop with no hold),
        so that it counts until its pods are seen stopped and is released by the very rules
        of a preempted victim (R7, ``_observe``); usage does not change now. ``outbox`` gets
        the ``Requeued`` decision. One already requeued (``preempting`` for itself) is
        reported granted and nothing changes (a retried request); anything else is refused
        with ``StaleView`` naming what the ledger holds. A drain's preemption (R15: a
        ``Preempted`` whose workload is its own preemptor) is carried out the same way and
        ``outbox`` gets that ``Preempted``; any other ``Preempted`` is a bad request.
        """
        for decision in requeues:
            if isinstance(decision, Preempted) and decision.preemptor != decision.workload:
                raise LedgerRequestError(
                    "requeue", "only a drain's Preempted (its own preemptor)", decision.workload
                )

        async def work(conn: AsyncConnection) -> list[ReservationResult]:
            return await self._requeue_in(conn, requeues, outbox, log_seq)

        return await self.run("requeue", work)

    async def _requeue_in(
        self,
        conn: AsyncConnection,
        requeues: Sequence[Requeued | Preempted],
        outbox: OutboxBuilder | None,
        log_seq: int | None,
    ) -> list[ReservationResult]:
        rows = await _lock_live(conn, [r.workload for r in requeues])
        stamp = await _stamp(conn)
        results: list[ReservationResult] = []
        granted: list[tuple[Requeued | Preempted, _Alloc]] = []
        moves: list[_Move] = []
        for requeue in requeues:
            row = rows.get(requeue.workload)
            refusal = _requeue_refusal(requeue, row)
            if refusal is not None:
                results.append(refusal)
                continue
            assert row is not None
            results.append(ReservationResult(workload=requeue.workload, granted=True))
            if row.state == _ADMITTED:
                moves.append(
                    _moved(row, _PREEMPTING, preemptor=row.workload, seq=log_seq, cause=_REQUEUED)
                )
                granted.append((requeue, row))
        if not granted:
            return results
        await _write_states(conn, moves, stamp)
        if outbox is not None:
            await _write_outbox(
                conn,
                [outbox(_requeued_row(r, row), row.zone, row.id, stamp) for r, row in granted],
            )
        return results

    # ------------------------------------------------------------------ holds (R14, R15)

    async def hold(
        self,
        order: HoldOrder,
        now: Millis,
        outbox: Callable[[NodeHeld | NodeResumed], OutboxMessage],
    ) -> NodeHeld | NodeResumed | list[FieldError]:
        """Record an operator's hold, drain or resume of a node, or say why not.

        ``order.target`` must be a quota path of the tree in force (people's tools resolve
        names and queues first); a drain without a grace takes the node's inherited
        ``usher.io/drain-grace-seconds``. The event goes out through the outbox like every
        decision of the ledger (R9). Which orders are in force is the log's to say: a resume
        of a node nobody holds is recorded and changes nothing.
        """

        async def work(conn: AsyncConnection) -> NodeHeld | NodeResumed | list[FieldError]:
            outcome = carry_out(order, await _branch(conn, QuotaPath(order.target)), None, now)
            if not isinstance(outcome, list):
                await _write_outbox(conn, [outbox(outcome)])
            return outcome

        return await self.run("hold", work)

    # ------------------------------------------------------------------ cluster events

    async def apply_log(
        self,
        consumer: str,
        last_seq: int,
        changes: Sequence[LogChange],
        *,
        outbox: OutboxBuilder | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> LogOutcome:
        """Apply a batch of log entries up to ``last_seq`` in one transaction with the offset.

        Entries at or below the stored offset are skipped (a redelivered batch changes
        nothing); ``last_seq`` may be beyond the last change (entries that needed nothing).
        Trees: the newest of the batch is applied with version = its sequence. Observations
        follow the release rules (see ``_observe``).
        """
        for change in changes:
            if change.seq > last_seq:
                raise LedgerRequestError("apply_log", f"entry {change.seq} beyond {last_seq}")

        async def work(conn: AsyncConnection) -> LogOutcome:
            previous = await _lock_offset(conn, consumer, stream)
            if last_seq <= previous:
                return LogOutcome(applied=False, last_seq=previous)
            fresh = [c for c in changes if c.seq > previous]
            trees = [c for c in fresh if isinstance(c, TreeUpdate)]
            if trees:
                # Each tree replaces the whole previous one: only the newest matters.
                newest = max(trees, key=lambda t: t.seq)
                await _apply_tree_in(conn, newest.root, newest.seq)
            observed: list[Observation] = []
            for change in fresh:
                if isinstance(change, ClusterGone):
                    observed.extend(await _cluster_gone(conn, change))
                elif isinstance(change, Observation):
                    observed.append(change)
            outcome = await _observe(conn, observed, outbox)
            await conn.execute(
                update(OFFSETS)
                .where(OFFSETS.c.consumer == consumer)
                .values(last_seq=last_seq, stream=stream, updated_at=func.now())
            )
            return LogOutcome(
                applied=True,
                last_seq=last_seq,
                released=outcome.released,
                admitted=outcome.admitted,
                outbox_rows=outcome.outbox_rows,
            )

        return await self.run("apply_log", work)

    async def release(
        self,
        workload: WorkloadKey,
        cause: ReleaseCause,
        *,
        consumer: str | None = None,
        stream_seq: int | None = None,
        stream: str = DEFAULT_STREAM,
        outbox: OutboxBuilder | None = None,
    ) -> Resources | None:
        """Release ``workload`` by the same rules as a log entry with ``cause``.

        Returns what the allocation held, or ``None`` when nothing live was released (or the
        offset says it was already applied). The outbox rows are written only on a release.
        """
        _check_offset("release", consumer, stream_seq)
        observation = Observation(seq=stream_seq or 0, workload=workload, change=cause)
        released: list[Released]
        if consumer is not None and stream_seq is not None:
            outcome = await self.apply_log(
                consumer, stream_seq, [observation], outbox=outbox, stream=stream
            )
            released = outcome.released
        else:

            async def work(conn: AsyncConnection) -> _Observed:
                return await _observe(conn, [observation], outbox)

            released = (await self.run("release", work)).released
        for decision in released:
            if decision.workload == workload:
                return decision.requests
        return None

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
                    requests=_resources(row.requests),
                    priority=row.priority,
                    state=row.state,
                    admitted_at=row.admitted_at,
                    reserved_at=row.reserved_at,
                    preempted_at=row.preempted_at,
                    preemptor=None if row.preemptor is None else WorkloadKey(row.preemptor),
                )
                for row in rows
            ]

    async def pending_outbox(self, limit: int) -> list[OutboxMessage]:
        """Unpublished outbox rows in insertion (= publishing) order: one statement, no
        transaction around it."""

        async def work(conn: AsyncConnection) -> list[OutboxMessage]:
            return _messages(await conn.execute(_PENDING_OUTBOX, {"published": [], "limit": limit}))

        return await self.run("pending_outbox", work, autocommit=True)

    async def mark_published(self, ids: Iterable[int], *, then: int = 0) -> list[OutboxMessage]:
        """Stamp outbox rows as published (idempotent) and, with ``then``, read up to that many
        of the rows still unpublished, in order, in the same statement (a relay's next batch)."""
        wanted = sorted(set(ids))
        if not wanted and not then:
            return []

        async def work(conn: AsyncConnection) -> list[OutboxMessage]:
            found = await conn.execute(_MARK_PUBLISHED, {"published": wanted, "limit": then})
            return _messages(found)

        return await self.run("mark_published", work, autocommit=True)

    async def offset(self, consumer: str) -> int | None:
        """Last stream sequence ``consumer`` applied, or ``None``."""

        async def work(conn: AsyncConnection) -> int | None:
            value = await conn.scalar(
                select(OFFSETS.c.last_seq).where(OFFSETS.c.consumer == consumer)
            )
            return None if value is None else int(value)

        return await self.run("offset", work)


# ---------------------------------------------------------------------- observations


@dataclass(slots=True)
class _Observed:
    released: list[Released]
    admitted: list[Admitted]
    outbox_rows: int


async def _cluster_gone(conn: AsyncConnection, gone: ClusterGone) -> list[Observation]:
    """The deletions a lost cluster stands for: one per live allocation of its workloads."""
    rows = await conn.execute(
        select(ALLOCATIONS.c.workload).where(_LIVE_PREDICATE).order_by(ALLOCATIONS.c.id)
    )
    return [
        Observation(seq=gone.seq, workload=WorkloadKey(key), change="Deleted")
        for (key,) in rows
        if cluster_of(WorkloadKey(key)) == gone.cluster
    ]


async def _observe(
    conn: AsyncConnection, observations: Sequence[Observation], outbox: OutboxBuilder | None
) -> _Observed:
    """Apply observations in order; the release rules of the ledger.

    * finished/failed/deleted (or an explicit cause) of an admitted allocation: usage
      decremented, ``released`` with that cause.
    * any of those, or an observed suspension, of a ``preempting`` victim: ``released`` (cause
      ``Preempted``, ``Deleted`` if deleted); then its preemptor, if ``held`` with no other
      victim still ``preempting``, is admitted. A workload requeued for readiness (R10) is
      such a victim, its own preemptor with no hold.
    * finished/failed/deleted of a ``held`` preemptor: ``released``; its victims go on counting
      until they are seen stopped.
    * an observed suspension of anything else changes nothing: an admitted workload may
      simply not have been unsuspended yet, a held one is suspended until admitted.

    A preemption group's usage is recomputed as a whole (``max(victims, hold)`` per node and
    resource, R7) before and after the batch: the difference is what leaves the tree.
    """
    if not observations:
        return _Observed([], [], 0)
    await _record_ends(conn, observations)
    rows = await _lock_live(conn, {o.workload for o in observations})
    groups = await _lock_groups(conn, rows)

    plan = _ObservePlan()
    before = {p: g.counted() for p, g in sorted(groups.items())}
    # Counted through its group: a victim, or a preemptor still held. A preemptor whose hold
    # ended and that was granted again on its own counts for itself.
    members = {k for g in groups.values() for k in g.victims}
    members |= {p for p, g in groups.items() if g.hold is not None}
    for observation in observations:
        row = rows.get(observation.workload)
        if row is not None:
            _plan_observation(plan, row, observation, groups, counted=row.workload not in members)
    for preemptor, group in sorted(groups.items()):
        after = group.counted()
        for key, amount in before[preemptor].items():
            left = amount - after.get(key, 0)
            if left:
                plan.decrements[key] = plan.decrements.get(key, 0) + left

    keys = set(plan.decrements)
    await _lock_usage(conn, keys)
    # Read after the usage locks: releases are stamped in the order the locks were granted.
    stamp = await _stamp(conn)
    await _write_states(conn, plan.moves, stamp)
    if keys:
        await conn.execute(
            update(USAGE)
            .where(USAGE.c.path == bindparam("k_path"), USAGE.c.resource == bindparam("k_res"))
            .values(used=USAGE.c.used - bindparam("k_amount")),
            [
                {"k_path": p, "k_res": r, "k_amount": plan.decrements[(p, r)]}
                for p, r in sorted(keys)
            ],
        )
    written = 0
    if outbox is not None and plan.decisions:
        await _write_outbox(conn, [outbox(d, zone, i, stamp) for d, zone, i in plan.decisions])
        written = len(plan.decisions)
    return _Observed(
        released=[d for d, _, _ in plan.decisions if isinstance(d, Released)],
        admitted=[d for d, _, _ in plan.decisions if isinstance(d, Admitted)],
        outbox_rows=written,
    )


_ENDING: Final = frozenset({"Finished", "Failed", "Deleted"})


async def _record_ends(conn: AsyncConnection, observations: Sequence[Observation]) -> None:
    """Remember at which log sequence each workload finished or went (R8)."""
    ends: dict[WorkloadKey, Observation] = {}
    for observation in observations:
        if observation.change in _ENDING and observation.seq > 0:
            ends[observation.workload] = observation
    if not ends:
        return
    # Exclusive: waits for reservations that checked no end yet (they hold it shared), so
    # whatever they grant is committed, and released below, before the end is recorded.
    await conn.execute(select(func.pg_advisory_xact_lock(_ENDS_LOCK)))
    insert = pg_insert(ENDED)
    await conn.execute(
        insert.on_conflict_do_update(
            index_elements=[ENDED.c.workload],
            set_={
                "seq": func.greatest(ENDED.c.seq, insert.excluded.seq),
                "cause": insert.excluded.cause,
            },
        ),
        [{"workload": key, "seq": o.seq, "cause": o.change} for key, o in sorted(ends.items())],
    )


async def _ended(conn: AsyncConnection, workloads: Sequence[WorkloadKey]) -> dict[WorkloadKey, int]:
    if not workloads:
        return {}
    rows = await conn.execute(
        select(ENDED.c.workload, ENDED.c.seq).where(ENDED.c.workload.in_(set(workloads)))
    )
    return {WorkloadKey(w): int(seq) for w, seq in rows}


async def _requeues(conn: AsyncConnection, workload: WorkloadKey) -> int:
    """Times ``workload`` was requeued for readiness (R10) since it last ended: a workload of
    the same name created again after an end starts with none."""
    rows = await conn.execute(
        select(ALLOCATIONS.c.preempted_seq).where(
            ALLOCATIONS.c.workload == workload, ALLOCATIONS.c.release_cause == _REQUEUED
        )
    )
    seqs = [seq for (seq,) in rows]
    if not seqs:
        return 0
    end = (await _ended(conn, [workload])).get(workload)
    return sum(1 for seq in seqs if end is None or seq is None or seq > end)


def _ended_after(
    workload: WorkloadKey,
    ended: dict[WorkloadKey, int],
    views: Sequence[int | None] | None,
    index: int,
) -> Reason | None:
    """``StaleView`` when the ledger saw ``workload`` end after its proposer's view."""
    view = None if views is None else views[index]
    end = ended.get(workload)
    if view is None or end is None or end <= view:
        return None
    return reasons.ended_after_view(workload, end, view)


async def _still_stopping_for(conn: AsyncConnection, preemptor: WorkloadKey) -> list[WorkloadKey]:
    """Victims of an earlier preemption by ``preemptor`` still ``preempting`` (R7).

    Read without locks: a victim only ever leaves ``preempting``, and only a preemption by
    this same workload could add one, which the preemptor's own live row rules out.
    """
    found = await conn.execute(
        select(ALLOCATIONS.c.workload).where(
            ALLOCATIONS.c.preemptor == preemptor,
            ALLOCATIONS.c.state == _PREEMPTING.value,
            ALLOCATIONS.c.workload != preemptor,
        )
    )
    return sorted(WorkloadKey(row.workload) for row in found)


async def _lock_groups(
    conn: AsyncConnection, rows: dict[WorkloadKey, _Alloc]
) -> dict[WorkloadKey, _Group]:
    """The preemption groups the observed rows belong to, their other rows locked too.

    A second round of allocation locks (holds, then the other victims). Only the ledger's log
    consumer locks ``held`` and ``preempting`` rows, so this cannot deadlock with a preemption,
    which locks only ``admitted`` victims.
    """
    preemptors = {r.preemptor for r in rows.values() if r.state == _PREEMPTING and r.preemptor}
    preemptors |= {r.workload for r in rows.values() if r.state == _HELD}
    if not preemptors:
        return {}
    rows.update(await _lock_live(conn, preemptors - rows.keys()))
    found = await conn.execute(
        select(*_ALLOC_COLUMNS)
        .where(ALLOCATIONS.c.preemptor.in_(preemptors), ALLOCATIONS.c.state == _PREEMPTING.value)
        .order_by(ALLOCATIONS.c.id)
        .with_for_update()
    )
    groups: dict[WorkloadKey, _Group] = {}
    for preemptor in sorted(preemptors):
        hold = rows.get(preemptor)
        groups[preemptor] = _Group(hold if hold is not None and hold.state == _HELD else None)
    for raw in found:
        victim = rows.setdefault(WorkloadKey(raw.workload), _alloc(raw))
        assert victim.preemptor is not None
        groups[victim.preemptor].victims[victim.workload] = victim
    return groups


def _plan_observation(
    plan: _ObservePlan,
    row: _Alloc,
    observation: Observation,
    groups: dict[WorkloadKey, _Group],
    *,
    counted: bool,
) -> None:
    # Seen before it was preempted (e.g. suspended before it ever started): see release_cause.
    before = row.preempted_seq is not None and observation.seq <= row.preempted_seq
    cause = release_cause(
        row.state, observation.change, before_preemption=before, requeued=row.requeued
    )
    if cause is None:
        return
    if row.state != _PREEMPTING:
        _plan_release(plan, row, cause, count=counted)
        return
    _plan_release(plan, row, cause, count=False)
    group = groups.get(row.preemptor) if row.preemptor is not None else None
    if group is None:
        return
    hold = group.hold
    left = [v for v in group.victims.values() if v.state == _PREEMPTING]
    if not left and hold is not None and hold.state == _HELD:
        plan.moves.append(_moved(hold, _ADMITTED))
        plan.decisions.append((_admitted_row(hold), hold.zone, hold.id))


def _plan_release(plan: _ObservePlan, row: _Alloc, cause: ReleaseCause, *, count: bool) -> None:
    if count:
        for key in _keys(row.quota, row.requests):
            plan.decrements[key] = plan.decrements.get(key, 0) + row.requests[key[1]]
    plan.moves.append(_moved(row, _RELEASED, cause=cause))
    decision = Released(workload=row.workload, quota=row.quota, requests=row.requests, cause=cause)
    plan.decisions.append((decision, row.zone, row.id))


def _group_usage(hold: _Alloc | None, victims: Iterable[_Alloc]) -> dict[_Key, int]:
    """What one preemption group counts on each (node, resource): the core's rule (R7)."""
    return group_usage(
        None if hold is None else _counts(hold), [_counts(victim) for victim in victims]
    )


def _counts(row: _Alloc) -> dict[_Key, int]:
    """What ``row`` alone counts on each (node, resource) of its path."""
    return {key: row.requests[key[1]] for key in _keys(row.quota, row.requests)}


def _within_once_own_leave(
    policy: PreemptionPolicy,
    preemptor: Reservation,
    victims: Sequence[_Alloc],
    claims: dict[QuotaPath, dict[str, int]],
    minimums: dict[QuotaPath, dict[str, int]],
    zones: ZoneGuarantees,
) -> bool:
    """Whether ``preemptor`` asks within its leaf's guarantee (R5) on the ledger's rows; with
    P1 on its leaf, judged with the victims of its own leaf set aside, as the engine does."""
    mine, request = preemptor.quota, shape_of(preemptor.requests)
    own = [v for v in victims if v.quota == mine] if policy.with_own_victims else []
    claim = claim_without(claims.get(mine, {}), [v.requests for v in own])
    for victim in own:
        zones.add(mine, victim.zone, dict(victim.requests), -1)
    try:
        return within_guarantee(claim, {}, minimums.get(mine, {}), request) and zones.within(
            mine, request
        )
    finally:
        for victim in own:
            zones.add(mine, victim.zone, dict(victim.requests), 1)


def _ran_ms(victim: _Alloc, now: datetime) -> int:
    """How long ``victim`` has run at ``now``, in whole milliseconds (0: no admission stamp)."""
    if victim.admitted_at is None:
        return 0
    return (now - victim.admitted_at) // timedelta(milliseconds=1)


async def _claims(conn: AsyncConnection, leaves: set[QuotaPath]) -> dict[QuotaPath, dict[str, int]]:
    """Per leaf, the requests of its admitted and held allocations (victims stopping aside)."""
    rows = await conn.execute(
        select(ALLOCATIONS.c.quota_path, ALLOCATIONS.c.requests).where(
            ALLOCATIONS.c.quota_path.in_(leaves),
            ALLOCATIONS.c.state.in_([s.value for s in CLAIMING]),
        )
    )
    out: dict[QuotaPath, dict[str, int]] = {}
    for path, requests in rows:
        claim = out.setdefault(QuotaPath(path), {})
        for resource, amount in requests.items():
            claim[resource] = claim.get(resource, 0) + int(amount)
    return out


async def _minimums(
    conn: AsyncConnection, leaves: set[QuotaPath]
) -> dict[QuotaPath, dict[str, int]]:
    rows = await conn.execute(
        select(USAGE.c.path, USAGE.c.resource, USAGE.c.min).where(USAGE.c.path.in_(leaves))
    )
    out: dict[QuotaPath, dict[str, int]] = {}
    for path, resource, low in rows:
        out.setdefault(QuotaPath(path), {})[resource] = int(low)
    return out


async def _branch(conn: AsyncConnection, target: QuotaPath) -> QuotaNode | None:
    """The nodes of the tree in force from the root down to ``target`` (as far as they
    exist), with their attributes; None when there is no tree at all."""
    wanted = [str(p) for p in path_nodes(target)]
    rows = await conn.execute(
        select(NODES.c.path, NODES.c.name, NODES.c.attributes).where(
            NODES.c.path.in_(wanted), NODES.c.present
        )
    )
    found = {row.path: (str(row.name), dict(row.attributes or {})) for row in rows}
    if not found and not await conn.scalar(
        select(func.count()).select_from(NODES).where(NODES.c.present)
    ):
        return None
    chain: list[tuple[str, dict[str, str]]] = []
    for path in wanted:
        if path not in found:
            break
        chain.append(found[path])
    if not chain:
        # Another root: the target names nothing; a tree of the real root says so.
        root = await conn.execute(
            select(NODES.c.name).where(NODES.c.parent_path.is_(None), NODES.c.present)
        )
        name = root.scalar()
        return branch_tree([(str(name), {})]) if name is not None else None
    return branch_tree(chain)


async def _present(conn: AsyncConnection, paths: set[QuotaPath]) -> set[QuotaPath]:
    rows = await conn.execute(select(NODES.c.path).where(NODES.c.path.in_(paths), NODES.c.present))
    return {QuotaPath(p) for p in rows.scalars()}


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


def _check_victims(preemptor: WorkloadKey, victims: Sequence[Preempted]) -> None:
    names = [v.workload for v in victims]
    if not names:
        raise LedgerRequestError("preempt", "a preemption needs at least one victim", preemptor)
    if len(set(names)) != len(names):
        raise LedgerRequestError("preempt", f"a victim is named twice in {names}", preemptor)
    if preemptor in names:
        raise LedgerRequestError("preempt", f"{preemptor} cannot preempt itself", preemptor)


def _keys(leaf: QuotaPath, requests: Resources) -> set[_Key]:
    return {(node, r) for node in path_of(leaf) for r, amount in requests.items() if amount}


def _loads(
    item: Reservation, usage: dict[_Key, tuple[int, int | None]], rate: Fraction
) -> list[Load]:
    """The locked usage rows of ``item``'s path (root..leaf) as the core's fit check reads them."""
    loads = []
    for node in path_of(item.quota):
        used: dict[str, int] = {}
        limits: dict[str, int] = {}
        for resource, amount in item.requests.items():
            if amount:
                used[resource], high = usage[(node, resource)]
                if high is not None:
                    limits[resource] = high
        loads.append(Load.of_limits(node, used, limits, rate))
    return loads


def _beyond(zones: ZoneBook, lending: LendingBook, item: Reservation) -> Reason | None:
    """What refuses ``item`` besides the path's caps: a zone cap (Z1), or idle guarantee
    another node keeps (L1, L2)."""
    return zones.refusal(item) or lending.refusal(item)


def _asked(reservations: Iterable[Reservation]) -> set[str]:
    """The resources some of ``reservations`` asks a non-zero amount of."""
    return {r for item in reservations for r, amount in item.requests.items() if amount}


def _add(
    usage: dict[_Key, tuple[int, int | None]], leaf: QuotaPath, requests: Resources, sign: int
) -> None:
    for key in _keys(leaf, requests):
        used, high = usage[key]
        usage[key] = (used + sign * requests[key[1]], high)


def _resources(raw: dict[str, Any]) -> Resources:
    return {str(k): int(v) for k, v in raw.items()}


async def _stamp(conn: AsyncConnection) -> datetime:
    """The wall clock now (not the transaction start): call it only once the locks are held."""
    value = await conn.scalar(select(func.clock_timestamp()))
    assert isinstance(value, datetime)
    return value


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


async def _lock_offset(conn: AsyncConnection, consumer: str, stream: str) -> int:
    """Lock the consumer's offset row (created at 0) and return the sequence it holds.

    Taken first in the transaction: a second delivery of the same batch waits here and then
    reads the committed offset, so it applies nothing twice.
    """
    insert = pg_insert(OFFSETS).values(consumer=consumer, stream=stream, last_seq=0)
    stmt = insert.on_conflict_do_update(
        index_elements=[OFFSETS.c.consumer], set_={"consumer": insert.excluded.consumer}
    ).returning(OFFSETS.c.last_seq)
    return int((await conn.execute(stmt)).scalar_one())


_ALLOC_COLUMNS: Final = (
    ALLOCATIONS.c.id,
    ALLOCATIONS.c.workload,
    ALLOCATIONS.c.zone,
    ALLOCATIONS.c.quota_path,
    ALLOCATIONS.c.queue,
    ALLOCATIONS.c.requests,
    ALLOCATIONS.c.priority,
    ALLOCATIONS.c.state,
    ALLOCATIONS.c.preemptor,
    ALLOCATIONS.c.preempted_seq,
    ALLOCATIONS.c.admitted_at,
    ALLOCATIONS.c.release_cause,
)


def _alloc(row: Any) -> _Alloc:
    return _Alloc(
        id=row.id,
        workload=WorkloadKey(row.workload),
        zone=Zone(row.zone),
        quota=QuotaPath(row.quota_path),
        queue=QueueName(row.queue),
        requests=_resources(row.requests),
        priority=int(row.priority),
        state=AllocationState(row.state),
        preemptor=None if row.preemptor is None else WorkloadKey(row.preemptor),
        preempted_seq=row.preempted_seq,
        admitted_at=row.admitted_at,
        requeued=row.release_cause == "Requeued",
    )


async def _live(
    conn: AsyncConnection, workloads: Collection[WorkloadKey]
) -> dict[WorkloadKey, _Alloc]:
    """Live allocations of ``workloads``, read without locks (a retry check only)."""
    if not workloads:
        return {}
    rows = await conn.execute(
        select(*_ALLOC_COLUMNS).where(ALLOCATIONS.c.workload.in_(set(workloads)), _LIVE_PREDICATE)
    )
    return {WorkloadKey(row.workload): _alloc(row) for row in rows}


async def _lock_live(
    conn: AsyncConnection, workloads: Collection[WorkloadKey]
) -> dict[WorkloadKey, _Alloc]:
    """Lock the live allocations of ``workloads`` (by id order, so lockers queue, not deadlock)."""
    if not workloads:
        return {}
    rows = await conn.execute(
        select(*_ALLOC_COLUMNS)
        .where(ALLOCATIONS.c.workload.in_(set(workloads)), _LIVE_PREDICATE)
        .order_by(ALLOCATIONS.c.id)
        .with_for_update()
    )
    return {WorkloadKey(row.workload): _alloc(row) for row in rows}


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
        _INSERT_USAGE,
        [{"path": p, "resource": r, "min": 0, "max": None, "used": 0} for p, r in ordered],
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


async def _set_usage(
    conn: AsyncConnection, usage: dict[_Key, tuple[int, int | None]], keys: set[_Key]
) -> None:
    """Write back ``used`` of the locked rows ``keys`` (absolute values: we hold the locks)."""
    if not keys:
        return
    await conn.execute(
        update(USAGE)
        .where(USAGE.c.path == bindparam("k_path"), USAGE.c.resource == bindparam("k_res"))
        .values(used=bindparam("k_used")),
        [{"k_path": p, "k_res": r, "k_used": usage[(p, r)][0]} for p, r in sorted(keys)],
    )


@dataclass(frozen=True, slots=True)
class _Move:
    """One allocation state write: ``row`` from ``source`` (None: a new row) to ``target``,
    with what ``target`` records (a victim's ``preemptor`` and log ``seq``, a release's
    ``cause`` -- or, on a stop for a requeue, the cause its release will say -- a new row's
    ``request_id``)."""

    row: _Alloc
    source: AllocationState | None
    target: AllocationState
    preemptor: WorkloadKey | None = None
    seq: int | None = None
    cause: ReleaseCause | None = None
    request_id: str | None = None


def _moved(
    row: _Alloc,
    target: AllocationState,
    *,
    preemptor: WorkloadKey | None = None,
    seq: int | None = None,
    cause: ReleaseCause | None = None,
) -> _Move:
    """``row`` planned from its state to ``target``; its in-memory state follows (the batch
    reads it), the row itself changes only in ``_write_states``, which checks the move."""
    move = _Move(row, row.state, target, preemptor=preemptor, seq=seq, cause=cause)
    row.state = target
    return move


def _created(item: Reservation, target: AllocationState, request_id: str | None = None) -> _Move:
    """A new allocation of ``item`` planned in ``target``."""
    return _Move(_placeholder(item, target), None, target, request_id=request_id)


# One statement moves a batch of rows: each row at most once (a second move of a row in the
# batch goes in the next round), only from the state its move was checked from.
_MOVE_ROWS: Final = text(
    f"""
    UPDATE allocations AS a SET
        state = m.target,
        admitted_at = CASE WHEN m.target = '{_ADMITTED}' THEN :stamp ELSE a.admitted_at END,
        preemptor = CASE WHEN m.target = '{_PREEMPTING}' THEN m.preemptor ELSE a.preemptor END,
        preempted_at = CASE WHEN m.target = '{_PREEMPTING}' THEN :stamp ELSE a.preempted_at END,
        preempted_seq = CASE WHEN m.target = '{_PREEMPTING}' THEN m.seq ELSE a.preempted_seq END,
        released_at = CASE WHEN m.target = '{_RELEASED}' THEN :stamp ELSE a.released_at END,
        release_cause = CASE WHEN m.target = '{_RELEASED}' OR m.cause IS NOT NULL THEN m.cause
            ELSE a.release_cause END
    FROM unnest(
        CAST(:ids AS bigint[]), CAST(:sources AS text[]), CAST(:targets AS text[]),
        CAST(:preemptors AS text[]), CAST(:seqs AS bigint[]), CAST(:causes AS text[])
    ) AS m(id, source, target, preemptor, seq, cause)
    WHERE a.id = m.id AND a.state = m.source
    RETURNING a.id
    """
).bindparams(bindparam("stamp", type_=DateTime(timezone=True)))


async def _write_states(
    conn: AsyncConnection, moves: Sequence[_Move], stamp: datetime
) -> dict[WorkloadKey, int]:
    """Write allocation states: the one place they are written. The ids of new rows by workload.

    Every move is checked against the core's transition table first
    (``LedgerTransitionError`` naming the workload, from and to; nothing is written); then new
    rows are inserted, and the others moved in the order of ``moves`` (a row moved twice, e.g.
    held -> admitted -> released, in two statements), each only from the state it was checked
    from: a row found in another state is refused the same way. Raises
    ``_RaceLost`` when a concurrent transaction committed a live allocation for a new row's
    workload after we read: our decisions counted on its absence, so the batch is replayed.
    """
    for move in moves:
        _check(move.row.workload, move.source, move.target)
    created = [move for move in moves if move.source is None]
    ids = await _insert_rows(conn, created, stamp)
    rounds: list[list[_Move]] = []
    depths: dict[int, int] = {}
    for move in moves:
        if move.source is not None:
            depth = depths[move.row.id] = depths.get(move.row.id, -1) + 1
            if depth == len(rounds):
                rounds.append([])
            rounds[depth].append(move)
    for batch in rounds:
        await _move_rows(conn, batch, stamp)
    return ids


def _check(workload: WorkloadKey, source: AllocationState | None, target: AllocationState) -> None:
    """``LedgerTransitionError`` unless the core's table lets ``source`` become ``target``."""
    try:
        advance(source, target)
    except IllegalTransition as illegal:
        raise LedgerTransitionError(workload, source, target, str(illegal)) from illegal


async def _insert_rows(
    conn: AsyncConnection, created: Sequence[_Move], stamp: datetime
) -> dict[WorkloadKey, int]:
    ids: dict[WorkloadKey, int] = {}
    if not created:
        return ids
    inserted = await conn.execute(
        _INSERT_ALLOCATION,
        [
            {
                "workload": move.row.workload,
                "zone": move.row.zone,
                "quota_path": move.row.quota,
                "queue": move.row.queue,
                "requests": dict(move.row.requests),
                "priority": move.row.priority,
                "state": move.target.value,
                "reserved_at": stamp,
                "admitted_at": stamp if move.target == _ADMITTED else None,
                "request_id": move.request_id,
            }
            for move in created
        ],
    )
    for alloc_id, workload in inserted:
        ids[WorkloadKey(workload)] = int(alloc_id)
    if len(ids) != len(created):
        raise _RaceLost
    return ids


async def _move_rows(conn: AsyncConnection, batch: Sequence[_Move], stamp: datetime) -> None:
    """Move each row of ``batch`` (one move a row) from its checked state; a row found in
    another state is refused with the state the ledger holds."""
    if not batch:
        return
    moved = await conn.execute(
        _MOVE_ROWS,
        {
            "stamp": stamp,
            "ids": [m.row.id for m in batch],
            "sources": [str(m.source) for m in batch],
            "targets": [m.target.value for m in batch],
            "preemptors": [m.preemptor for m in batch],
            "seqs": [m.seq for m in batch],
            "causes": [m.cause for m in batch],
        },
    )
    done = set(moved.scalars())
    missed = [m for m in batch if m.row.id not in done]
    if not missed:
        return
    found = await conn.execute(
        select(ALLOCATIONS.c.id, ALLOCATIONS.c.state).where(
            ALLOCATIONS.c.id.in_([m.row.id for m in missed])
        )
    )
    held = {int(i): AllocationState(state) for i, state in found}
    move = missed[0]
    actual = held.get(move.row.id)
    why = f"the ledger holds it {actual or 'nowhere'}, not {move.source}"
    raise LedgerTransitionError(move.row.workload, actual, move.target, why)


def _request_at(request_ids: Sequence[str] | None, index: int) -> str | None:
    return None if request_ids is None else request_ids[index]


def _messages(rows: Iterable[Any]) -> list[OutboxMessage]:
    return [OutboxMessage(id=i, event_id=e, subject=s, payload=bytes(p)) for i, e, s, p in rows]


async def _write_outbox(conn: AsyncConnection, outbox: Sequence[OutboxMessage]) -> None:
    """Insert outbox rows in order (their ids give the publishing order), many per statement,
    under ``_OUTBOX_LOCK``: call it last, once every row lock of the transaction is held."""
    if not outbox:
        return
    await conn.execute(select(func.pg_advisory_xact_lock(_OUTBOX_LOCK)))
    await conn.execute(
        _INSERT_OUTBOX,
        [{"event_id": m.event_id, "subject": m.subject, "payload": m.payload} for m in outbox],
    )


def _placeholder(item: Reservation, state: AllocationState) -> _Alloc:
    return _Alloc(
        id=0,
        workload=item.workload,
        zone=item.zone,
        quota=item.quota,
        queue=item.queue,
        requests=dict(item.requests),
        priority=item.priority,
        state=state,
        preemptor=None,
    )


def _admitted(item: Reservation) -> Admitted:
    return Admitted(
        workload=item.workload,
        queue=item.queue,
        quota=item.quota,
        zone=item.zone,
        requests=dict(item.requests),
        priority=item.priority,
        pod_counts=item.pod_counts,
        reason=item.reason,
        topology=item.topology,
    )


def _admitted_row(row: _Alloc) -> Admitted:
    return Admitted(
        workload=row.workload,
        queue=row.queue,
        quota=row.quota,
        zone=row.zone,
        requests=row.requests,
        priority=row.priority,
    )


def _preempted_row(
    outbox: OutboxBuilder, victim: Preempted, row: _Alloc, preemptor: Reservation, at: datetime
) -> OutboxMessage:
    # The ledger's rows are the truth about where the victim counted; the reason is the core's.
    decision = Preempted(
        workload=row.workload,
        queue=row.queue,
        quota=row.quota,
        preemptor=preemptor.workload,
        reason=victim.reason,
    )
    return outbox(decision, row.zone, row.id, at)


def _requeue_refusal(requeue: Requeued | Preempted, row: _Alloc | None) -> ReservationResult | None:
    """Why the ledger cannot requeue ``requeue.workload`` now; None when it can (or did)."""
    if row is not None and row.quota == requeue.quota:
        if row.state == _ADMITTED:
            return None
        if row.state == _PREEMPTING and row.preemptor == row.workload:
            return None  # a retried request: already requeued
    state, node = (None, None) if row is None else (row.state, row.quota)
    return ReservationResult(
        workload=requeue.workload,
        granted=False,
        reason=reasons.requeue_refused(requeue.workload, state, node),
    )


def _requeued_row(requeue: Requeued | Preempted, row: _Alloc) -> Requeued | Preempted:
    # The ledger's rows are the truth about where it counted; the rest is the core's decision.
    if isinstance(requeue, Preempted):
        return msgspec.structs.replace(requeue, queue=row.queue, quota=row.quota)
    return msgspec.structs.replace(
        requeue, queue=row.queue, quota=row.quota, zone=row.zone, requests=row.requests
    )


def _already_live(item: Reservation, current: _Alloc) -> ReservationResult:
    if current.state == _PREEMPTING:
        return ReservationResult(
            workload=item.workload,
            granted=False,
            reason=reasons.being_preempted(item.workload, current.quota, current.preemptor),
        )
    if current.quota == item.quota:
        # A redelivered request: the grant (or hold) stands, nothing is counted twice.
        return ReservationResult(workload=item.workload, granted=True)
    return ReservationResult(
        workload=item.workload,
        granted=False,
        reason=reasons.already_admitted(item.workload, current.quota, item.quota),
    )


def _stale(preemptor: Reservation, victim: WorkloadKey, row: _Alloc | None) -> ReservationResult:
    state, node = (None, None) if row is None else (row.state, row.quota)
    return ReservationResult(
        workload=preemptor.workload,
        granted=False,
        reason=reasons.victim_not_admitted(victim, state, node),
    )


def _unknown(item: Reservation) -> ReservationResult:
    return ReservationResult(
        workload=item.workload,
        granted=False,
        reason=reasons.not_a_leaf(item.quota),
    )


async def _apply_tree_in(conn: AsyncConnection, root: QuotaNode, version: int) -> None:
    nodes = list(iter_nodes(root))
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


# ---------------------------------------------------------------------- the reservation batch
#
# A batch of reservations is three statements between BEGIN and COMMIT, whatever its size:
# lock, read, write. Python decides between the read and the write (the core's checks), so
# the read cannot be merged into the write; and what is read must be read by a statement that
# starts after the locks are granted (a statement's snapshot is taken when it starts, so
# rows read in the statement that waited for a lock would miss the writes of the transaction
# it waited for), so the lock cannot be merged into the read.

_PRESENT_LEAF: Final = """
    n.present AND NOT EXISTS (
        SELECT 1 FROM quota_nodes AS c WHERE c.parent_path = n.path AND c.present
    )"""
"""A ``quota_nodes`` row ``n`` is a present leaf of the tree in force (as ``_leaves``)."""

_LOCK_BATCH: Final = text(
    f"""
    WITH leaves AS MATERIALIZED (
        SELECT n.path FROM quota_nodes AS n
        WHERE n.path = ANY(CAST(:leaves AS text[])) AND {_PRESENT_LEAF}
    ), locked AS (
        INSERT INTO quota_usage (path, resource, min, max, used)
        SELECT DISTINCT k.path, k.resource, 0, CAST(NULL AS bigint), 0
        FROM unnest(CAST(:paths AS text[]), CAST(:resources AS text[]), CAST(:of AS text[]))
            AS k(path, resource, leaf)
        JOIN leaves AS l ON l.path = k.leaf
        ORDER BY k.path, k.resource
        ON CONFLICT (path, resource) DO UPDATE SET used = quota_usage.used WHERE false
        RETURNING 1
    )
    SELECT
        CASE WHEN CAST(:ends AS boolean)
            THEN CAST(pg_advisory_xact_lock_shared(hashtext('usher.ended_workloads')) AS text)
        END AS ends,
        (SELECT count(*) FROM locked) AS created,
        ARRAY(SELECT path FROM leaves) AS leaves
    """
)
"""Take the shared end lock (R8, when views are given), then lock every usage row of the
paths of the batch's present leaves in (path, resource) order, creating the missing ones: an
``ON CONFLICT DO UPDATE ... WHERE false`` locks the newest version of a row without writing
it. The target list is evaluated in order, so the end lock is taken before the usage locks,
as ``_record_ends`` takes them. Returns the present leaves whose rows it locked."""

_READ_BATCH: Final = text(
    f"""
    SELECT
        clock_timestamp() AS stamp,
        ARRAY(
            SELECT nextval(pg_get_serial_sequence('allocations', 'id'))
            FROM generate_series(1, CAST(:count AS integer))
        ) AS ids,
        CAST((
            SELECT coalesce(jsonb_agg(jsonb_build_array(e.workload, e.seq)), '[]')
            FROM ended_workloads AS e
            WHERE CAST(:ends AS boolean) AND e.workload = ANY(CAST(:workloads AS text[]))
        ) AS text) AS ended,
        CAST((
            SELECT coalesce(jsonb_agg(jsonb_build_array(a.request_id, a.workload)), '[]')
            FROM allocations AS a
            WHERE a.request_id = ANY(CAST(:request_ids AS text[]))
                AND a.workload = ANY(CAST(:workloads AS text[]))
        ) AS text) AS answered,
        CAST((
            SELECT coalesce(jsonb_agg(jsonb_build_array(
                a.id, a.workload, a.zone, a.quota_path, a.queue, a.requests, a.priority,
                a.state, a.preemptor
            )), '[]')
            FROM allocations AS a
            WHERE a.workload = ANY(CAST(:workloads AS text[])) AND a.state <> 'released'
        ) AS text) AS live,
        ARRAY(
            SELECT n.path FROM quota_nodes AS n
            WHERE n.path = ANY(CAST(:leaves AS text[])) AND {_PRESENT_LEAF}
        ) AS leaves,
        CAST((
            SELECT coalesce(jsonb_agg(jsonb_build_array(u.path, u.resource, u.used, u.max)), '[]')
            FROM quota_usage AS u
            JOIN unnest(CAST(:paths AS text[]), CAST(:resources AS text[])) AS k(path, resource)
                ON u.path = k.path AND u.resource = k.resource
        ) AS text) AS usage,
        CAST((
            SELECT coalesce(jsonb_agg(jsonb_build_array(n.path, n.attributes)), '[]')
            FROM quota_nodes AS n
            WHERE n.path = ANY(CAST(:prefixes AS text[]))
        ) AS text) AS nodes,
        EXISTS (
            SELECT 1 FROM quota_nodes AS n
            WHERE n.present AND n.attributes ?| CAST(:restricting AS text[])
        ) AS restricted
    """
)
"""Everything a batch decides on, read once its usage rows are locked: the transaction's
stamp, one allocation id per reservation (ids not used are skipped, as a rolled-back insert
skips them), ends (R8), earlier answers to the request ids, live allocations, present
leaves, the locked usage rows, the attributes of every node on the paths (zone caps, Z1)
and whether any node restricts lending (L1, L2)."""

_WRITE_BATCH: Final = text(
    f"""
    WITH created AS (
        INSERT INTO allocations (
            id, workload, zone, quota_path, queue, requests, priority, state,
            reserved_at, admitted_at, request_id
        )
        SELECT a.id, a.workload, a.zone, a.quota_path, a.queue, CAST(a.requests AS jsonb),
            a.priority, a.state, :stamp,
            CASE WHEN a.state = 'admitted' THEN CAST(:stamp AS timestamptz) END, a.request_id
        FROM unnest(
            CAST(:ids AS bigint[]), CAST(:workloads AS text[]), CAST(:zones AS text[]),
            CAST(:quotas AS text[]), CAST(:queues AS text[]), CAST(:requests AS text[]),
            CAST(:priorities AS bigint[]), CAST(:states AS text[]),
            CAST(:request_ids AS text[])
        ) AS a(id, workload, zone, quota_path, queue, requests, priority, state, request_id)
        ON CONFLICT (workload) WHERE state <> 'released' DO NOTHING
        RETURNING id
    ), counted AS (
        UPDATE quota_usage AS u SET used = k.used
        FROM unnest(
            CAST(:paths AS text[]), CAST(:resources AS text[]), CAST(:used AS bigint[])
        ) AS k(path, resource, used)
        WHERE u.path = k.path AND u.resource = k.resource
            AND (SELECT count(*) FROM created) = cardinality(CAST(:ids AS bigint[]))
        RETURNING 1
    ), announced AS (
        INSERT INTO outbox (event_id, subject, payload)
        SELECT o.event_id, o.subject, o.payload
        FROM unnest(
            CAST(:event_ids AS text[]), CAST(:subjects AS text[]), CAST(:payloads AS bytea[])
        ) WITH ORDINALITY AS o(event_id, subject, payload, position)
        WHERE (
            SELECT CASE WHEN count(*) = cardinality(CAST(:ids AS bigint[]))
                THEN CAST(pg_advisory_xact_lock({_OUTBOX_LOCK.text}) AS text) END
            FROM created
        ) = ''
        ORDER BY o.position
        ON CONFLICT (event_id) DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM created) AS created, (SELECT count(*) FROM counted) AS counted,
        (SELECT count(*) FROM announced) AS announced
    """
).bindparams(bindparam("stamp", type_=DateTime(timezone=True)))
"""A batch's grants in one statement: the new allocations (with the ids read before), the
usage of the locked rows (absolute values) and the outbox rows, in that order, the outbox rows
under ``_OUTBOX_LOCK`` (taken once every allocation is written, before the first row's id is
drawn: a grant waiting on a preemption's uncommitted hold of the same workload does not hold
it). When a
concurrent transaction committed a live allocation of one of the workloads first, nothing
but the other allocations is written and the caller replays the batch (``_RaceLost``)."""


@dataclass(slots=True)
class _BatchRead:
    """What ``_READ_BATCH`` read for a batch, decoded."""

    stamp: datetime
    ids: list[int]
    ended: dict[WorkloadKey, int]
    answered: dict[str | None, set[WorkloadKey]]
    live: dict[WorkloadKey, _Alloc]
    leaves: set[QuotaPath]
    usage: dict[_Key, tuple[int, int | None]]
    nodes: list[tuple[str, dict[str, Any]]]
    restricted: bool


def _batch_keys(reservations: Sequence[Reservation]) -> list[tuple[str, str, str]]:
    """(path, resource, leaf) of every usage row the batch's reservations would count on."""
    return sorted(
        {(p, r, item.quota) for item in reservations for p, r in _keys(item.quota, item.requests)}
    )


async def _lock_batch(
    conn: AsyncConnection, reservations: Sequence[Reservation], ends: bool
) -> set[QuotaPath]:
    """Run ``_LOCK_BATCH``: the present leaves of the batch whose usage rows are now locked."""
    keys = _batch_keys(reservations)
    row = (
        await conn.execute(
            _LOCK_BATCH,
            {
                "leaves": sorted({item.quota for item in reservations}),
                "paths": [p for p, _, _ in keys],
                "resources": [r for _, r, _ in keys],
                "of": [leaf for _, _, leaf in keys],
                "ends": ends,
            },
        )
    ).one()
    return {QuotaPath(p) for p in row.leaves}


async def _read_batch(
    conn: AsyncConnection,
    reservations: Sequence[Reservation],
    locked: set[QuotaPath],
    request_ids: Sequence[str] | None,
    ends: bool,
) -> _BatchRead:
    """Run ``_READ_BATCH`` for the batch whose usage rows of ``locked`` leaves are locked."""
    keys = sorted({(p, r) for p, r, leaf in _batch_keys(reservations) if leaf in locked})
    leaves = sorted({item.quota for item in reservations})
    row = (
        await conn.execute(
            _READ_BATCH,
            {
                "count": len(reservations),
                "ends": ends,
                "workloads": sorted({item.workload for item in reservations}),
                "request_ids": sorted(set(request_ids or ())),
                "leaves": leaves,
                "paths": [p for p, _ in keys],
                "resources": [r for _, r in keys],
                "prefixes": sorted({p for leaf in leaves for p in path_of(QuotaPath(leaf))}),
                "restricting": LENDING_KEYS,
            },
        )
    ).one()
    answered: dict[str | None, set[WorkloadKey]] = {}
    for request_id, workload in _decode(row.answered):
        answered.setdefault(request_id, set()).add(WorkloadKey(workload))
    return _BatchRead(
        stamp=row.stamp,
        ids=[int(i) for i in row.ids],
        ended={WorkloadKey(w): int(seq) for w, seq in _decode(row.ended)},
        answered=answered,
        live={WorkloadKey(raw[1]): _live_alloc(raw) for raw in _decode(row.live)},
        leaves={QuotaPath(p) for p in row.leaves},
        usage={(p, r): (int(used), high) for p, r, used, high in _decode(row.usage)},
        nodes=[(str(p), dict(a or {})) for p, a in _decode(row.nodes)],
        restricted=bool(row.restricted),
    )


def _decode(raw: str) -> list[list[Any]]:
    return msgspec.json.decode(raw, type=list[list[Any]])


def _live_alloc(raw: list[Any]) -> _Alloc:
    """A live allocation as ``_READ_BATCH`` lists it (no stamps: a retry check only)."""
    alloc_id, workload, zone, quota, queue, requests, priority, state, preemptor = raw
    return _Alloc(
        id=int(alloc_id),
        workload=WorkloadKey(workload),
        zone=Zone(zone),
        quota=QuotaPath(quota),
        queue=QueueName(queue),
        requests=_resources(requests),
        priority=int(priority),
        state=AllocationState(state),
        preemptor=None if preemptor is None else WorkloadKey(preemptor),
    )


async def _write_batch(
    conn: AsyncConnection,
    created: Sequence[_Move],
    ids: dict[WorkloadKey, int],
    usage: dict[_Key, tuple[int, int | None]],
    touched: set[_Key],
    outbox: Sequence[OutboxMessage],
    stamp: datetime,
) -> None:
    """Write a batch's new allocations, usage and outbox rows in one statement
    (``_WRITE_BATCH``), after checking every move against the core's transition table."""
    for move in created:
        _check(move.row.workload, move.source, move.target)
    counted = sorted(touched)
    row = (
        await conn.execute(
            _WRITE_BATCH,
            {
                "stamp": stamp,
                "ids": [ids[m.row.workload] for m in created],
                "workloads": [m.row.workload for m in created],
                "zones": [m.row.zone for m in created],
                "quotas": [m.row.quota for m in created],
                "queues": [m.row.queue for m in created],
                "requests": [msgspec.json.encode(m.row.requests).decode() for m in created],
                "priorities": [m.row.priority for m in created],
                "states": [m.target.value for m in created],
                "request_ids": [m.request_id for m in created],
                "paths": [p for p, _ in counted],
                "resources": [r for _, r in counted],
                "used": [usage[key][0] for key in counted],
                "event_ids": [m.event_id for m in outbox],
                "subjects": [m.subject for m in outbox],
                "payloads": [m.payload for m in outbox],
            },
        )
    ).one()
    if row.created != len(created):
        raise _RaceLost


__all__ = [
    "DEFAULT_STREAM",
    "AllocationState",
    "Change",
    "ClusterGone",
    "LedgerDecision",
    "LedgerError",
    "LedgerPermanentError",
    "LedgerRequestError",
    "LedgerStore",
    "LedgerTransientError",
    "LiveAllocation",
    "LogChange",
    "LogOutcome",
    "Observation",
    "OutboxBuilder",
    "OutboxMessage",
    "TreeUpdate",
    "check_reservations",
    "path_of",
]
