"""Why a job does not fit now: the quota and zone shortfalls, as reasons with numbers.

What it does: says which quota node or zone a job falls short in, and who holds the room.
What it must never do: change any state.
"""

from __future__ import annotations

from schemas import (
    QuotaPath,
    Reason,
    WorkloadKey,
    Zone,
)
from usher.core.engine.stops import Stops
from usher.core.model import reasons
from usher.core.rules import topology
from usher.core.rules.arbitration import first_shortfall, quota_exceeded
from usher.core.rules.lending import lending_refused
from usher.core.state.indexed import (
    ADMITTED,
    Job,
)
from usher.core.tree import zone_quota
from usher.core.tree.zone_fallback import passed_over, zone_choice
from usher.core.values.labels import level_noun


class Shortfalls(Stops):
    """Why a job does not fit now: the quota and zone shortfalls, as reasons with numbers."""

    def quota_shortfall(self, job: Job) -> Reason | None:
        assert job.leaf is not None
        # Nearest node first: the leaf or department a person can act on.
        short = first_shortfall(self.tree.nodes[job.leaf].ancestors, job.shape)
        if short is None:
            kept = self.lending_shortfall(job.leaf, job.shape)  # L1, L2
            return None if kept is None else lending_refused(kept)
        numbers = (short.node, short.resource, short.used, short.requested, short.cap)
        holder = self.holder_on(short.node, job.key)
        if holder is not None:
            return reasons.held_for_preemptor(*numbers, holder)
        # Full only until victims already chosen have stopped: say so, not "exceeded".
        stopping = self.tree.nodes[short.node].residual.get(short.resource, 0)
        if stopping > 0 and short.used - stopping + short.requested <= short.cap:
            return reasons.victims_still_stopping(*numbers, stopping)
        return quota_exceeded(short, self.config.oversell_rate)

    def holder_on(self, path: QuotaPath, asking: WorkloadKey) -> WorkloadKey | None:
        for key in sorted(self.state.held):
            holder = self.state.jobs[key]
            if (
                key != asking
                and holder.used_path is not None
                and any(n.path == path for n in self.nodes_on_path(holder.used_path))
            ):
                return key
        return None

    def zone_shortfall(self, job: Job) -> Reason | None:
        """What the zone lacks for the whole request; for a waiting job accepting several
        zones, what each of them lacks (none: the first that fits admits it, Z2)."""
        if not job.zones or job.state == ADMITTED:
            return self._shortfall_here(job)
        order = self.zone_order(job)
        chosen, passed = zone_choice(order, lambda zone: self.shortfall_in_zone(job, zone))
        return None if chosen is not None else passed_over(None, passed)

    def shortfall_in_zone(self, job: Job, zone: Zone) -> Reason | None:
        """What ``zone`` lacks for ``job`` as if it waited there (Z2)."""
        home, job.zone = job.zone, zone
        try:
            return self._shortfall_here(job)
        finally:
            job.zone = home

    def _shortfall_here(self, job: Job) -> Reason | None:
        if self.state.tree.zone_capped:
            assert job.leaf is not None
            nodes = self.nodes_on_path(job.leaf)
            short = zone_quota.zone_shortfall(nodes, job.zone, job.shape)
            if short is not None:
                return zone_quota.zone_quota_exceeded(short)  # Z1
        if job.zone not in self.state.nodes:
            return None
        cap = self.zone_cap.get(job.zone, {})
        used = self.state.zone_used.get(job.zone, {})
        for resource, amount in job.shape:
            have = used.get(resource, 0)
            if have + amount > cap.get(resource, 0):
                return reasons.zone_capacity(job.zone, resource, have, amount, cap.get(resource, 0))
        if not all(self.pod_fits_schedulable(job.zone, pod) for pod in job.pods):
            return reasons.no_node_fits(job.zone)
        return self.topology_shortfall(job)

    def topology_shortfall(self, job: Job) -> Reason | None:
        """Why no domain of its required level holds the whole gang now (TP1), or None."""
        choice = self.topology_choice(job)
        ask = job.topology
        if choice.fits or ask is None:
            return None
        best = choice.best
        pod = job.pods[0] if len(job.pods) == 1 else None
        return reasons.topology_no_fit(
            job.zone,
            level_noun(ask.level),
            job.shape,
            job.pod_count,
            pod,
            None if best is None else best.domain,
            {} if best is None else best.free,
            0 if best is None or pod is None else topology.slots(best, pod),
        )
