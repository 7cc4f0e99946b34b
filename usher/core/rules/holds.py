"""Holds and drains of quota nodes (docs/admission-rules.md R14, R15): which are in force.

What it does: ``HoldRecord`` is one hold or drain in force on a node, from an operator's order
on the log (``NodeHeld``, lifted by ``NodeResumed``) or from the node's tree attributes
(``usher.io/hold``, ``usher.io/drain-grace-seconds``, ``usher.io/hold-reason``);
``tree_holds`` reads the attributes of a new tree (a drain's grace counts from the first tree
that said so), ``in_force`` merges the two sources per node, ``held_leaves`` says which leaves
sit below a node in force (the nearest one wins), ``resolve_target`` turns what an operator
typed (a path, a node name or a queue name) into a quota path, and ``check_order`` refuses a
bad order naming the field.
What it must never do: read a clock (time comes in as ``now``), decide admissions or
preemptions (the engine does, R14/R15), or perform I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from schemas import (
    FieldError,
    HoldAction,
    HoldMode,
    Millis,
    NodeHeld,
    NodeResumed,
    QuotaNode,
    QuotaPath,
    Reason,
)
from usher.core.model import reasons
from usher.core.tree.quota_tree import iter_nodes, leaf_queue_name, path_nodes
from usher.core.values.registry import DRAIN_GRACE, HOLD, HOLD_REASON

TREE_HOLDER: Final = "the quota tree"
"""Who holds a node whose tree attribute says so: whoever applied the tree (Kubernetes' own
audit log knows; the tree does not)."""

_MODE_OF_ATTRIBUTE: Final[dict[str, HoldMode]] = {"hold": "Hold", "drain": "Drain"}


class HoldRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One hold or drain in force on a node."""

    node: QuotaPath
    mode: HoldMode
    grace_ms: int = 0
    by: str
    reason: str = ""
    since_ms: int
    """When it took effect; a drain preempts at ``since_ms + grace_ms``."""

    def pending_reason(self) -> Reason:
        """What a workload waiting below it says (R14)."""
        return reasons.held(self.node, self.mode, self.by, self.since_ms, self.reason)

    def drain_reason(self) -> Reason:
        """What a workload it preempts says (R15)."""
        return reasons.drained(self.node, self.by, self.since_ms, self.grace_ms, self.reason)

    @property
    def drain_at_ms(self) -> int | None:
        """When the running work below it is preempted (R15); None for a plain hold."""
        return self.since_ms + self.grace_ms if self.mode == "Drain" else None


def from_event(event: NodeHeld) -> HoldRecord:
    """The record of an operator's order (R14/R15)."""
    return HoldRecord(
        node=event.node,
        mode=event.mode,
        grace_ms=event.grace_seconds * 1000,
        by=event.by,
        reason=event.reason,
        since_ms=event.at_ms,
    )


def tree_holds(
    root: QuotaNode, before: Mapping[QuotaPath, HoldRecord], now: Millis
) -> dict[QuotaPath, HoldRecord]:
    """The holds a tree's attributes put in force, by node path.

    A node that was already held the same way by the previous tree keeps its ``since``: a
    tree applied again for another reason does not restart a drain's grace.
    """
    out: dict[QuotaPath, HoldRecord] = {}
    for path, node, _ in iter_nodes(root):
        mode = _MODE_OF_ATTRIBUTE.get(HOLD.read(node.attributes) or "")
        if mode is None:
            continue
        grace = (DRAIN_GRACE.read(node.attributes) or 0) * 1000
        record = HoldRecord(
            node=path,
            mode=mode,
            grace_ms=grace if mode == "Drain" else 0,
            by=TREE_HOLDER,
            reason=HOLD_REASON.read(node.attributes) or "",
            since_ms=now,
        )
        kept = before.get(path)
        if kept is not None and (kept.mode, kept.grace_ms) == (record.mode, record.grace_ms):
            record = msgspec.structs.replace(record, since_ms=kept.since_ms)
        out[path] = record
    return out


def in_force(
    ordered: Mapping[QuotaPath, HoldRecord], from_tree: Mapping[QuotaPath, HoldRecord]
) -> dict[QuotaPath, HoldRecord]:
    """Per node, the hold that governs it: a drain over a hold (it does more), of two drains
    the one preempting first, of two holds the operator's (it names a person)."""
    out: dict[QuotaPath, HoldRecord] = {}
    for path in sorted(ordered.keys() | from_tree.keys()):
        candidates = [r for r in (ordered.get(path), from_tree.get(path)) if r is not None]
        out[path] = min(candidates, key=_strength)
    return out


def _strength(record: HoldRecord) -> tuple[int, int]:
    drain_at = record.drain_at_ms
    return (0, drain_at) if drain_at is not None else (1, 0)


def held_leaves(
    holds: Mapping[QuotaPath, HoldRecord], leaves: Iterable[QuotaPath]
) -> dict[QuotaPath, HoldRecord]:
    """Each leaf below (or at) a node in force -> the hold nearest to it (R14)."""
    if not holds:
        return {}
    out: dict[QuotaPath, HoldRecord] = {}
    for leaf in leaves:
        record = hold_over(holds, leaf)
        if record is not None:
            out[leaf] = record
    return out


