"""Accounting of quota and zones: what each node and zone uses, and what fits.

What it does: adds and removes usage on the quota path and per zone, says whether a shape fits a
leaf's quota (taking no idle guarantee another node keeps, L1 L2), a zone's quota and its nodes,
computes a node's dominant share and a leaf's readiness policy and minimum runtime.
What it must never do: decide who is admitted or preempted (the pass does), or fold events.
"""

from __future__ import annotations

import heapq
from math import gcd

import msgspec

from schemas import (
    QuotaPath,
    TopologyPin,
    WorkloadKey,
    Zone,
)
from usher.core.engine.data import EngineData, Share
from usher.core.model.config import ReadinessPolicy
from usher.core.rules import readiness, topology
from usher.core.rules.lending import LendingShortfall, lending_shortfall
from usher.core.rules.reclaim import within_guarantee
from usher.core.state.indexed import (
    ADMITTED,
    Job,
    QuotaNodeInfo,
    Shape,
)
from usher.core.tree import zone_quota

_ZERO_SHARE: Share = (0, 0.0, 0, 1)
_INFINITE_SHARE: Share = (1, 0.0, 0, 1)


class Accounting(EngineData):
    """Accounting of quota and zones: what each node and zone uses, and what fits."""

    def nodes_on_path(self, path: QuotaPath) -> tuple[QuotaNodeInfo, ...]:
        info = self.state.tree.nodes.get(path)
        if info is not None:
            return info.ancestors
        # A vanished leaf: its usage counts on the prefixes of its path that still exist.
        parts = path.split("/")
        found = []
        for depth in range(1, len(parts) + 1):
            node = self.state.tree.nodes.get(QuotaPath("/".join(parts[:depth])))
            if node is not None:
                found.append(node)
        return tuple(found)

    def account_quota(self, path: QuotaPath, shape: Shape, sign: int = 1) -> None:
        for info in self.nodes_on_path(path):
            used = info.used
            for resource, amount in shape:
                used[resource] = used.get(resource, 0) + sign * amount
            self.share_cache.pop(info.path, None)
        if path in self.state.tree.nodes:
            self.dirty.add(path)

    def account(self, path: QuotaPath, shape: Shape, zone: Zone) -> None:
        self.account_quota(path, shape)
        self.account_zone_quota(path, shape, zone)
        zone_used = self.state.zone_used.setdefault(zone, {})
        for resource, amount in shape:
            zone_used[resource] = zone_used.get(resource, 0) + amount

    def move_zone_usage(self, shape: Shape, source: Zone, target: Zone) -> None:
        before = self.state.zone_used.setdefault(source, {})
        after = self.state.zone_used.setdefault(target, {})
        for resource, amount in shape:
            before[resource] = before.get(resource, 0) - amount
            after[resource] = after.get(resource, 0) + amount
        self.state.version += 1

    def account_zone_quota(self, path: QuotaPath, shape: Shape, zone: Zone, sign: int = 1) -> None:
        """Count ``shape`` in ``zone`` on the nodes of ``path`` that cap (Z1) or guarantee
        (Z4) that zone."""
        if self.state.tree.zone_counted:
            zone_quota.count_in_counted_zone(self.nodes_on_path(path), zone, shape, sign)

    def recount_zone_quota(self) -> None:
        """Per-zone usage from scratch (a snapshot stores none): every admission, hold and
        lingering usage counts in its zone on its path's capping or guaranteeing nodes (Z1,
        Z4)."""
        for info in self.state.tree.nodes.values():
            info.zone_used = {}
        for job in self.state.jobs.values():
            if job.used_path is not None:
                self.account_zone_quota(job.used_path, job.used_shape, job.zone)
        for path, shape, zone in self.state.lingering.values():
            self.account_zone_quota(path, shape, zone)

    def unaccount(self, path: QuotaPath, shape: Shape, zone: Zone) -> None:
        self.account_quota(path, shape, -1)
        self.account_zone_quota(path, shape, zone, -1)
        zone_used = self.state.zone_used.setdefault(zone, {})
        for resource, amount in shape:
            zone_used[resource] = zone_used.get(resource, 0) - amount

    def arm_readiness(
        self, job: Job, policy: ReadinessPolicy, pods: int | None, *, granted: bool
    ) -> None:
        """A new admission: with a ready timeout, its deadline starts now if ``granted``, else
        at the ledger's ``Admitted`` (``_restart_ready_deadline``) (R10).

        The wakeup carries ``-admit_seq`` (min-runtime ones carry ``admit_seq``, backoff ends
        0), so ``next_wakeup`` tells which condition each entry waits for.
        """
        if policy.timeout_ms <= 0:
            if job.readiness is not None:
                job.readiness = msgspec.structs.replace(
                    job.readiness, deadline_ms=0, not_before_ms=0
                )
            return
        job.readiness = readiness.armed(
            job.readiness,
            job.admitted_ms,
            policy.timeout_ms,
            job.pod_count if pods is None else pods,
        )
        if not granted:
            job.readiness = msgspec.structs.replace(job.readiness, deadline_ms=0)
            return
        deadline = job.readiness.deadline_ms
        self.unready[job.key] = deadline
        heapq.heappush(self.state.wakeups, (deadline, -job.admit_seq, job.key))

    def readiness_of(self, path: QuotaPath) -> ReadinessPolicy:
        info = self.state.tree.nodes.get(path)
        return info.readiness if info is not None else self.config.readiness

    def min_runtime(self, path: QuotaPath) -> int:
        info = self.state.tree.nodes.get(path)
        return info.min_runtime_ms if info is not None else self.config.min_runtime_ms

    def fits_quota(self, leaf: QuotaPath, shape: Shape) -> bool:
        for info in self.state.tree.nodes[leaf].ancestors:
            cap = info.cap
            used = info.used
            for resource, amount in shape:
                limit = cap.get(resource)
                if limit is not None and used.get(resource, 0) + amount > limit:
                    return False
        return not self.state.tree.reserving or self.lending_shortfall(leaf, shape) is None

    def lending_shortfall(self, leaf: QuotaPath, shape: Shape) -> LendingShortfall | None:
        """Where ``shape`` would take idle guarantee other nodes keep (L1, L2); None when no
        node restricts lending (every tree that sets neither attribute) or it takes none."""
        tree = self.state.tree
        if not tree.reserving:
            return None
        return lending_shortfall(tree.nodes[leaf].ancestors, tree.nodes, tree.reserving, shape)

    def fits_zone(self, job: Job, shape: Shape | None = None) -> bool:
        """Whether the zone has room for ``shape`` (the whole request when None): within every
        cap the tree sets in that zone (Z1) and within its nodes' capacity."""
        if self.state.tree.zone_capped and not self.fits_zone_quota(job, shape):
            return False
        if job.zone not in self.state.nodes:
            return True
        cap = self.zone_cap.get(job.zone, {})
        used = self.state.zone_used.get(job.zone, {})
        for resource, amount in job.shape if shape is None else shape:
            if used.get(resource, 0) + amount > cap.get(resource, 0):
                return False
        if not all(self.pod_fits_schedulable(job.zone, pod) for pod in job.pods):
            return False
        return job.topology is None or self.topology_choice(job, shape).fits  # TP1

    def topology_choice(self, job: Job, shape: Shape | None = None) -> topology.Choice:
        """Where ``job`` (``shape``: the whole request when None) fits in one domain of its
        zone for its topology ask, or the best domain when it does not (TP1). A job asking
        none, or in a zone whose nodes are unknown, fits anywhere (section 3)."""
        ask = job.topology
        nodes = self.state.nodes.get(job.zone)
        if ask is None or not nodes or job.leaf is None or job.leaf not in self.state.tree.nodes:
            return topology.Choice(fits=True)
        levels = self.state.tree.nodes[job.leaf].topology_levels
        request = job.shape if shape is None else shape
        return topology.choose(ask, levels, nodes, self.pinned_in(job), job.pods, request)

    def pinned_in(self, job: Job) -> list[tuple[TopologyPin, Shape]]:
        """The pinned admissions of ``job``'s zone but its own, in admission order (TP1)."""
        return self.pinned_in_zone(job.zone, but=job.key)

    def pinned_in_zone(
        self, zone: Zone, but: WorkloadKey | None = None
    ) -> list[tuple[TopologyPin, Shape]]:
        """The pinned admissions of ``zone`` (all but ``but``), in admission order (TP1)."""
        found = [
            (other.admit_seq, other.pin, other.used_shape)
            for other in self.state.jobs.values()
            if other.pin is not None
            and other.state == ADMITTED
            and other.zone == zone
            and other.key != but
        ]
        return [(pin, shape) for _, pin, shape in sorted(found, key=lambda entry: entry[0])]

    def fits_zone_quota(self, job: Job, shape: Shape | None = None) -> bool:
        assert job.leaf is not None
        request = job.shape if shape is None else shape
        return zone_quota.fits_zone_caps(self.nodes_on_path(job.leaf), job.zone, request)

    def pod_fits_schedulable(self, zone: Zone, pod: Shape) -> bool:
        if zone not in self.state.nodes:
            return True  # nodes of the zone unknown: no node constraint (section 3)
        cached = self.pod_fit_cache.get((zone, pod))
        if cached is None:
            nodes = self.state.nodes[zone]
            cached = int(
                any(
                    not nodes[n].unschedulable and pod_fits(pod, nodes[n].allocatable)
                    for n in sorted(nodes)
                )
            )
            self.pod_fit_cache[(zone, pod)] = cached
        return cached == 1

    def fits(self, job: Job) -> bool:
        assert job.leaf is not None
        return self.fits_quota(job.leaf, job.shape) and self.fits_zone(job)

    @staticmethod
    def within_min(info: QuotaNodeInfo, shape: Shape) -> bool:
        # Against the claim (used minus stopping victims' residual): R7.
        return within_guarantee(info.used, info.residual, info.min, shape)

    def share(self, info: QuotaNodeInfo) -> Share:
        """Dominant share now: max over resources of used/min (section 4, criterion 2)."""
        cached = self.share_cache.get(info.path)
        if cached is not None:
            return cached
        share = _ZERO_SHARE
        # The largest used/min, compared exactly by cross-multiplying (integers are faster
        # than Fractions here, on the pass's hot path), kept as a reduced fraction.
        best_used, best_min = 0, 1
        for resource in sorted(info.used):
            used = info.used[resource]
            if used <= 0:
                continue
            minimum = info.min.get(resource, 0)
            if minimum <= 0:
                share = _INFINITE_SHARE
                break
            if used * best_min > best_used * minimum:
                best_used, best_min = used, minimum
                common = gcd(used, minimum)
                share = (0, used / minimum, used // common, minimum // common)
        self.share_cache[info.path] = share
        return share

    def shift_node(self, path: QuotaPath, amounts: dict[str, int], sign: int) -> None:
        info = self.state.tree.nodes.get(path)
        if info is None:
            return  # the node vanished with a tree change: its usage went with it
        shift_amounts(info.used, amounts, sign)
        shift_amounts(info.residual, amounts, sign)
        self.share_cache.pop(path, None)
        if info.is_leaf:
            self.dirty.add(path)


def pod_fits(pod: Shape, allocatable: dict[str, int]) -> bool:
    return all(amount <= allocatable.get(resource, 0) for resource, amount in pod)


def shift_amounts(into: dict[str, int], amounts: dict[str, int], sign: int) -> None:
    for resource, amount in amounts.items():
        into[resource] = into.get(resource, 0) + sign * amount
