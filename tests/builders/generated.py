"""Hypothesis strategies of engine inputs: random quota trees, streams of create/finish/delete/
pass operations and engine configurations, and the walks over a tree the properties need.
Generates values only; never runs an engine."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from hypothesis import strategies as st

from schemas import QuotaNode, QuotaPath
from tests.builders.events import CORE
from usher.core.model.config import EngineConfig


@st.composite
def trees(draw: st.DrawFn) -> QuotaNode:
    total = draw(st.integers(20, 80))
    departments = draw(st.integers(1, 3))
    deep = draw(st.booleans())
    children = []
    left = total
    leaf_number = 0
    for d in range(departments):
        d_min = left if d == departments - 1 else draw(st.integers(0, left))
        left -= d_min
        d_max = draw(st.integers(max(d_min, 1), total * 3 // 2))
        if deep:
            kids = []
            k_left = d_min
            count = draw(st.integers(1, 3))
            for k in range(count):
                k_min = k_left if k == count - 1 else draw(st.integers(0, k_left))
                k_left -= k_min
                k_max = draw(st.integers(max(k_min, 1), total * 3 // 2))
                kids.append(
                    QuotaNode(
                        name=f"L{leaf_number}",
                        min={"cpu": k_min * CORE},
                        max={"cpu": k_max * CORE},
                        namespaces=[f"ns{leaf_number}"],
                    )
                )
                leaf_number += 1
            children.append(
                QuotaNode(
                    name=f"D{d}",
                    min={"cpu": d_min * CORE},
                    max={"cpu": d_max * CORE},
                    children=kids,
                )
            )
        else:
            children.append(
                QuotaNode(
                    name=f"L{leaf_number}",
                    min={"cpu": d_min * CORE},
                    max={"cpu": d_max * CORE},
                    namespaces=[f"ns{leaf_number}"],
                )
            )
            leaf_number += 1
    return QuotaNode(
        name="root", min={"cpu": total * CORE}, max={"cpu": total * CORE}, children=children
    )


@dataclass(frozen=True)
class Op:
    kind: str  # create | finish | delete | pass
    index: int
    cores: int = 0
    priority: int = 0
    zone: str = "default"


creates = st.builds(
    Op,
    kind=st.just("create"),
    index=st.integers(0, 8),
    cores=st.integers(1, 25),
    priority=st.integers(0, 3),
    zone=st.sampled_from(["default", "z2"]),
)
ops = st.lists(
    st.one_of(
        creates,
        creates,
        creates,
        st.builds(Op, kind=st.sampled_from(["finish", "delete"]), index=st.integers(0, 60)),
        st.builds(Op, kind=st.just("pass"), index=st.just(0)),
    ),
    min_size=8,
    max_size=40,
)
configs = st.builds(
    EngineConfig,
    policy=st.sampled_from(["Round", "Block"]),
    oversell_rate=st.sampled_from([Fraction(1), Fraction(3, 2), Fraction(2)]),
    within_quota=st.sampled_from(["Never", "LowerPriority"]),
    min_runtime_ms=st.sampled_from([0, 3000]),
    # The rules as scenarios state them (docs/admission-rules.md): no ledger here, so a
    # victim stops and a finished workload releases at once. The running system's rule (R7:
    # usage leaves with the ledger's Released) is driven by tests/core/test_protocol_machine.py.
    instant_release=st.just(True),
)


def leaves_of(node: QuotaNode) -> list[QuotaNode]:
    if not node.children:
        return [node]
    return [leaf for child in node.children for leaf in leaves_of(child)]


def paths_of(node: QuotaNode, prefix: str = "") -> dict[QuotaPath, QuotaNode]:
    path = QuotaPath(f"{prefix}/{node.name}" if prefix else node.name)
    out = {path: node}
    for child in node.children:
        out.update(paths_of(child, path))
    return out
