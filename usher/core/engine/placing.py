"""Where each workload stands: nodes and zones served, queues, admission bookkeeping.

What it does: folds node and zone-served events, classifies a workload into its queue or outside
(unmapped, inadmissible), admits and un-admits it in the indexes and the accounting.
What it must never do: choose whom to admit (the pass does) or fold other events.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Sequence

from schemas import (
    NodeName,
    NodeObserved,
    NodeRemoved,
    QuotaPath,
    Reason,
    TopologyPin,
    WorkloadKey,
    Zone,
)
from usher.core.engine.accounting import pod_fits
from usher.core.engine.books import Books
from usher.core.model import reasons
from usher.core.state.durable import NodeCapacity
from usher.core.state.indexed import (
    ADMITTED,
    INADMISSIBLE,
    PENDING,
    UNMAPPED,
    Job,
    QuotaNodeInfo,
    Shape,
    remove_sorted,
)
from usher.core.tree.zone_burst import tree_accepted, try_order
from usher.core.values.labels import topology_labels


class Placing(Books):
    """Where each workload stands: nodes and zones served, queues, admission bookkeeping."""

    def observe_node(self, event: NodeObserved) -> None:
        labels = topology_labels(event.labels)  # bounded, whatever the log carries (TP1)
        record = NodeCapacity(dict(event.allocatable), event.unschedulable, labels)
        nodes = self.state.nodes.setdefault(event.zone, {})
        if nodes.get(event.node) == record:
            return
        nodes[event.node] = record
        self._nodes_changed(event.zone)

    def remove_node(self, event: NodeRemoved) -> None:
        nodes = self.state.nodes.get(event.zone, {})
        if event.node not in nodes:
            return
        del nodes[event.node]
        if not nodes:
            del self.state.nodes[event.zone]
        self._nodes_changed(event.zone)

    def fold_served(self, zone: Zone) -> None:
        if self.state.served is None:
            self.state.served = {}
        if zone not in self.state.served:
            self.state.served[zone] = None
            self.state.version += 1  # its workloads may be decided (and reclaim for) from now on
            # A queue's first candidate may be one of that zone's from now on.
            self.dirty.update(self.state.tree.leaves)

    def serves(self, zone: Zone) -> bool:
        """Whether some dequeuer decides for ``zone``: announced, or one of this engine's own
        (a dequeuer serves its zone before its own announcement is back from the log)."""
        if self.state.served is None or zone in self.state.served:
            return True
        return self.config.zones is not None and zone in self.config.zones

    def decides(self, zone: Zone) -> bool:
        """Whether a pass of this engine decides for ``zone``: one of its zones, and served
        (an engine deciding for every zone, as people's views do, skips unserved ones)."""
        return self.config.decides_for(zone) and self.serves(zone)

    def served_zones(self) -> list[Zone]:
        """The zones dequeuers announced, sorted (empty when none ever did)."""
        return sorted(self.state.served or {})

    def stopping_for(self, key: WorkloadKey) -> WorkloadKey | None:
        """The preemptor of ``key`` while it is a victim not seen stopped yet (R7), else None."""
        return self.stopping.get(key)

    def _nodes_changed(self, zone: Zone) -> None:
        self.zone_cap[zone] = zone_capacity(self.state.nodes.get(zone, {}))
        self.pod_fit_cache = {k: v for k, v in self.pod_fit_cache.items() if k[0] != zone}
        # Inadmissibility depends on the nodes: examine this zone's waiting workloads again.
        for job in list(self.state.jobs.values()):
            if job.zone == zone and job.state in (PENDING, INADMISSIBLE):
                self.unplace(job)
                self.classify(job)
        self.dirty.update(self.state.tree.leaves)
        self.state.version += 1

    def unplace(self, job: Job) -> None:
        """Take a waiting workload out of its queue or the outside set."""
        if job.state == PENDING and job.leaf is not None and job.leaf in self.leaf_queues:
            self.note_shapes(job.leaf, self.leaf_queues[job.leaf].remove(job))
        self.outside.pop(job.key, None)

    def classify(self, job: Job) -> None:
        """Map a waiting workload to its leaf and decide pending / inadmissible / unmapped."""
        leaf, unmapped = self._map(job)
        if leaf is None:
            assert unmapped is not None
            job.leaf = None
            self._accept_tree_zones(job, None)
            job.state = UNMAPPED
            self.outside[job.key] = None
            self._announce_if_new(job, unmapped)
            return
        job.leaf = leaf
        self._accept_tree_zones(job, leaf)
        never = self._never_fits(job, self.state.tree.nodes[leaf])
        if never is None and job.readiness is not None and job.readiness.exhausted:
            never = job.readiness.last  # its last attempt timed out (R10)
        if never is not None:
            job.state = INADMISSIBLE
            self.outside[job.key] = None
            self._announce_if_new(job, never)
            return
        job.state = PENDING
        job.announced = None
        self.note_shapes(leaf, self.leaf_queues[leaf].add(job))

    def _accept_tree_zones(self, job: Job, leaf: QuotaPath | None) -> None:
        """Z3: a waiting job listing no zones of its own accepts those its leaf's
        ``usher.io/zones`` lists from its own zone on (none outside the tree)."""
        if job.listed:
            return
        default = self.state.tree.nodes[leaf].default_zones if leaf is not None else ()
        job.zones = tree_accepted(default, job.zone) if default else ()

    def zone_order(self, job: Job) -> Sequence[Zone]:
        """The order ``job``'s accepted zones are tried in: burst zones last (Z3)."""
        return try_order(job.zones, self.state.tree.burst)

    def note_shapes(self, leaf: QuotaPath, changed: bool) -> None:
        # The shape groups of a leaf feed the pass's pruning; any change makes it stale.
        self.dirty.add(leaf)

    def _map(self, job: Job) -> tuple[QuotaPath | None, Reason | None]:
        if self.state.tree.root is None:
            return None, reasons.no_tree()
        if job.quota_name is not None:
            path = self.state.tree.by_name.get(job.quota_name)
            if path is None or not self.state.tree.nodes[path].is_leaf:
                return None, reasons.unknown_quota(job.quota_name)
            return path, None
        leaf = self.state.tree.leaf_of_namespace.get(job.namespace)
        if leaf is None:
            return None, reasons.no_leaf(job.namespace)
        return leaf, None

    def _announce_if_new(self, job: Job, reason: Reason) -> None:
        if job.announced is None or (job.announced.code, job.announced.message) != (
            reason.code,
            reason.message,
        ):
            self.state.announce[job.key] = None
        job.announced = reason

    def _never_fits(self, job: Job, leaf: QuotaNodeInfo) -> Reason | None:
        """Why ``job`` could not fit even in an empty cluster, or None (section 3): not even
        with the fewest pods it may start with (R11)."""
        rate = self.config.oversell_rate
        for info in reversed(leaf.ancestors):
            for resource, amount in job.fit_shape:
                cap = info.cap.get(resource)
                if cap is not None and amount > cap:
                    return reasons.exceeds_max(
                        info.path, resource, amount, info.max[resource], cap, rate
                    )
        ask = job.topology
        if ask is not None and ask.required and ask.level not in leaf.topology_levels:
            return reasons.topology_level_unknown(ask.level, leaf.topology_levels)  # TP1
        first = self._never_fits_nodes(job)
        if first is None or not job.zones:
            return first
        # Z2: inadmissible only when no accepted zone's nodes could ever hold it.
        for zone in job.zones[1:]:
            home, job.zone = job.zone, zone
            try:
                elsewhere = self._never_fits_nodes(job)
            finally:
                job.zone = home
            if elsewhere is None:
                return None
        return first

    def _never_fits_nodes(self, job: Job) -> Reason | None:
        """Why no set of ``job``'s zone's nodes could ever hold it, or None (section 3)."""
        nodes = self.state.nodes.get(job.zone)
        if not nodes:
            return None
        for pod in job.pods:
            if not any(pod_fits(pod, nodes[n].allocatable) for n in sorted(nodes)):
                return self._pod_too_large(job, pod, nodes)
        totals: dict[str, int] = {}
        for name in sorted(nodes):
            for resource, amount in nodes[name].allocatable.items():
                totals[resource] = totals.get(resource, 0) + amount
        for resource, amount in job.fit_shape:
            if amount > totals.get(resource, 0):
                return reasons.zone_total_exceeded(
                    job.zone, resource, amount, totals.get(resource, 0)
                )
        return None

    def _pod_too_large(self, job: Job, pod: Shape, nodes: dict[NodeName, NodeCapacity]) -> Reason:
        for resource, amount in pod:
            largest = max(nodes[n].allocatable.get(resource, 0) for n in sorted(nodes))
            if amount > largest:
                return reasons.pod_too_large(job.zone, resource, amount, largest)
        # Every resource fits some node, but no single node has all of them at once.
        return reasons.pod_too_large(job.zone, pod[0][0], pod[0][1], 0)

    def admit(
        self,
        job: Job,
        quota: QuotaPath,
        shape: Shape,
        *,
        in_pass: bool = False,
        pods: int | None = None,
        pin: TopologyPin | None = None,
    ) -> None:
        """Record ``job`` as admitted on ``quota`` (counts as used at once).

        ``pods``: a partial admission's pods (R11), all of them when None.

        ``pin``: the topology domain its pods are pinned to (TP1), whose room it takes.

        ``in_pass``: admitted by the running pass, so not a reclaim candidate before it ends
        (R6); it joins its leaf's candidate list then, and no reclaim walks past it meanwhile.
        """
        self.state.seq += 1
        job.state = ADMITTED
        job.admitted_ms = self.state.now
        job.admit_seq = self.state.seq
        job.used_path = quota
        job.used_shape = shape
        job.pin = pin
        job.announced = None
        self.account(quota, shape, job.zone)
        job.refresh_victim_key()
        if in_pass:
            self.pass_admitted.add(job.key)
        else:
            insort(self.leaf_admitted.setdefault(quota, []), job.victim_key)
        runtime = self.min_runtime(quota)
        if runtime > 0:
            heapq.heappush(self.state.wakeups, (job.admitted_ms + runtime, job.admit_seq, job.key))
        # A pass's own admission is only proposed: its deadline runs from the ledger's grant
        # on the log (before it, the watcher has not even started the pods). Scenarios have
        # no ledger: there the admission is the grant.
        granted = not in_pass or self.config.instant_release
        self.arm_readiness(job, self.readiness_of(quota), pods, granted=granted)
        self.state.version += 1

    def unadmit(self, job: Job, *, held: bool = True) -> None:
        """Free an admitted workload's usage; the caller decides where it goes next.

        ``held`` False: the admission was only proposed (the ledger refused it), so it held
        nothing and no budget books it (B1)."""
        assert job.used_path is not None
        if held:
            self.book_budgets(job)
            self.book_fair(job)
        self.unaccount(job.used_path, job.used_shape, job.zone)
        self.forget_admitted(job)
        self.state.preemptors.pop(job.key, None)
        self.unready.pop(job.key, None)
        self.grown.pop(job.key, None)
        job.grown = None
        job.used_path = None
        job.used_shape = ()
        job.pin = None
        self.back_to_first_zone(job)
        job.state = UNMAPPED  # out of every place until the caller classifies or finishes it
        self.state.version += 1

    @staticmethod
    def back_to_first_zone(job: Job) -> None:
        """Out of its admission: a job accepting several zones waits in its first again, whose
        dequeuer owns it (Z2); the fallback is chosen afresh at its next admission."""
        if job.zones:
            job.zone = job.zones[0]

    def decides_some_zone(self, job: Job) -> bool:
        """Whether a pass of this engine decides for the job: its zone, or, while it waits,
        one of the zones it accepts (each accepted zone's dequeuer offers it, Z2)."""
        if self.decides(job.zone):
            return True
        return job.state != ADMITTED and any(self.decides(zone) for zone in job.zones)

    def forget_admitted(self, job: Job) -> None:
        assert job.used_path is not None
        self.pass_admitted.discard(job.key)
        admitted = self.leaf_admitted.get(job.used_path)
        if admitted is not None:
            remove_sorted(admitted, job.victim_key)
            if not admitted:
                del self.leaf_admitted[job.used_path]

    def reprioritise_admitted(self, job: Job, priority: int) -> None:
        """An admitted workload's priority changed: keep the reclaim order right."""
        self.forget_admitted(job)
        job.priority = priority
        job.refresh_sort_key()
        job.refresh_victim_key()
        assert job.used_path is not None
        insort(self.leaf_admitted.setdefault(job.used_path, []), job.victim_key)


def zone_capacity(nodes: dict[NodeName, NodeCapacity]) -> dict[str, int]:
    """What a zone's schedulable nodes allocate, summed in node-name order."""
    total: dict[str, int] = {}
    for name in sorted(nodes):
        record = nodes[name]
        if record.unschedulable:
            continue
        for resource, amount in record.allocatable.items():
            total[resource] = total.get(resource, 0) + amount
    return total
