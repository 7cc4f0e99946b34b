"""A pure model of the ledger's allocation rules: the oracle of the protocol state machine.

What it does: keeps one allocation per admission (``admitted``, ``held``, ``preempting``,
``released``) and grants or refuses reservations and preemptions by the rules the ledger
implements (services/README.md, docs on admission rules): usage per node root..leaf, where a
preemption group (a held preemptor and its preempting victims) counts ``max(victims, hold)``;
reclaim conditions checked against its own rows (L1's ``usher.io/reclaim-within`` too); idle
guarantees a node keeps (L1 ``Never``, L2 ``usher.io/lending-limit``) never lent, by its own
arithmetic; a victim seen stopped is released and, with
its last co-victim gone, its preemptor admitted. A requeue for readiness (R10) turns an
admitted allocation into a victim that is its own preemptor (no hold), released the same way.
Every decision it makes goes to its outbox, which the test relays to the log.
What it must never do: import the real store or the engine (it is the independent judge the
engines are compared with), read a clock (time comes in as ``now``), or perform I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from schemas import (
    Admitted,
    Decision,
    Preempted,
    QueueName,
    QuotaNode,
    QuotaPath,
    Reason,
    ReleaseCause,
    Released,
    Requeued,
    WorkloadDeleted,
    WorkloadKey,
    Zone,
)
from schemas.events import ClusterEvent

WITHIN_QUOTA = "usher.io/within-quota"
MIN_RUNTIME = "usher.io/min-runtime-seconds"
ZONE_MIN = "usher.io/zone-min"
ZONE_MAX = "usher.io/zone-max"
RECLAIM_WITHIN = "usher.io/reclaim-within"
LENDING_LIMIT = "usher.io/lending-limit"
OWN_VICTIMS = "usher.io/reclaim-with-own-victims"
WHILE_BORROWING = "usher.io/preempt-while-borrowing"
WITHIN_QUOTA_REQUEST = "usher.io/within-quota-request"

ADMITTED = "admitted"
HELD = "held"
PREEMPTING = "preempting"
RELEASED = "released"

Usage = dict[QuotaPath, dict[str, int]]


@dataclass
class Message:
    """A decision or event; ``seq`` is its index on the log once it is there (None before)."""

    event: Decision | ClusterEvent
    seq: int | None = None
    time_ms: int = 0


@dataclass
class Allocation:
    """One admission of one workload, as a ledger row."""

    workload: WorkloadKey
    state: str
    leaf: QuotaPath
    queue: QueueName
    zone: Zone
    requests: dict[str, int]
    priority: int
    admitted_at: int | None
    preemptor: WorkloadKey | None = None
    started_by: Message | None = None
    """The ``Admitted`` of this admission (the watcher starts the pods once it is logged)."""
    ended_by: Message | None = None
    """The entry that tells an engine this admission stopped counting as admitted: the
    victim's ``Preempted``, or the ``WorkloadFinished``/``WorkloadDeleted`` that released it."""
    released_by: Message | None = None
    """The ``Released`` of this admission (the outbox orders it after its ``Admitted``)."""


@dataclass
class NodeRules:
    """What the ledger knows of one quota node."""

    min: dict[str, int]
    cap: dict[str, int]
    lower_priority: bool
    min_runtime_ms: int
    zone_min: dict[Zone, dict[str, int]] = field(default_factory=dict)
    """Its ``usher.io/zone-min`` (Z4); empty when it guarantees no zone."""
    zone_max: dict[Zone, dict[str, int]] = field(default_factory=dict)
    """Its ``usher.io/zone-max`` (Z1): a reservation over it is refused."""
    reclaim: str = "Any"
    """Its ``usher.io/reclaim-within`` (L1, inherited): whom its leaves reclaim from."""
    lends: dict[str, int] | None = None
    """Per resource, the most of its idle guarantee it lends (L2, inherited; ``Never``: 0 of
    every resource); None: all of it."""
    children: list[QuotaPath] = field(default_factory=list)
    policy: Policy = field(default_factory=lambda: Policy())
    """Its preemption policies P1-P3, inherited."""


