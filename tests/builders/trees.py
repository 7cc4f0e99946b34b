"""Builders of quota trees as the engine receives them (``QuotaNode``, in millicores): the
two-leaf tree most tests use and its named variants. Pure values; never touches a server."""

from __future__ import annotations

from collections.abc import Sequence

from schemas import QuotaNode
from tests.builders.events import cpu


def two_leaf_tree(
    a_namespaces: Sequence[str] = ("a1",),
    b_namespaces: Sequence[str] = ("b1",),
    *,
    names: tuple[str, str] = ("A", "B"),
    a_min: int = 60,
    a_max: int = 100,
    b_min: int = 40,
    b_max: int = 100,
    total: int = 100,
    guaranteed_root: bool = True,
    a_attributes: dict[str, str] | None = None,
) -> QuotaNode:
    """A root of ``total`` cpu over leaves A (min 60) and B (min 40), each up to 100 cpu.

    ``guaranteed_root=False`` leaves the root's min unset (only its max is given)."""
    return QuotaNode(
        name="root",
        min=cpu(total) if guaranteed_root else {},
        max=cpu(total),
        children=[
            QuotaNode(
                name=names[0],
                min=cpu(a_min),
                max=cpu(a_max),
                namespaces=list(a_namespaces),
                attributes=a_attributes or {},
            ),
            QuotaNode(name=names[1], min=cpu(b_min), max=cpu(b_max), namespaces=list(b_namespaces)),
        ],
    )


def departments_tree(a_max: int = 100, b_max: int = 100) -> QuotaNode:
    """The demo tree's shape: Department-a (user-a, user-b; min 60) and Department-b (user-c;
    min 40) under a root of 100 cpu."""
    return two_leaf_tree(
        ("user-a", "user-b"),
        ("user-c",),
        names=("Department-a", "Department-b"),
        a_max=a_max,
        b_max=b_max,
    )


def users_tree(dept_a_max: int = 60) -> QuotaNode:
    """Three levels: user-b is guaranteed 50 (it may reclaim); user-a and user-c have no
    guarantee (all they hold is borrowed, so they are the victims)."""
    return QuotaNode(
        name="root",
        min=cpu(100),
        max=cpu(100),
        children=[
            QuotaNode(
                name="Department-a",
                min=cpu(50),
                max=cpu(dept_a_max),
                children=[
                    QuotaNode(name="user-a", max=cpu(100)),
                    QuotaNode(name="user-b", min=cpu(50), max=cpu(100)),
                ],
            ),
            QuotaNode(
                name="Department-b",
                min=cpu(50),
                max=cpu(100),
                children=[QuotaNode(name="user-c", max=cpu(100))],
            ),
        ],
    )
