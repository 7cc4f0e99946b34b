"""Retries of failed jobs and OOM scale-up (docs/admission-rules.md R12, R13).

Scenarios (tests/scenarios/49-56) pin the rules end to end in the simulator; here the pieces
are checked one by one: the arithmetic, the decision for every kind of failure, the checks of
annotations and attributes, the next attempt's manifest, and the engine as a running system's
dequeuer and as another zone's (it applies the decision from the log, decides nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import msgspec
import pytest

from schemas import (
    ContainerTermination,
    MemoryResize,
    Millis,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    ReleaseCause,
    Retried,
    RetryAsk,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadKey,
    Zone,
)
from tests.builders.events import observed
from tests.builders.log import BASE_MS, B, Log, walkthrough_round
from tests.builders.manifests import elastic_quota_tree, quota_node
from tests.builders.trees import two_leaf_tree
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.history import audit, explain
from usher.core.history.sim import load_scenario
from usher.core.intake.workload import extract_workload
from usher.core.model.config import EngineConfig
from usher.core.model.errors import ScenarioError, TreeInvalid, WorkloadInvalid
from usher.core.rules.retry import (
    ATTEMPT_ANNOTATION,
    RETRY_OF_ANNOTATION,
    Failure,
    RetryPolicy,
    container_memory,
    effective_limit,
    grown_memory,
    retried,
    retry_manifest,
    retry_policy,
)
from usher.core.tree.quota_tree import parse_tree

MI = 2**20
GI = 2**30
TRAIN = WorkloadKey("a1/train")


def _termination(
    reason: str, *, container: str = "w", request: int | None = 4 * GI, limit: int | None = None
) -> ContainerTermination:
    return ContainerTermination(
        pod_set="main",
        container=container,
        reason=reason,
        exit_code=137 if reason == "OOMKilled" else 1,
        memory_request=request,
        memory_limit=limit,
    )


def _failure(
    terminations: list[ContainerTermination],
    *,
    attempt: int = 1,
    limit: int = 2,
    factor: str = "1.5",
    cap: int | None = None,
) -> Failure:
    return Failure(
        zone=Zone("default"),
        queue=QueueName("root-a-a1"),
        quota=QuotaPath("root/A"),
        first=TRAIN,
        attempt=attempt,
        limit=limit,
        memory_factor=factor,
        memory_cap=cap,
        terminations=terminations,
    )


# ---------------------------------------------------------------------------- arithmetic


@pytest.mark.parametrize(
    ("amount", "factor", "cap", "grown"),
    [
        (4 * GI, "1.5", None, 6 * GI),  # the 4Gi -> 6Gi
        (4 * GI, "1.5", 5 * GI, 5 * GI),  # capped
        (4 * GI, "1", None, 4 * GI),  # factor 1: no growth
        (1000, "1.5", None, MI),  # rounded up to whole Mi
        (100 * MI, "1.33", None, 133 * MI),
        (6 * GI, "2", 5 * GI, 6 * GI),  # a cap below the amount never shrinks it
    ],
)
def test_grown_memory(amount: int, factor: str, cap: int | None, grown: int) -> None:
    assert grown_memory(amount, Fraction(factor), cap) == grown


@pytest.mark.parametrize(
    ("tree", "ask", "limit"),
    [
        (0, None, 0),  # off by default
        (2, None, 2),  # the tree's
        (0, RetryAsk(limit=3), 3),  # a job opts in on its own
        (1, RetryAsk(limit=3), 1),  # bounded by the tree's
        (3, RetryAsk(limit=1), 1),  # its own when smaller
        (2, RetryAsk(memory_factor="2"), 2),  # no limit of its own: the tree's
    ],
)
def test_effective_limit(tree: int, ask: RetryAsk | None, limit: int) -> None:
    assert effective_limit(tree, ask) == limit


def test_the_policy_is_inherited_and_invalid_values_skipped() -> None:
    root = retry_policy({"usher.io/retry-limit": "2"}, RetryPolicy())
    assert root == RetryPolicy(limit=2, memory_factor="1.5")
    leaf = retry_policy({"usher.io/oom-memory-factor": "2"}, root)
    assert leaf == RetryPolicy(limit=2, memory_factor="2")
    assert retry_policy({"usher.io/oom-memory-factor": "0.5"}, leaf) == leaf


# ---------------------------------------------------------------------------- the decision


@pytest.mark.parametrize(
    ("failure", "job", "cause", "code", "resized"),
    [
        pytest.param(
            _failure([_termination("OOMKilled", limit=4 * GI)]),
            "a1/train-retry-1",
            "OOMKilled",
            "OOMKilled",
            [MemoryResize(pod_set="main", container="w", request=4 * GI, new_request=6 * GI,
                          limit=4 * GI, new_limit=6 * GI)],
            id="oom-scaled",
        ),
        pytest.param(
            _failure([_termination("Error")]),
            "a1/train-retry-1",
            "Failed",
            "Failed",
            [],
            id="failed-same-size",
        ),
        pytest.param(
            _failure([_termination("Error"), _termination("OOMKilled", container="x")]),
            "a1/train-retry-1",
            "OOMKilled",
            "OOMKilled",
            [MemoryResize(pod_set="main", container="x", request=4 * GI, new_request=6 * GI,
                          limit=None, new_limit=None)],
            id="oom-wins-only-oom-resized",
        ),
        pytest.param(
            _failure([_termination("OOMKilled", request=None, limit=None)]),
            "a1/train-retry-1",
            "OOMKilled",
            "OOMKilled",
            [MemoryResize(pod_set="main", container="w", request=None, new_request=None,
                          limit=None, new_limit=None)],
            id="oom-without-memory-kept",
        ),
        pytest.param(
            _failure([_termination("Error")], attempt=3, limit=2),
            None,
            "Failed",
            "RetryLimitReached",
            [],
            id="limit-reached",
        ),
        pytest.param(
            _failure([_termination("OOMKilled", request=5 * GI)], attempt=2, cap=5 * GI),
            None,
            "OOMKilled",
            "MemoryCapReached",
            [],
            id="cap-reached",
        ),
        pytest.param(
            _failure([_termination("OOMKilled")], attempt=2, cap=5 * GI),
            "a1/train-retry-2",
            "OOMKilled",
            "OOMKilled",
            [MemoryResize(pod_set="main", container="w", request=4 * GI, new_request=5 * GI,
                          limit=None, new_limit=None)],
            id="capped-below-factor",
        ),
        pytest.param(
            _failure([], attempt=1),
            "a1/train-retry-1",
            "Failed",
            "Failed",
            [],
            id="no-termination-reported",
        ),
    ],
)  # fmt: skip
def test_retried(
    failure: Failure, job: str | None, cause: str, code: str, resized: list[MemoryResize]
) -> None:
    decision = retried(WorkloadKey("a1/train-retry-9"), failure)
    assert decision.job == job
    assert (decision.cause, decision.reason.code) == (cause, code)
    assert decision.resized == resized
    assert (decision.first, decision.attempt, decision.limit) == (TRAIN, failure.attempt, 2)


def test_the_reasons_carry_the_numbers() -> None:
    scaled = retried(TRAIN, _failure([_termination("OOMKilled", limit=4 * GI)]))
    assert scaled.reason.message == (
        "attempt 1 of 3 failed (main/w OOMKilled at 4Gi); attempt 2 with main/w memory "
        "4Gi -> 6Gi (x1.5)"
    )
    capped = retried(TRAIN, _failure([_termination("OOMKilled")], attempt=2, cap=4 * GI))
    assert capped.reason.message == (
        "attempt 2: main/w OOMKilled at 4Gi, already at its memory cap 4Gi; not retried"
    )
    last = retried(TRAIN, _failure([_termination("Error")], attempt=3))
    assert last.reason.message == (
        "attempt 3 of 3 failed (main/w Error exit code 1); no retry left (retry limit 2)"
    )


# ---------------------------------------------------------------------------- input checks


def _job(annotations: dict[str, Any], memory: str = "4Gi") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "a1", "annotations": annotations},
        "spec": {
            "suspend": True,
            "template": {
                "metadata": {"labels": {"controller-uid": "u-1", "team": "x"}},
                "spec": {
                    "containers": [
                        {
                            "name": "w",
                            "image": "busybox",
                            "resources": {
                                "requests": {"cpu": "1", "memory": memory},
                                "limits": {"memory": memory},
                            },
                        }
                    ],
                    "restartPolicy": "Never",
                },
            },
            "selector": {"matchLabels": {"controller-uid": "u-1"}},
        },
    }


@pytest.mark.parametrize(
    ("annotations", "path", "code"),
    [
        ({"usher.io/retry-limit": "-1"}, "usher.io/retry-limit", "invalid-annotation"),
        ({"usher.io/retry-limit": "two"}, "usher.io/retry-limit", "invalid-annotation"),
        ({"usher.io/oom-memory-factor": "0.5"}, "usher.io/oom-memory-factor", "invalid-annotation"),
        ({"usher.io/oom-memory-cap": "2Gi"}, "usher.io/oom-memory-cap", "cap-below-request"),
        ({"usher.io/oom-memory-cap": "lots"}, "usher.io/oom-memory-cap", "invalid-annotation"),
    ],
)
def test_bad_annotations_are_refused_naming_the_field(
    annotations: dict[str, str], path: str, code: str
) -> None:
    with pytest.raises(WorkloadInvalid) as caught:
        extract_workload(_job(annotations), created_ms=Millis(0))
    [error] = caught.value.errors
    assert (error.path, error.code) == (f"metadata.annotations.{path}", code)


def test_good_annotations_are_carried() -> None:
    annotations = {
        "usher.io/retry-limit": "3",
        "usher.io/oom-memory-factor": "2",
        "usher.io/oom-memory-cap": "4Gi",  # equal to the request: allowed
    }
    event = extract_workload(_job(annotations), created_ms=Millis(0))
    assert event.retry == RetryAsk(limit=3, memory_factor="2", memory_cap=4 * GI)
    assert extract_workload(_job({}), created_ms=Millis(0)).retry is None


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        ({"usher.io/retry-limit": "-1"}, "usher.io/retry-limit"),
        ({"usher.io/retry-limit": "1.5"}, "usher.io/retry-limit"),
        ({"usher.io/oom-memory-factor": "0.9"}, "usher.io/oom-memory-factor"),
        ({"usher.io/oom-memory-factor": "-2"}, "usher.io/oom-memory-factor"),
    ],
)
def test_bad_tree_attributes_are_refused_naming_the_field(
    attributes: dict[str, str], field: str
) -> None:
    leaf = quota_node("a", max_cpu="8", min_cpu="8", namespaces=["a1"])
    root = quota_node("root", max_cpu="8", min_cpu="8", attributes=attributes, children=[leaf])
    manifest = elastic_quota_tree(root, name="t")
    with pytest.raises(TreeInvalid) as caught:
        parse_tree(manifest)
    [error] = caught.value.errors
    assert error.path == f"spec.root.attributes.{field}"


# ---------------------------------------------------------------------------- manifests


def test_the_next_attempt_is_the_failed_job_renamed_suspended_linked_and_resized() -> None:
    failed = _job({"usher.io/retry-limit": "2"})
    failed["metadata"].update(uid="u-1", resourceVersion="7", creationTimestamp="t")
    failed["spec"]["suspend"] = False
    failed["status"] = {"failed": 1}
    decision = retried(TRAIN, _failure([_termination("OOMKilled", limit=4 * GI)]))
    created = retry_manifest(failed, decision)
    metadata = created["metadata"]
    assert metadata["name"] == "train-retry-1"
    assert not {"uid", "resourceVersion", "creationTimestamp"} & set(metadata)
    assert metadata["annotations"][RETRY_OF_ANNOTATION] == "a1/train"
    assert metadata["annotations"][ATTEMPT_ANNOTATION] == "2"
    assert "status" not in created and created["spec"]["suspend"] is True
    # The Job controller's generated selector and labels are the failed Job's, not its own.
    assert "selector" not in created["spec"]
    assert created["spec"]["template"]["metadata"]["labels"] == {"team": "x"}
    assert container_memory(created) == {("main", "w"): (6 * GI, 6 * GI)}
    assert extract_workload(created, created_ms=Millis(0)).pod_sets[0].requests == {
        "cpu": 1000,
        "memory": 6 * GI,
    }
    # The failed manifest is left as it was.
    assert failed["metadata"]["name"] == "train" and failed["spec"]["suspend"] is False


# ---------------------------------------------------------------------------- the engine


def _engine(zones: frozenset[Zone] | None = None) -> Engine:
    """A running system's engine: A retries twice; train (created at 0) admitted and granted."""
    engine = Engine(EngineConfig(zones=zones))
    tree = two_leaf_tree(a_attributes={"usher.io/retry-limit": "2"})
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    engine.apply(observed("a1", "train", 60), Millis(0))
    made = engine.decide(Millis(0))
    for decision in made:
        engine.apply(decision, Millis(0))
    return engine


