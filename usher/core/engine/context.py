"""The engine context: everything the parts of a pass read and change, as one object.

What it does: ``EngineContext`` is the engine's data with the folding, accounting, books, placing,
stops, shortfalls and offers over it (each a module below), plus ``rebuild_derived``; the
pass, reclaim search, starvation, backfill and queries take it, and the facade extends it.
What it must never do: import the pass, the queries or the facade (they import it).
"""

from __future__ import annotations

from schemas import (
    QueueName,
    QuotaPath,
    WorkloadKey,
)
from usher.core.engine.accounting import shift_amounts
from usher.core.engine.folding import Folding
from usher.core.engine.placing import zone_capacity
from usher.core.gates import chain
from usher.core.gates.view import Refusal
from usher.core.state.indexed import (
    ADMITTED,
    INADMISSIBLE,
    PENDING,
    UNMAPPED,
    Job,
    Queue,
    SortKey,
    VictimKey,
)


class EngineContext(Folding):
    """The engine context: everything the parts of a pass read and change, as one object."""

    def rebuild_derived(self) -> None:
        """Recompute everything besides ``state`` from it (after a snapshot is restored).

        The queues, the per-leaf reclaim candidates, the outside set, the users of each
        priority class, zone capacity, each stopping victim's preemptor and every residual of
        the stop groups; shapes are interned again. The pruning data is recomputed lazily by
        the next pass, as after a new tree. ValueError if the state contradicts itself.
        """
        state = self.state
        tree = state.tree
        self.leaf_queues = {
            leaf: Queue(tree.nodes[leaf].queue or QueueName(leaf), leaf) for leaf in tree.leaves
        }
        self._rebuild_job_indexes()
        self.zone_cap = {zone: zone_capacity(nodes) for zone, nodes in state.nodes.items()}
        for info in tree.nodes.values():
            info.residual = {}
        self.recount_zone_quota()
        self.stopping = {}
        for preemptor, group in state.stops.items():
            if not group.victims:
                raise ValueError(f"stop group of {preemptor} has no victims")
            for victim, (_, shape, _) in group.victims.items():
                self.stopping[victim] = preemptor
                self.intern(shape)
            if group.hold is not None:
                self.intern(group.hold[1])
            # ``used`` already counts the residuals: only their split is recomputed.
            group.residual = self.node_residual(group)
            group.zone_residual = self.zone_residual(group)
            for path, amounts in group.residual.items():
                shift_amounts(tree.nodes[path].residual, amounts, 1)
        for _, shape, _ in state.lingering.values():
            self.intern(shape)
        for _, shape, _, _ in state.reclaim_failed:
            self.intern(shape)
        self.pod_fit_cache = {}
        self.pass_admitted = set()
        self.share_cache = {}
        self.reset_pruning()
        self.refresh_holds()
        # Every leaf is dirty already, and the version is the snapshot's: no refresh's bump.
        self.budget_stops = self.spent_budget_stops()
        self.budget_seen = {}
        self.unready = {
            key: job.readiness.deadline_ms
            for key, job in state.jobs.items()
            if job.state == ADMITTED and job.readiness is not None and job.readiness.deadline_ms
        }
        self.grown = {
            key: None for key, job in state.jobs.items() if job.state == ADMITTED and job.grown
        }

    def _rebuild_job_indexes(self) -> None:
        queues = self.leaf_queues
        pending: dict[QuotaPath, list[Job]] = {}
        admitted: dict[QuotaPath, list[VictimKey]] = {}
        class_users: dict[str, dict[WorkloadKey, None]] = {}
        outside: dict[WorkloadKey, None] = {}
        intern = self.intern
        for key, job in self.state.jobs.items():
            intern(job.shape)
            job.fit_shape = intern(job.fit_shape)
            intern(job.used_shape)
            for pod in job.pods:
                intern(pod)
            if job.priority_class is not None:
                class_users.setdefault(job.priority_class, {})[key] = None
            state = job.state
            if state == PENDING:
                if job.leaf is None or job.leaf not in queues:
                    raise ValueError(f"pending workload {key} has no queue ({job.leaf})")
                pending.setdefault(job.leaf, []).append(job)
            elif state in (UNMAPPED, INADMISSIBLE):
                outside[key] = None
            elif state == ADMITTED and job.used_path is not None:
                admitted.setdefault(job.used_path, []).append(job.victim_key)
        for leaf, members in pending.items():
            # One sort instead of an insort per workload: the same lists, in O(n log n).
            members.sort(key=_sort_key)
            queues[leaf].fill(members)
        for keys in admitted.values():
            keys.sort()
        self.leaf_admitted = admitted
        self.class_users = class_users
        self.outside = outside

    def head(self, leaf: QuotaPath) -> WorkloadKey | None:
        """The head of ``leaf``'s queue: its first workload a pass would not pass over (the
        gates a pass asks, ``chain.passing_over``), the one that, under Block, holds the rest."""
        queue = self.leaf_queues.get(leaf)
        if queue is None:
            return None
        gates = chain.passing_over(self, leaf)
        for _, _, key in queue.entries:
            if chain.passed_over(self, self.state.jobs[key], gates) is None:
                return key
        return None

    def refusal_of(self, key: WorkloadKey) -> Refusal | None:
        """The first admission gate that shuts a pending workload now (the one list every
        place asks, ``usher.core.gates.chain``), budgets brought up to ``state.now`` first (no
        pass may have run at this instant); None for any other workload, or when none shuts."""
        job = self.state.jobs.get(key)
        if job is None or job.state != PENDING or job.leaf is None:
            return None
        self.refresh_budgets()
        return chain.refusal(self, job)


def _sort_key(job: Job) -> SortKey:
    return job.sort_key
