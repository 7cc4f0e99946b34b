"""A declared maximum runtime (RT1) and what uses it: backfill under a reservation (N2) and the
budget overrun hold (B2), table by table; explain of a log alone names both.

Each table plays a small history on the pure engine and looks at one decision: whether the
candidate is admitted at the instant asked, and what it says when it is not.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from schemas import Admitted, Millis, QuotaTreeApplied, WorkloadKey, WorkloadObserved
from tests.builders.events import observed
from tests.builders.log import BASE_MS, Log
from tests.builders.manifests import elastic_quota_tree, quota_node
from tests.builders.trees import departments_tree
from usher.core.engine import budget_overrun
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.history import explain
from usher.core.intake.workload import extract_workload
from usher.core.model.config import EngineConfig, Policy
from usher.core.model.errors import TreeInvalid, WorkloadInvalid
from usher.core.tree.quota_tree import parse_tree

CONFIG = EngineConfig(policy=Policy.ROUND, instant_release=True)
ANNOTATION = "usher.io/max-runtime-seconds"


# ---------------------------------------------------------------------------- RT1: reading it


def _manifest(kind: str, annotation: object = None, deadline: object = None) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}]}}
    metadata: dict[str, Any] = {"name": "j", "namespace": "a"}
    if annotation is not None:
        metadata["annotations"] = {ANNOTATION: annotation}
    if kind == "Job":
        spec: dict[str, Any] = {"suspend": True, "template": pod}
        api = "batch/v1"
    else:
        spec = {"runPolicy": {"suspend": True}, "tfReplicaSpecs": {"Worker": {"template": pod}}}
        api = "kubeflow.org/v1"
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}


@pytest.mark.parametrize(
    ("kind", "annotation", "deadline", "declared"),
    [
        ("Job", None, None, None),
        ("Job", "600", None, 600),
        ("Job", None, 300, 300),
        ("Job", "600", 300, 300),  # the smaller of the two
        ("Job", "120", 300, 120),
        ("TFJob", "600", None, 600),  # the annotation is read for every kind
        ("TFJob", None, 300, None),  # a batch Job's deadline field only
    ],
)
def test_the_declared_runtime_is_the_smaller_of_annotation_and_deadline(
    kind: str, annotation: object, deadline: object, declared: int | None
) -> None:
    workload = extract_workload(_manifest(kind, annotation, deadline), created_ms=Millis(0))
    assert workload.max_runtime_seconds == declared


@pytest.mark.parametrize(
    ("annotation", "deadline", "paths"),
    [
        ("1h", None, ["metadata.annotations.usher.io/max-runtime-seconds"]),
        ("0", None, ["metadata.annotations.usher.io/max-runtime-seconds"]),
        ("-5", None, ["metadata.annotations.usher.io/max-runtime-seconds"]),
        (600, None, ["metadata.annotations.usher.io/max-runtime-seconds"]),  # not a string
        ("2147483648", None, ["metadata.annotations.usher.io/max-runtime-seconds"]),
        ("31622401", None, ["metadata.annotations.usher.io/max-runtime-seconds"]),  # > a year
        (" 90 ", None, ["metadata.annotations.usher.io/max-runtime-seconds"]),  # spaces
        (
            "\u00b2",
            None,
            ["metadata.annotations.usher.io/max-runtime-seconds"],
        ),  # isdigit() is True
        ("\u0661", None, ["metadata.annotations.usher.io/max-runtime-seconds"]),
        (None, 0, ["spec.activeDeadlineSeconds"]),
        (None, -1, ["spec.activeDeadlineSeconds"]),
        (None, "60", ["spec.activeDeadlineSeconds"]),
        (None, True, ["spec.activeDeadlineSeconds"]),
        (
            "x",
            1.5,
            ["metadata.annotations.usher.io/max-runtime-seconds", "spec.activeDeadlineSeconds"],
        ),
    ],
)
def test_bad_runtime_values_are_refused_naming_the_field(
    annotation: object, deadline: object, paths: list[str]
) -> None:
    with pytest.raises(WorkloadInvalid) as refused:
        extract_workload(_manifest("Job", annotation, deadline), created_ms=Millis(0))
    assert [error.path for error in refused.value.errors] == paths
    for error in refused.value.errors:
        most = "31622400" if "annotations" in error.path else "2147483647"
        assert f"whole number of seconds from 1 to {most}" in error.message
        assert repr(annotation if "annotations" in error.path else deadline) in error.message


# ---------------------------------------------------------------------------- N2: backfill


def _reservation_tree(backfill: bool) -> dict[str, object]:
    """16 cpu; the guard after 10 s; backfill on (or not) at the root, inherited."""
    attributes = {"usher.io/starvation-seconds": "10"}
    if backfill:
        attributes["usher.io/backfill"] = "true"
    leaf = quota_node("a", max_cpu="16", min_cpu="16", namespaces=["a"])
    return elastic_quota_tree(
        quota_node("root", max_cpu="16", min_cpu="16", attributes=attributes, children=[leaf])
    )


def _declaring(event: WorkloadObserved, seconds: int | None) -> WorkloadObserved:
    return msgspec.structs.replace(event, max_runtime_seconds=seconds)


def _under_reservation(backfill: bool, load_runtime: int | None) -> Engine:
    """`load` (12 cpu, declares ``load_runtime``) admitted at 0; `big` (16 cpu) at 1, passed
    over at 2 by `s1` (2 cpu, declares 100 s): its reservation starts at 12, and the declared
    runtimes promise it at max(load's end, 102 s)."""
    engine = Engine(CONFIG)
    engine.apply(QuotaTreeApplied(root=parse_tree(_reservation_tree(backfill))), Millis(0))
    engine.apply(_declaring(observed("a", "load", 12), load_runtime), Millis(0))
    engine.decide(Millis(0))
    engine.apply(observed("a", "big", 16, created=1000), Millis(1000))
    engine.decide(Millis(1000))
    engine.apply(_declaring(observed("a", "s1", 2, created=2000), 100), Millis(2000))
    engine.decide(Millis(2000))
    return engine


@pytest.mark.parametrize(
    ("backfill", "load_runtime", "runtime", "admitted", "said"),
    [
        (True, 200, 150, True, "Backfilled: declared to run at most 150 s"),
        (True, 200, 180, True, "Backfilled"),  # ends exactly when the reservation is promised
        (True, 200, 181, False, "after 1970-01-01T00:03:20Z when a/big's reservation can be"),
        (True, 50, 82, True, "Backfilled"),  # then s1's end (102 s) is the promise
        (True, 50, 83, False, "so it does not backfill"),
        (True, None, 10, False, "promise no instant its reservation is satisfied"),
        (True, 200, None, False, "it declares no maximum runtime, so it does not backfill"),
        (False, 200, 10, False, "does not fit beside it"),  # N1 alone
    ],
)
def test_a_candidate_backfills_only_when_it_ends_before_the_promised_instant(
    backfill: bool, load_runtime: int | None, runtime: int | None, admitted: bool, said: str
) -> None:
    engine = _under_reservation(backfill, load_runtime)
    engine.apply(_declaring(observed("a", "c", 2, created=20000), runtime), Millis(20000))
    decisions = engine.decide(Millis(20000))
    candidate = WorkloadKey("a/c")
    made = [d for d in decisions if isinstance(d, Admitted) and d.workload == candidate]
    assert bool(made) == admitted
    if admitted:
        assert made[0].reason is not None and made[0].reason.code == "Backfilled"
        assert said in f"{made[0].reason.code}: {made[0].reason.message}"
        assert made[0].reason.blocker == WorkloadKey("a/big")
    else:
        reason = engine.reason(candidate)
        assert reason is not None and reason.code == "BehindReservation"
        assert said in reason.message
    # The reserved head is never admitted early nor delayed past the promise.
    assert WorkloadKey("a/big") not in {d.workload for d in decisions if isinstance(d, Admitted)}


def test_a_snapshot_carries_the_declared_runtimes_and_backfills_alike() -> None:
    original = _under_reservation(True, 200)
    restored = restore(snapshot(original), CONFIG)
    key = WorkloadKey("a/load")
    assert restored.state.jobs[key].max_runtime_ms == original.state.jobs[key].max_runtime_ms
    assert original.state.jobs[key].max_runtime_ms == 200_000
    said = []
    for engine in (original, restored):
        engine.apply(_declaring(observed("a", "c", 2, created=20000), 150), Millis(20000))
        said.append(msgspec.msgpack.encode(engine.decide(Millis(20000))))
    assert said[0] == said[1] and b"Backfilled" in said[0]


# ---------------------------------------------------------------------------- B2: overrun


def _budget_tree(opt_in: bool) -> dict[str, object]:
    attributes = {"usher.io/budgets": "cpu=2h per month"}
    if opt_in:
        attributes["usher.io/budget-overrun"] = "hold"
    leaf = quota_node("A", max_cpu="8", min_cpu="8", namespaces=["a"], attributes=attributes)
    return elastic_quota_tree(quota_node("root", max_cpu="8", min_cpu="8", children=[leaf]))


@pytest.mark.parametrize(
    ("opt_in", "cores", "runtime", "admitted"),
    [
        (True, 2, 3600, False),  # 2 CPU-hours > the 1.5 left
        (True, 1, 5400, True),  # 1.5 CPU-hours: exactly what is left
        (True, 1, 5401, False),
        (True, 3, None, True),  # declares nothing: B2 cannot judge it
        (False, 2, 3600, True),  # not opted in: B1 alone (the budget is not spent)
    ],
)
def test_a_declared_runtime_that_would_overrun_the_budget_is_held_when_opted_in(
    opt_in: bool, cores: int, runtime: int | None, admitted: bool
) -> None:
    engine = Engine(CONFIG)
    engine.apply(QuotaTreeApplied(root=parse_tree(_budget_tree(opt_in))), Millis(0))
    engine.apply(observed("a", "running", 1), Millis(0))
    engine.decide(Millis(0))
    at = Millis(1_800_000)  # `running` has spent 0.5 of the 2 CPU-hours
    engine.apply(_declaring(observed("a", "c", cores, created=at), runtime), at)
    decisions = engine.decide(at)
    key = WorkloadKey("a/c")
    assert any(isinstance(d, Admitted) and d.workload == key for d in decisions) == admitted
    if not admitted:
        reason = engine.reason(key)
        assert reason is not None and reason.code == "BudgetOverrun"
        assert "more than the 1.5 of 2 CPU-hours left in 1970-01, resets 1970-02-01" in (
            reason.message
        )
        assert reason.node == "root/A" and reason.requested == cores * 1000 * runtime * 1000
        # The hold can lift only at the window's reset (a wakeup then); before it, the next
        # pass is when `running` spends the budget (B1: 0.5 + 1.5 CPU-hours by t=7200 s).
        assert budget_overrun.next_release(engine) == 2_678_400_000
        assert engine.next_wakeup() == 7_200_000


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"usher.io/backfill": "yes"}, 'usher.io/backfill must be "true" or "false"'),
        (
            {"usher.io/budgets": "cpu=1h per month", "usher.io/budget-overrun": "always"},
            "usher.io/budget-overrun must be one of hold, off, got 'always'",
        ),
        ({"usher.io/budget-overrun": "hold"}, "set on a node without usher.io/budgets"),
    ],
)
def test_bad_backfill_and_overrun_attributes_are_refused_naming_them(
    attributes: dict[str, str], message: str
) -> None:
    tree = _budget_tree(False)
    leaf = tree["spec"]["root"]["children"][0]  # type: ignore[index]
    leaf["attributes"] = attributes
    with pytest.raises(TreeInvalid) as refused:
        parse_tree(tree)
    (error,) = refused.value.errors
    name = next(iter(k for k in attributes if k != "usher.io/budgets"))
    assert error.path == f"spec.root.children[0](A).attributes.{name}"
    assert message in error.message