def _failed(key: WorkloadKey = TRAIN) -> WorkloadFinished:
    return WorkloadFinished(workload=key, succeeded=False, terminations=[_termination("Error")])


def test_the_zone_dequeuer_decides_once_and_the_retry_keeps_the_first_place() -> None:
    engine = _engine()
    engine.apply(observed("a1", "later", 60, created=5), Millis(5))
    engine.apply(_failed(), Millis(10))
    retry_decisions = [d for d in engine.decide(Millis(10)) if isinstance(d, Retried)]
    assert [d.job for d in retry_decisions] == ["a1/train-retry-1"]
    # Read back from the log: nothing changes, and no second decision.
    engine.apply(retry_decisions[0], Millis(11))
    assert not [d for d in engine.decide(Millis(12)) if isinstance(d, Retried)]
    engine.apply(observed("a1", "train-retry-1", 60, created=20), Millis(20))
    # train's usage lingers until the ledger's Released (R7): both wait, the retry first, by
    # train's creation (0), ahead of later (5), although it was created at 20.
    order = [e.job for e in engine.queues()[QueueName("root-a-a1")]]
    assert order == ["a1/train-retry-1", "a1/later"]
    assert engine.state.jobs[WorkloadKey("a1/train-retry-1")].created_ms == 0


def test_only_a_retried_links_a_job_to_a_place() -> None:
    engine = _engine()
    # Carries the name and could carry the annotations, but no Retried named it.
    engine.apply(observed("a1", "train-retry-1", 60, created=20), Millis(20))
    assert engine.state.jobs[WorkloadKey("a1/train-retry-1")].created_ms == 20


