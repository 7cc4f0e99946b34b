"""A rejected quota tree is shown to people: the fold of the log, the live view, `usher quota`.

Issue 14, item 3: a tree applied with kubectl whose min exceeds its max was only a JSON line in
the watcher's log. The log's ``QuotaTreeRejected`` now names the tree, and every view for people
says which tree was rejected, when, every field path and error, and what stays in force.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from schemas import (
    DEFAULT_ZONE,
    Envelope,
    FieldError,
    QuotaNode,
    QuotaTreeApplied,
    QuotaTreeRejected,
)
from tests.builders.events import CORE
from tests.builders.log import SUBJECTS
from usher.cli.live import render
from usher.client.state import PeopleProjection
from usher.core.protocol.log import LogEntry, log_entry

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ERROR = FieldError(
    path="spec.root.children[0](Department-a).min.cpu",
    code="min-exceeds-max",
    message="min 50 > max 40",
)
REJECTED = QuotaTreeRejected(errors=[ERROR], namespace="kube-system", name="elasticquotatree")


def entry(seq: int, event: object) -> LogEntry:
    subject, source = SUBJECTS.owner(event, DEFAULT_ZONE)  # type: ignore[arg-type]
    envelope = Envelope(id=f"e{seq}", time=AT, source=source, event=event)  # type: ignore[arg-type]
    return log_entry(seq, subject, envelope)


def tree() -> QuotaNode:
    return QuotaNode(name="root", min={"cpu": 40 * CORE}, max={"cpu": 40 * CORE}, namespaces=["a"])


def test_a_rejection_after_a_tree_in_force_names_the_tree_and_keeps_the_old_one() -> None:
    state = PeopleProjection()
    state.apply(entry(1, QuotaTreeApplied(root=tree())))
    state.apply(entry(2, REJECTED))
    view = state.view(0)
    line = (
        "ElasticQuotaTree kube-system/elasticquotatree rejected at 2026-01-02T03:04:05Z "
        "(the previous tree stays in force): "
        "spec.root.children[0](Department-a).min.cpu: min 50 > max 40 [min-exceeds-max]"
    )
    assert view.tree_notes() == [line]
    assert [q.path for q in view.quota] == ["root"]  # the tree in force is still shown
    screen = io.StringIO()
    Console(file=screen, width=400, color_system=None).print(render(view, "usher", []))
    assert line in screen.getvalue()
    # A valid tree applied afterwards clears it.
    state.apply(entry(3, QuotaTreeApplied(root=tree())))
    assert state.view(0).tree_notes() == []


def test_a_rejection_with_no_tree_in_force_says_so() -> None:
    state = PeopleProjection()
    state.apply(entry(1, REJECTED))
    [line] = state.view(0).tree_notes()
    assert "(no tree is in force)" in line and "[min-exceeds-max]" in line