@dataclass(frozen=True)
class Policy:
    """P1-P3 as the model reads them: own victims count toward the guarantee (P1); beyond
        the guarantee, other leaves' borrowers of lower priority up to a threshold (P2: None is
        Never, ``(threshold, borrowers only)`` with None for no threshold; borrowers only: the
    victim's leaf keeps its guarantee once it has left); only a request within ``min``
        preempts in its leaf unless P2 is on there (P3)."""

    own_victims: bool = False
    while_borrowing: tuple[int | None, bool] | None = None
    request_within_min: bool = False

    def below(self, attributes: dict[str, str]) -> Policy:
        """The policy of a child node with ``attributes`` (written well: the tree is valid)."""
        own = attributes.get(OWN_VICTIMS)
        borrowing = attributes.get(WHILE_BORROWING)
        request = attributes.get(WITHIN_QUOTA_REQUEST)
        taken = self.while_borrowing
        if borrowing == "Never":
            taken = None
        elif borrowing is not None:
            mode, _, threshold = borrowing.partition(":")
            taken = (int(threshold) if threshold else None, mode == "LowerPriorityBorrowersOnly")
        return Policy(
            own_victims=self.own_victims if own is None else own == "true",
            while_borrowing=taken,
            request_within_min=self.request_within_min
            if request is None
            else request == "WithinMin",
        )