def test_another_zone_decides_nothing_but_applies_the_decision_from_the_log() -> None:
    deciding = _engine()
    other = _engine(zones=frozenset({Zone("elsewhere")}))
    for engine in (deciding, other):
        engine.apply(_failed(), Millis(10))
    [decision] = [d for d in deciding.decide(Millis(10)) if isinstance(d, Retried)]
    assert not [d for d in other.decide(Millis(10)) if isinstance(d, Retried)]
    other.apply(decision, Millis(11))
    assert other.state.failures == {} and WorkloadKey("a1/train-retry-1") in other.state.retries


def test_a_job_without_retries_fails_for_good() -> None:
    engine = Engine()
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    engine.apply(observed("a1", "train", 60), Millis(0))
    engine.decide(Millis(0))
    engine.apply(_failed(), Millis(10))
    assert engine.state.failures == {}
    assert not [d for d in engine.decide(Millis(10)) if isinstance(d, Retried)]


def test_a_snapshot_keeps_failures_links_and_annotations() -> None:
    engine = _engine()
    engine.apply(_failed(), Millis(10))
    restored = restore(snapshot(engine), engine.config)
    assert restored.state.failures == engine.state.failures
    [decision] = [d for d in engine.decide(Millis(10)) if isinstance(d, Retried)]
    [again] = [d for d in restored.decide(Millis(10)) if isinstance(d, Retried)]
    assert msgspec.json.encode(again) == msgspec.json.encode(decision)
    job = _job({"usher.io/retry-limit": "1"})
    engine.apply(extract_workload(job, created_ms=Millis(30)), Millis(30))
    twin = restore(snapshot(engine), engine.config)
    assert twin.state.retries == engine.state.retries
    assert twin.state.jobs[TRAIN].retry_ask == RetryAsk(limit=1)