def hold_over(holds: Mapping[QuotaPath, HoldRecord], path: QuotaPath) -> HoldRecord | None:
    """The hold in force nearest to ``path`` on its way to the root, or None."""
    for node in reversed(path_nodes(path)):
        record = holds.get(node)
        if record is not None:
            return record
    return None


def drains_due(holds: Mapping[QuotaPath, HoldRecord], now: int) -> list[HoldRecord]:
    """Drains whose grace has run out at ``now``, by node path (R15)."""
    return [
        r
        for _, r in sorted(holds.items())
        if (drain_at := r.drain_at_ms) is not None and drain_at <= now
    ]


def next_drain(holds: Mapping[QuotaPath, HoldRecord], now: int) -> int | None:
    """The next instant after ``now`` a drain's grace runs out (a pass runs then), or None."""
    ahead = [at for r in holds.values() if (at := r.drain_at_ms) is not None and at > now]
    return min(ahead) if ahead else None


def resolve_target(root: QuotaNode | None, target: str) -> QuotaPath | None:
    """The quota path ``target`` names: a path (``root/research``), a node name or a leaf's
    queue name; None when it names nothing in the tree."""
    if root is None:
        return None
    for path, node, _ in iter_nodes(root):
        if target in (path, node.name) or (
            not node.children and target == leaf_queue_name(path, node)
        ):
            return path
    return None


def branch_tree(branch: list[tuple[str, dict[str, str]]]) -> QuotaNode | None:
    """A tree of only the nodes root..target, each ``(name, attributes)`` root first: enough
    to judge an order on ``target`` by path (what the ledger keeps of the tree)."""
    node: QuotaNode | None = None
    for name, attributes in reversed(branch):
        node = QuotaNode(
            name=name, attributes=attributes, children=[node] if node is not None else []
        )
    return node


def default_grace_seconds(root: QuotaNode | None, path: QuotaPath) -> int:
    """A drain's grace when the order names none: the node's ``usher.io/drain-grace-seconds``
    (inherited down the tree), else 0."""
    if root is None:
        return 0
    branch: list[QuotaNode] = []
    wanted = set(path_nodes(path))
    for node_path, node, _ in iter_nodes(root):
        if node_path in wanted:
            branch.append(node)
    for node in reversed(branch):
        if DRAIN_GRACE.key in node.attributes:
            return DRAIN_GRACE.read(node.attributes) or 0
    return 0


class HoldOrder(msgspec.Struct, frozen=True, kw_only=True):
    """An operator's order as its owner judges it: what, on which node, by whom and why."""

    action: HoldAction
    target: str
    """A quota path, a node name or a leaf's queue name."""
    by: str
    reason: str = ""
    grace_seconds: int | None = None
    """Drain only; None: the node's ``usher.io/drain-grace-seconds`` (inherited), else 0."""


def carry_out(
    order: HoldOrder,
    root: QuotaNode | None,
    ordered: Mapping[QuotaPath, HoldRecord] | None,
    now: Millis,
) -> NodeHeld | NodeResumed | list[FieldError]:
    """The event that records ``order`` at ``now``, or every reason to refuse it (each
    naming the order's field): what the ledger records and a scenario plays (R14/R15).
    ``ordered`` None: the orders in force are not known here (a resume is not checked)."""
    path, errors = check_order(root, order.action, order.target, order.grace_seconds, ordered)
    if path is None:
        return errors
    if order.action == "Resume":
        return NodeResumed(node=path, by=order.by, reason=order.reason, at_ms=now)
    grace = 0
    if order.action == "Drain":
        grace = (
            order.grace_seconds
            if order.grace_seconds is not None
            else default_grace_seconds(root, path)
        )
    return NodeHeld(
        node=path,
        mode=order.action,
        grace_seconds=grace,
        by=order.by,
        reason=order.reason,
        at_ms=now,
    )


def check_order(
    root: QuotaNode | None,
    action: HoldAction,
    target: str,
    grace_seconds: int | None,
    ordered: Mapping[QuotaPath, HoldRecord] | None,
) -> tuple[QuotaPath | None, list[FieldError]]:
    """The node an order names, or the errors refusing it, each naming its field."""
    errors: list[FieldError] = []
    path = resolve_target(root, target)
    if path is None:
        message = (
            "no quota tree is in force"
            if root is None
            else f"{target!r} names no node, path or queue of the quota tree in force"
        )
        errors.append(FieldError(path="target", code="unknown-node", message=message))
    elif action == "Resume" and ordered is not None and path not in ordered:
        message = f"{path} is not held by an order (a tree attribute is lifted by the tree)"
        errors.append(FieldError(path="target", code="not-held", message=message))
    if grace_seconds is not None:
        if action != "Drain":
            message = "grace applies to drain only"
            errors.append(FieldError(path="grace_seconds", code="unexpected", message=message))
        elif grace_seconds < 0:
            message = f"grace must be a whole number of seconds >= 0, got {grace_seconds}"
            errors.append(FieldError(path="grace_seconds", code="invalid-grace", message=message))
    return (path if not errors else None), errors