# ---------------------------------------------------------------------------- explain


def test_explain_of_the_log_alone_says_why_a_job_does_not_backfill() -> None:
    root = msgspec.structs.replace(
        departments_tree(),
        attributes={"usher.io/starvation-seconds": "60", "usher.io/backfill": "true"},
    )
    log = Log().tree(0, root)
    log.add(1, _declaring(_job_event(1, "user-a/run", 50), 200)).admitted(1.5, "user-a/run", 50)
    log.add(2, _job_event(2, "user-a/big", 60))
    log.add(3, _declaring(_job_event(3, "user-a/small", 10), 100)).admitted(3.5, "user-a/small", 10)
    log.add(100, _declaring(_job_event(100, "user-a/later", 10), 500))
    now = Millis(BASE_MS + 100_000)
    e = explain.explain(log.history(), CONFIG, WorkloadKey("user-a/later"), now)
    assert e.reason is not None and e.reason.code == "BehindReservation"
    assert e.reason.message.endswith(
        "; admitted now it would end by 2024-05-01T12:10Z, after 2024-05-01T12:03:21Z "
        "when user-a/big's reservation can be satisfied, so it does not backfill"
    )
    text = explain.render_explain_table(e)
    assert "declares a maximum runtime of 500 s" in text


def _job_event(at: float, key: str, cores: int) -> WorkloadObserved:
    """The event ``Log.job`` would add (its builder has no declared runtime)."""
    probe = Log().job(at, key, cores)
    event = probe.entries[0][1].event
    assert isinstance(event, WorkloadObserved)
    return event