# ---------------------------------------------------------------------------- the simulator


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        ({"oom": {"job": "a1/train", "container": "nope"}}, "timeline[1].oom.container"),
        ({"fail": {"job": "a1/train", "exitCode": 0}}, "timeline[1].fail.exitCode"),
        ({"fail": "a1/ghost"}, "timeline[1].fail"),
        ({"oom": {"job": "a1/train", "exitCode": 1}}, "timeline[1].oom.exitCode"),
    ],
)
def test_bad_failure_entries_are_refused_naming_the_field(entry: dict[str, Any], path: str) -> None:
    data = {
        "name": "t",
        "timeline": [{"at": 0, "create": _job({})}, {"at": 1, **entry}],
    }
    with pytest.raises(ScenarioError) as caught:
        load_scenario(data, "t.yaml")
    assert path in [error.path for error in caught.value.errors]


# ---------------------------------------------------------------------------- audit, explain


RETRY_ONCE_TREE = two_leaf_tree(
    ("user-a", "user-b"),
    ("user-c",),
    names=("Department-a", "Department-b"),
    a_attributes={"usher.io/retry-limit": "1"},
)
"""The demo tree's shape; Department-a's jobs are retried once."""


def oom_killed(log: Log, at: float, cpu: int, cause: ReleaseCause) -> None:
    """user-a/train OOM-killed at ``at``; the ledger releases it just after with ``cause``."""
    oom = _termination("OOMKilled")
    log.add(at, WorkloadFinished(workload=WorkloadKey("user-a/train"), succeeded=False,
                                 terminations=[oom]))  # fmt: skip
    log.released(at + 0.1, "user-a/train", cpu, cause)