@dataclass
class LedgerModel:
    """The ledger's rows and outbox, changed only by the operations below."""

    nodes: dict[QuotaPath, NodeRules]
    leaves: set[QuotaPath]
    rows: list[Allocation] = field(default_factory=list)
    live: dict[WorkloadKey, Allocation] = field(default_factory=dict)
    latest: dict[WorkloadKey, Allocation] = field(default_factory=dict)
    outbox: list[Message] = field(default_factory=list)
    gone: set[WorkloadKey] = field(default_factory=set)
    """Workloads seen finished or deleted: never granted again (a dequeuer that has not read
    the deletion yet may still ask; granting it would hold capacity nobody ever releases)."""

    @classmethod
    def of_tree(cls, root: QuotaNode, rate: Fraction) -> LedgerModel:
        nodes: dict[QuotaPath, NodeRules] = {}
        leaves: set[QuotaPath] = set()
        stack: list[tuple[QuotaNode, str, NodeRules | None]] = [(root, "", None)]
        while stack:
            node, parent, above = stack.pop()
            path = QuotaPath(f"{parent}/{node.name}" if parent else node.name)
            within = node.attributes.get(WITHIN_QUOTA)
            runtime = node.attributes.get(MIN_RUNTIME)
            rules = NodeRules(
                min=dict(node.min),
                cap={r: m * rate.numerator // rate.denominator for r, m in node.max.items()},
                lower_priority=(within == "LowerPriority")
                if within is not None
                else (above.lower_priority if above else False),
                min_runtime_ms=int(runtime) * 1000
                if runtime is not None
                else (above.min_runtime_ms if above else 0),
                zone_min=_zone_amounts(node.attributes.get(ZONE_MIN, "")),
                zone_max=_zone_amounts(node.attributes.get(ZONE_MAX, "")),
                reclaim=node.attributes.get(RECLAIM_WITHIN, above.reclaim if above else "Any"),
                lends=_amounts(node.attributes[LENDING_LIMIT])
                if LENDING_LIMIT in node.attributes
                else (above.lends if above else None),
                policy=(above.policy if above else Policy()).below(dict(node.attributes)),
            )
            nodes[path] = rules
            if parent:
                nodes[QuotaPath(parent)].children.append(path)
            if not node.children:
                leaves.add(path)
            stack.extend((child, path, rules) for child in node.children)
        return cls(nodes=nodes, leaves=leaves)

    # ------------------------------------------------------------------ accounting

    @staticmethod
    def path_of(leaf: QuotaPath) -> list[QuotaPath]:
        parts = leaf.split("/")
        return [QuotaPath("/".join(parts[: i + 1])) for i in range(len(parts))]

    def _on_path(self, leaf: QuotaPath, requests: dict[str, int]) -> Usage:
        return {node: dict(requests) for node in self.path_of(leaf)}

    def usage(self) -> Usage:
        """Admitted allocations, plus ``max(victims, hold)`` per preemption group."""
        used: Usage = {}
        victims: dict[WorkloadKey, list[Allocation]] = {}
        for row in self.live.values():
            if row.state == ADMITTED:
                _add(used, self._on_path(row.leaf, row.requests))
            elif row.state == PREEMPTING:
                assert row.preemptor is not None
                victims.setdefault(row.preemptor, []).append(row)
        for preemptor in sorted(victims):
            stopping: Usage = {}
            for row in victims[preemptor]:
                _add(stopping, self._on_path(row.leaf, row.requests))
            hold_row = self.live.get(preemptor)
            hold: Usage = {}
            if hold_row is not None and hold_row.state == HELD:
                hold = self._on_path(hold_row.leaf, hold_row.requests)
            _add(used, _max(stopping, hold))
        return _nonzero(used)

    def running_usage(self) -> Usage:
        """What may be running now: admitted allocations and victims not seen stopped."""
        used: Usage = {}
        for row in self.live.values():
            if row.state in (ADMITTED, PREEMPTING):
                _add(used, self._on_path(row.leaf, row.requests))
        return _nonzero(used)

    def claim(self, leaf: QuotaPath, zone: Zone | None = None) -> dict[str, int]:
        """What a leaf holds for itself: its admitted and held allocations (in ``zone`` only,
        when given: Z4)."""
        out: dict[str, int] = {}
        for row in self.live.values():
            if row.leaf == leaf and row.state in (ADMITTED, HELD) and zone in (None, row.zone):
                for resource, amount in row.requests.items():
                    out[resource] = out.get(resource, 0) + amount
        return out

    def over_cap(self, used: Usage) -> list[str]:
        return [
            f"{node} {resource}: {amount} > cap {self.nodes[node].cap[resource]}"
            for node, amounts in sorted(used.items())
            for resource, amount in sorted(amounts.items())
            if resource in self.nodes[node].cap and amount > self.nodes[node].cap[resource]
        ]

    def orphan_holds(self) -> list[WorkloadKey]:
        """Held preemptors with no victim left stopping (the ledger admits those at once)."""
        waiting = {r.preemptor for r in self.live.values() if r.state == PREEMPTING}
        return sorted(k for k, r in self.live.items() if r.state == HELD and k not in waiting)

    def granted(self) -> set[WorkloadKey]:
        """Workloads holding capacity for themselves: admitted or held."""
        return {k for k, row in self.live.items() if row.state in (ADMITTED, HELD)}

    # ------------------------------------------------------------------ requests

    def reserve(self, item: Admitted, now: int) -> Reason | None:
        """Grant (None) or refuse one reservation; a granted one is an outbox ``Admitted``."""
        if item.workload in self.gone:
            return _stale(f"{item.workload} was seen finished or deleted")
        current = self.live.get(item.workload)
        if current is not None:
            if current.state == PREEMPTING:
                return Reason(code="PreemptionInProgress", message=f"{item.workload} stopping")
            if current.leaf == item.quota:
                return None  # a repeated reservation: the grant (or hold) stands
            return Reason(code="AlreadyAdmitted", message=f"{item.workload} live elsewhere")
        if item.quota not in self.leaves:
            return Reason(code="UnknownQuota", message=f"{item.quota} is no leaf")
        used = self.usage()
        refusal = self._over(used, item.quota, item.requests) or self._over_zone(item)
        refusal = refusal or self._not_lent(used, item.quota, item.requests)
        if refusal is not None:
            return refusal
        row = self._insert(item, ADMITTED, now)
        row.started_by = Message(item)
        self.outbox.append(row.started_by)
        return None

    def preempt(self, preemptor: Admitted, victims: list[Preempted], now: int) -> Reason | None:
        """Carry out a reclaim (None) or refuse it, checking every rule on the model's rows."""
        if preemptor.workload in self.live or preemptor.workload in self.gone:
            return _stale(f"{preemptor.workload} has a live allocation or ended")
        keys = [v.workload for v in victims]
        if not keys or len(set(keys)) != len(keys):
            return _stale(f"victims {keys} empty or repeated")
        rows: list[Allocation] = []
        for key in keys:
            row = self.live.get(key)
            if row is None or row.state != ADMITTED:
                return _stale(f"victim {key} is not admitted ({row.state if row else 'none'})")
            rows.append(row)
        refusal = self._reclaim_refusal(preemptor, rows, now)
        if refusal is not None:
            return refusal
        used = self.usage()
        for row in rows:
            _add(used, self._on_path(row.leaf, row.requests), -1)
        refusal = self._over(used, preemptor.quota, preemptor.requests)
        refusal = refusal or self._not_lent(used, preemptor.quota, preemptor.requests)
        if refusal is not None:
            return refusal
        for row, decision in zip(rows, victims, strict=True):
            message = Message(decision)
            row.state, row.preemptor, row.ended_by = PREEMPTING, preemptor.workload, message
            self.outbox.append(message)
        self._insert(preemptor, HELD, None)
        return None

    def requeue(self, item: Requeued) -> Reason | None:
        """Carry out a requeue for readiness (None) or refuse it: admitted on that quota only."""
        row = self.live.get(item.workload)
        if row is not None and row.leaf == item.quota:
            if row.state == PREEMPTING and row.preemptor == item.workload:
                return None  # a repeated request: already requeued
            if row.state == ADMITTED:
                message = Message(item)
                row.state, row.preemptor, row.ended_by = PREEMPTING, item.workload, message
                self.outbox.append(message)
                return None
        state = row.state if row is not None else "none"
        return _stale(f"requeue of {item.workload}: it is {state}")

    def _reclaim_refusal(
        self, preemptor: Admitted, rows: list[Allocation], now: int
    ) -> Reason | None:
        leaf = preemptor.quota
        rules = self.nodes[leaf]
        claim = self.claim(leaf)
        wanted = {r: a for r, a in preemptor.requests.items() if a > 0}
        policy = rules.policy
        # P1: the guarantee is judged with the preemptor's own victims set aside.
        own = [row for row in rows if row.leaf == leaf] if policy.own_victims else []
        for row in own:
            for resource, amount in row.requests.items():
                claim[resource] = claim.get(resource, 0) - amount
        within = all(claim.get(r, 0) + a <= rules.min.get(r, 0) for r, a in wanted.items())
        # Z4: in its zone, also within its guarantee there on the resources it names.
        zone = preemptor.zone
        owned = rules.zone_min.get(zone)
        if owned is not None:
            mine = self.claim(leaf, zone)
            for row in own:
                if row.zone == zone:
                    for resource, amount in row.requests.items():
                        mine[resource] = mine.get(resource, 0) - amount
            within = within and all(
                mine.get(r, 0) + a <= owned[r] for r, a in wanted.items() if r in owned
            )
        claims: dict[QuotaPath, dict[str, int]] = {}
        zone_claims: dict[QuotaPath, dict[str, int]] = {}
        for row in rows:
            assert row.admitted_at is not None
            if now - row.admitted_at < self.nodes[row.leaf].min_runtime_ms:
                return _stale(f"victim {row.workload} is within its minimum runtime")
            if row.leaf == leaf:
                if not (rules.lower_priority and row.priority < preemptor.priority):
                    return _stale(f"victim {row.workload} is not of lower priority")
                beyond = any(a > rules.min.get(r, 0) for r, a in wanted.items())
                if policy.request_within_min and policy.while_borrowing is None and beyond:
                    return _stale(f"{preemptor.workload} asks more than the min of {leaf} (P3)")
                continue
            if rules.reclaim == "Never" or (
                rules.reclaim == "LowerPriority" and row.priority >= preemptor.priority
            ):
                return _stale(f"victim {row.workload} is spared by reclaim-within {rules.reclaim}")
            taken = policy.while_borrowing
            held = claims.setdefault(row.leaf, self.claim(row.leaf))
            minimum = self.nodes[row.leaf].min
            # P2 borrowers only: what the victim's leaf borrows beyond its own guarantee.
            lender_keeps = all(
                held.get(r, 0) - row.requests.get(r, 0) >= minimum.get(r, 0) for r in wanted
            )
            if not within and not (
                taken is not None
                and row.priority < preemptor.priority
                and (taken[0] is None or row.priority <= taken[0])
                and (lender_keeps or not taken[1])
            ):
                return _stale(f"{preemptor.workload} is not within the min of {leaf}")
            in_zone = zone_claims.setdefault(row.leaf, self.claim(row.leaf, zone))
            lent = self.nodes[row.leaf].zone_min.get(zone, {})
            zone_borrowing = (
                owned is not None
                and row.zone == zone
                and any(r in lent and in_zone.get(r, 0) > lent[r] for r in wanted)
            )
            if not zone_borrowing and not any(held.get(r, 0) > minimum.get(r, 0) for r in wanted):
                return _stale(f"victim {row.workload} is not borrowing what is asked")
            for resource, amount in row.requests.items():
                held[resource] = held.get(resource, 0) - amount
                if row.zone == zone:
                    in_zone[resource] = in_zone.get(resource, 0) - amount
        return None

    def _over_zone(self, item: Admitted) -> Reason | None:
        """Z1: a node capping the item's zone whose admitted and held allocations there (victims
        stopping aside) leave no room for it; a preemption's hold is not checked (the ledger's
        rule too)."""
        for node in self.path_of(item.quota):
            cap = self.nodes[node].zone_max.get(item.zone, {})
            below = [
                row
                for row in self.live.values()
                if row.zone == item.zone
                and row.state in (ADMITTED, HELD)
                and node in self.path_of(row.leaf)
            ]
            for resource, limit in sorted(cap.items()):
                used = sum(row.requests.get(resource, 0) for row in below)
                if used + item.requests.get(resource, 0) > limit:
                    return Reason(
                        code="ZoneQuotaExceeded",
                        message=f"{node} {resource} in zone {item.zone}: {used} > {limit}",
                    )
        return None

    def _kept(self, used: Usage, node: QuotaPath, resource: str) -> int:
        """L1, L2: what ``node``'s subtree keeps of its idle guarantee of ``resource``."""
        rules = self.nodes[node]
        idle = max(0, rules.min.get(resource, 0) - used.get(node, {}).get(resource, 0))
        lends = 0 if rules.reclaim == "Never" else (rules.lends or {}).get(resource)
        own = 0 if lends is None else max(0, idle - lends)  # a resource not named: lent whole
        below = sum(self._kept(used, child, resource) for child in rules.children)
        return max(own, min(below, idle))

    def _not_lent(self, used: Usage, leaf: QuotaPath, requests: dict[str, int]) -> Reason | None:
        """L1, L2: a node of the path where ``requests`` would take idle guarantee that the
        subtrees beside the path below it keep."""
        path = self.path_of(leaf)
        beside: dict[str, int] = {}
        for depth in range(len(path) - 1, -1, -1):
            node = path[depth]
            mine = path[depth + 1] if depth + 1 < len(path) else None
            for resource in requests:
                beside[resource] = beside.get(resource, 0) + sum(
                    self._kept(used, child, resource)
                    for child in self.nodes[node].children
                    if child != mine
                )
            cap = self.nodes[node].cap
            for resource, amount in sorted(requests.items()):
                have = used.get(node, {}).get(resource, 0)
                if amount and resource in cap and have + amount + beside[resource] > cap[resource]:
                    return Reason(
                        code="GuaranteeNotLent",
                        message=f"{node} {resource} {have} + {amount} + {beside[resource]} kept",
                    )
        return None

    def _over(self, used: Usage, leaf: QuotaPath, requests: dict[str, int]) -> Reason | None:
        for node in self.path_of(leaf):
            cap = self.nodes[node].cap
            for resource, amount in sorted(requests.items()):
                have = used.get(node, {}).get(resource, 0)
                if resource in cap and have + amount > cap[resource]:
                    return Reason(
                        code="QuotaExceeded",
                        message=f"{node} {resource} {have} + {amount} > {cap[resource]}",
                        node=node,
                        resource=resource,
                        used=have,
                        requested=amount,
                        limit=cap[resource],
                    )
        return None

    def _insert(self, item: Admitted, state: str, now: int | None) -> Allocation:
        row = Allocation(
            workload=item.workload,
            state=state,
            leaf=item.quota,
            queue=item.queue,
            zone=item.zone,
            requests={r: a for r, a in item.requests.items() if a > 0},
            priority=item.priority,
            admitted_at=now,
        )
        self.rows.append(row)
        self.live[item.workload] = row
        self.latest[item.workload] = row
        return row

    # ------------------------------------------------------------------ cluster events

    def stopped(self, workload: WorkloadKey, now: int) -> None:
        """A suspended observation after its preemption: a stopping victim is released."""
        row = self.live.get(workload)
        if row is not None and row.state == PREEMPTING:
            self._release_victim(row, "Preempted", now)

    def ended(self, workload: WorkloadKey, event: Message, now: int) -> None:
        """``WorkloadFinished`` or ``WorkloadDeleted`` (on the log as ``event``)."""
        deleted = isinstance(event.event, WorkloadDeleted)
        self.gone.add(workload)
        row = self.live.get(workload)
        if row is None:
            return
        if row.state == PREEMPTING:
            self._release_victim(row, "Deleted" if deleted else "Preempted", now)
            return
        row.ended_by = event
        self._release(row, "Deleted" if deleted else "Finished")

    def _release_victim(self, row: Allocation, cause: ReleaseCause, now: int) -> None:
        self._release(row, cause)
        preemptor = row.preemptor
        hold = self.live.get(preemptor) if preemptor is not None else None
        if hold is None or hold.state != HELD:
            return
        if any(r.state == PREEMPTING and r.preemptor == preemptor for r in self.live.values()):
            return
        hold.state, hold.admitted_at = ADMITTED, now
        hold.started_by = Message(
            Admitted(
                workload=hold.workload,
                queue=hold.queue,
                quota=hold.leaf,
                zone=hold.zone,
                requests=dict(hold.requests),
                priority=hold.priority,
            )
        )
        self.outbox.append(hold.started_by)

    def _release(self, row: Allocation, cause: ReleaseCause) -> None:
        row.state = RELEASED
        del self.live[row.workload]
        row.released_by = Message(
            Released(
                workload=row.workload, quota=row.leaf, requests=dict(row.requests), cause=cause
            )
        )
        self.outbox.append(row.released_by)


def _stale(detail: str) -> Reason:
    return Reason(code="StaleView", message=f"ledger: {detail}")


def _add(into: Usage, amounts: Usage, sign: int = 1) -> None:
    for node, resources in amounts.items():
        target = into.setdefault(node, {})
        for resource, amount in resources.items():
            target[resource] = target.get(resource, 0) + sign * amount


def _max(left: Usage, right: Usage) -> Usage:
    out: Usage = {}
    for node in set(left) | set(right):
        a, b = left.get(node, {}), right.get(node, {})
        out[node] = {r: max(a.get(r, 0), b.get(r, 0)) for r in set(a) | set(b)}
    return out


def _nonzero(used: Usage) -> Usage:
    out: Usage = {}
    for node, amounts in used.items():
        kept = {r: a for r, a in sorted(amounts.items()) if a != 0}
        if kept:
            out[node] = kept
    return out


def _amounts(text: str) -> dict[str, int]:
    """``usher.io/lending-limit`` as the model's trees write it (``cpu=10``, whole cores only,
    canonical millicores)."""
    out: dict[str, int] = {}
    for pair in text.split(","):
        resource, _, cores = pair.partition("=")
        out[resource.strip()] = int(cores) * 1000
    return out


def _zone_amounts(text: str) -> dict[Zone, dict[str, int]]:
    """``usher.io/zone-min`` or ``zone-max`` as the model's trees write them (``zone-1: cpu=30;
    zone-2: cpu=5``, whole cores only, canonical millicores); the engine parses the full syntax
    itself."""
    out: dict[Zone, dict[str, int]] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        zone, _, pairs = item.partition(":")
        amounts = out.setdefault(Zone(zone.strip()), {})
        for pair in filter(None, (p.strip() for p in pairs.split(","))):
            resource, _, cores = pair.partition("=")
            assert resource.strip() == "cpu", "the model's trees guarantee cpu only"
            amounts["cpu"] = int(cores) * 1000
    return out
