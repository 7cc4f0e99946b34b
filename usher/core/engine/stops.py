"""Victims stopping: stop groups, their residuals, holds of preemptors, lingering work.

What it does: records each victim stopping for its preemptor, keeps the residual a stop group still
holds per node and zone, holds room for a preemptor, and keeps released work lingering.
What it must never do: choose victims (``reclaim_search`` does) or decide anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from schemas import (
    QuotaPath,
    Reason,
    WorkloadKey,
    Zone,
)
from usher.core.engine.accounting import shift_amounts
from usher.core.engine.placing import Placing
from usher.core.state.indexed import (
    ADMITTED,
    PENDING,
    UNMAPPED,
    Job,
    Placement,
    Shape,
    StopGroup,
)

_K = TypeVar("_K", QuotaPath, Zone)


class Stops(Placing):
    """Victims stopping: stop groups, their residuals, holds of preemptors, lingering work."""

    def stopping_on(self, key: WorkloadKey) -> tuple[QuotaPath, Zone] | None:
        """Where a victim not seen stopped yet still runs (R7); None if it is no such victim.

        Its attempt was admitted and its pods run until they are seen stopped: one that fails
        meanwhile (OOM-killed while its preemption is on its way) failed an admitted attempt,
        and its job is over for Kubernetes, so it needs its ``Retried`` (R12) like any other.
        """
        preemptor = self.stopping.get(key)
        group = self.state.stops.get(preemptor) if preemptor is not None else None
        where = group.victims.get(key) if group is not None else None
        return (where[0], where[2]) if where is not None else None

    def linger(self, job: Job) -> None:
        """Out of the workload, still counted: its usage waits for the ledger's ``Released``."""
        assert job.used_path is not None
        if job.state == ADMITTED:
            self.book_on_close(job)
            self.forget_admitted(job)
            job.state = UNMAPPED  # out of every place until the caller finishes or deletes it
        self.state.preemptors.pop(job.key, None)
        self.state.held.pop(job.key, None)
        self.state.lingering[job.key] = (job.used_path, job.used_shape, job.zone)
        self.unready.pop(job.key, None)
        self.grown.pop(job.key, None)
        job.grown = None
        job.used_path = None
        job.used_shape = ()
        self.back_to_first_zone(job)
        job.held = False  # a held workload stays where it waits; the caller takes it out
        self.state.version += 1

    def end_linger(self, key: WorkloadKey) -> bool:
        where = self.state.lingering.pop(key, None)
        if where is None:
            return False
        self.unaccount(*where)
        self.state.version += 1
        return True

    def hold_for(self, key: WorkloadKey) -> None:
        """A reclaim decided elsewhere: the freed capacity is held for its preemptor.

        The ledger holds it the same way until the preemptor's ``Admitted`` arrives, so no
        engine offers that capacity to anyone else meanwhile.
        """
        job = self.state.jobs.get(key)
        if job is None or job.held or job.state != PENDING or job.leaf is None:
            return
        job.used_path = job.leaf
        job.used_shape = job.shape
        job.held = True
        self.state.held[key] = None
        self.account(job.leaf, job.shape, job.zone)
        self.state.version += 1

    def place_pending_again(self, job: Job) -> None:
        """Put a held preemptor back in its queue (its usage stays counted as the hold)."""
        job.state = UNMAPPED  # so that classify sees it out of every place
        self.classify(job)
        if job.state != PENDING:
            self.drop_hold(job)
        elif job.leaf is not None:
            self.dirty.add(job.leaf)

    def drop_hold(self, job: Job) -> None:
        if job.used_path is not None:
            self.unaccount(job.used_path, job.used_shape, job.zone)
        job.used_path = None
        job.held = False
        self.state.held.pop(job.key, None)
        self.state.version += 1

    def set_note(self, job: Job, reason: Reason) -> None:
        # A note explains the workload until the next pass looks at it again.
        job.note = reason
        job.note_pass = self.state.passes

    def begin_stop(self, preemptor: WorkloadKey, victim: WorkloadKey, where: Placement) -> None:
        """``victim`` was preempted for ``preemptor``: its usage counts until it is seen
        stopped, with the preemptor's hold carved out of it (ADMISSION-RULES R7)."""
        if self.config.instant_release:
            return
        self.end_stop(victim)  # one group per victim, whatever a log says (hostile input)
        group = self.state.stops.get(preemptor)
        if group is None:
            holder = self.state.jobs.get(preemptor)
            hold: Placement | None = None
            if holder is not None and holder.used_path is not None:
                hold = (holder.used_path, holder.used_shape, holder.zone)
            group = self.state.stops[preemptor] = StopGroup(preemptor, hold)
        self.stopping[victim] = preemptor
        self._regroup(group, lambda: group.victims.__setitem__(victim, where))

    def end_stop(self, victim: WorkloadKey) -> None:
        """``victim`` was seen stopped (or its preemption undone): its residual leaves."""
        preemptor = self.stopping.pop(victim, None)
        if preemptor is None:
            return
        group = self.state.stops[preemptor]
        self._regroup(group, lambda: group.victims.pop(victim, None))

    def preemptor_gone(self, preemptor: WorkloadKey) -> None:
        """The preemptor finished or was deleted: its victims count whole until they stop."""
        group = self.state.stops.get(preemptor)
        if group is not None and group.hold is not None:

            def drop() -> None:
                group.hold = None

            self._regroup(group, drop)

    def _regroup(self, group: StopGroup, change: Callable[[], object]) -> None:
        """Apply ``change`` to a group, moving its residual from the old to the new value."""
        self.account_residual(group, {}, {})
        change()
        if not group.victims:
            del self.state.stops[group.preemptor]
            return
        self.account_residual(group, self.node_residual(group), self.zone_residual(group))

    def node_residual(self, group: StopGroup) -> dict[QuotaPath, dict[str, int]]:
        victims: dict[QuotaPath, dict[str, int]] = {}
        for key in sorted(group.victims):
            path, shape, _ = group.victims[key]
            for info in self.nodes_on_path(path):
                _add_shape(victims.setdefault(info.path, {}), shape)
        hold: dict[QuotaPath, dict[str, int]] = {}
        if group.hold is not None:
            for info in self.nodes_on_path(group.hold[0]):
                _add_shape(hold.setdefault(info.path, {}), group.hold[1])
        return _excess(victims, hold)

    def zone_residual(self, group: StopGroup) -> dict[Zone, dict[str, int]]:
        victims: dict[Zone, dict[str, int]] = {}
        for key in sorted(group.victims):
            _, shape, zone = group.victims[key]
            _add_shape(victims.setdefault(zone, {}), shape)
        hold: dict[Zone, dict[str, int]] = {}
        if group.hold is not None:
            _add_shape(hold.setdefault(group.hold[2], {}), group.hold[1])
        return _excess(victims, hold)

    def account_residual(
        self,
        group: StopGroup,
        nodes: dict[QuotaPath, dict[str, int]],
        zones: dict[Zone, dict[str, int]],
    ) -> None:
        """Replace what ``group`` counts beyond its hold by ``nodes`` and ``zones``."""
        for path, amounts in group.residual.items():
            self.shift_node(path, amounts, -1)
        for zone, amounts in group.zone_residual.items():
            shift_amounts(self.state.zone_used.setdefault(zone, {}), amounts, -1)
        group.residual, group.zone_residual = nodes, zones
        for path, amounts in nodes.items():
            self.shift_node(path, amounts, 1)
        for zone, amounts in zones.items():
            shift_amounts(self.state.zone_used.setdefault(zone, {}), amounts, 1)
        self.state.version += 1


def _add_shape(into: dict[str, int], shape: Shape) -> None:
    for resource, amount in shape:
        into[resource] = into.get(resource, 0) + amount


def _excess(
    victims: dict[_K, dict[str, int]], hold: dict[_K, dict[str, int]]
) -> dict[_K, dict[str, int]]:
    """Per key and resource, what the victims hold above the hold (``max(v, h) - h``)."""
    out: dict[_K, dict[str, int]] = {}
    for key in sorted(victims, key=str):
        held = hold.get(key, {})
        extra = {
            r: a - held.get(r, 0) for r, a in sorted(victims[key].items()) if a > held.get(r, 0)
        }
        if extra:
            out[key] = extra
    return out