def retry_decided(log: Log, at: float) -> Retried:
    """The one ``Retried`` a pass at ``at`` over the whole log decides."""
    engine = Engine()
    for item in log.history().items:
        engine.apply(item.event, item.time_ms)
    [decision] = [
        d for d in engine.decide(Millis(BASE_MS + int(at * 1000))) if isinstance(d, Retried)
    ]
    return decision


def retry_log(tamper: Callable[[Retried], Retried] | None = None) -> Log:
    """train fails (OOMKilled at 4Gi) and is retried once as train-retry-1, which succeeds."""
    log = Log().tree(0, RETRY_ONCE_TREE).job(1, "user-a/train", 10)
    log.admitted(1.1, "user-a/train", 10)
    oom_killed(log, 5, 10, "Failed")
    decision = retry_decided(log, 5.2)
    log.add(5.2, tamper(decision) if tamper is not None else decision,
            id="dequeuer:default:retried:user-a/train")  # fmt: skip
    log.job(6, "user-a/train-retry-1", 10).admitted(6.1, "user-a/train-retry-1", 10)
    return log.finished(9, "user-a/train-retry-1").released(
        9.1, "user-a/train-retry-1", 10, "Finished"
    )


def test_a_victim_that_fails_before_it_is_seen_stopped_is_retried() -> None:
    """OOM-killed while its preemption was on its way (its pods run until seen stopped, R7):
    the admitted attempt failed and its job is over for Kubernetes, so it gets its Retried
    (R12) like any failed attempt, and the audit finds it justified. Without it the job is
    never run again (the crash test's "not settled" under load)."""
    # train borrows 10 of Department-b's guarantee (40), which urgent reclaims.
    log = Log().tree(0, RETRY_ONCE_TREE).job(1, "user-a/train", 70)
    log.admitted(1.1, "user-a/train", 70)
    log.job(1.2, "user-a/train", 70, suspended=False)
    log.job(1.3, "user-c/fill", 30).admitted(1.4, "user-c/fill", 30, B)
    log.job(2, "user-c/urgent", 10, priority=3).preempted(3, "user-a/train", by="user-c/urgent")
    oom_killed(log, 3.1, 70, "Preempted")
    decision = retry_decided(log, 3.3)
    assert (decision.job, decision.attempt) == ("user-a/train-retry-1", 1)
    log.add(3.3, decision, id="dequeuer:default:retried:user-a/train")
    report = audit.audit(log.history(), EngineConfig())
    assert [(f.check, f.message) for f in report.findings] == []


def test_audit_justifies_a_retry_by_the_failure_before_it() -> None:
    report = audit.audit(retry_log().history(), EngineConfig())
    assert [(f.check, f.message) for f in report.findings] == []


@pytest.mark.parametrize(
    ("tamper", "check"),
    [
        (lambda d: msgspec.structs.replace(d, job=WorkloadKey("user-a/other")), "wrong-retry"),
        (lambda d: msgspec.structs.replace(d, attempt=2), "wrong-retry"),
        (lambda d: msgspec.structs.replace(d, workload=WorkloadKey("user-a/ghost")),
         "retry-unjustified"),
    ],
)  # fmt: skip
def test_audit_names_an_unjustified_retry(tamper: Callable[[Retried], Retried], check: str) -> None:
    report = audit.audit(retry_log(tamper).history(), EngineConfig())
    assert check in [f.check for f in report.findings]


def test_explain_lists_every_attempt_and_why_it_ended() -> None:
    story = explain.explain(
        retry_log().history(), EngineConfig(), WorkloadKey("user-a/train-retry-1"), Millis(0)
    )
    assert [(a.workload, a.attempt, a.ended) for a in story.attempts] == [
        ("user-a/train", 1, "failed"),
        ("user-a/train-retry-1", 2, "succeeded"),
    ]
    assert story.attempts[0].reason is not None and story.attempts[0].reason.code == "OOMKilled"
    assert "retry of" in [line.what for line in story.history]
    table = explain.render_explain_table(story)
    assert "attempts:" in table and "user-a/train-retry-1" in table
    # A job without retries reads as before: no attempts at all.
    plain = explain.explain(
        walkthrough_round().history(), EngineConfig(), WorkloadKey("user-a/first"), Millis(0)
    )
    assert plain.attempts == [] and "attempts" not in explain.render_explain_json(plain)


def test_a_deleted_retry_leaves_no_place_for_a_job_created_again_under_its_name() -> None:
    engine = _engine()
    engine.apply(_failed(), Millis(10))
    engine.decide(Millis(10))
    retry_key = WorkloadKey("a1/train-retry-1")
    engine.apply(observed("a1", "train-retry-1", 60, created=20), Millis(20))
    assert engine.state.jobs[retry_key].created_ms == 0
    engine.apply(WorkloadDeleted(workload=retry_key), Millis(30))
    engine.apply(observed("a1", "train-retry-1", 60, created=40), Millis(40))
    assert engine.state.jobs[retry_key].created_ms == 40


def test_the_retry_keeps_the_first_place_even_if_the_failed_job_was_deleted() -> None:
    engine = _engine()
    engine.apply(_failed(), Millis(10))
    engine.apply(WorkloadDeleted(workload=TRAIN), Millis(11))  # a TTL controller, say
    [decision] = [d for d in engine.decide(Millis(12)) if isinstance(d, Retried)]
    engine.apply(observed("a1", "train-retry-1", 60, created=20), Millis(20))
    assert engine.state.jobs[WorkloadKey(str(decision.job))].created_ms == 0
