"""The preemption policies P1-P3 (docs/admission-rules.md): the attributes' parsing and
inheritance, each predicate on a table, the engine's check of a proposed reclaim agreeing with
its own search, and what-if replaying a log under another node policy."""

from __future__ import annotations

import msgspec
import pytest

from schemas import Millis, QuotaNode, QuotaPath, WorkloadKey
from tests.builders.log import BASE_MS, Log
from tests.builders.trees import departments_tree
from usher.core.engine.facade import Engine
from usher.core.history import whatif
from usher.core.model.config import EngineConfig, Policy
from usher.core.rules.preemption_policy import (
    DEFAULT_POLICY,
    PreemptionPolicy,
    WhileBorrowing,
    claim_without,
    lender_keeps_guarantee,
    path_preemption_policy,
    policy_refusal,
    preempts_in_leaf,
    takes_while_borrowing,
)
from usher.core.tree.quota_tree import validate_tree
from usher.core.values.registry import (
    PREEMPT_WHILE_BORROWING,
    RECLAIM_WITH_OWN_VICTIMS,
    WITHIN_QUOTA_REQUEST,
)

OWN = RECLAIM_WITH_OWN_VICTIMS.key
BORROW = PREEMPT_WHILE_BORROWING.key
REQUEST = WITHIN_QUOTA_REQUEST.key
CPU = 1000
LEAF = QuotaPath("root/A")
OTHER = QuotaPath("root/B")
W, V = WorkloadKey("a/w"), WorkloadKey("b/v")

# ---------------------------------------------------------------------------- attributes


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        ([{}, {}], DEFAULT_POLICY),
        ([{OWN: "true"}, {}], PreemptionPolicy(with_own_victims=True)),
        ([{OWN: "true"}, {OWN: "false"}], DEFAULT_POLICY),
        ([{BORROW: "LowerPriority"}, {}], PreemptionPolicy(while_borrowing=WhileBorrowing())),
        ([{}, {BORROW: "LowerPriority:-3"}], PreemptionPolicy(while_borrowing=WhileBorrowing(-3))),
        ([{BORROW: "LowerPriority:7"}, {BORROW: "Never"}], DEFAULT_POLICY),
        (
            [{BORROW: "LowerPriorityBorrowersOnly:7"}, {}],
            PreemptionPolicy(while_borrowing=WhileBorrowing(7, borrowers_only=True)),
        ),
        ([{REQUEST: "WithinMin"}, {}], PreemptionPolicy(request_within_min=True)),
        ([{REQUEST: "WithinMin"}, {REQUEST: "Any"}], DEFAULT_POLICY),
        # A malformed value (a forged tree) is skipped: the inherited policy stands.
        (
            [{BORROW: "LowerPriority:2"}, {BORROW: "Sometimes", OWN: "yes"}],
            PreemptionPolicy(while_borrowing=WhileBorrowing(2)),
        ),
    ],
)
def test_each_node_inherits_what_it_does_not_set(
    chain: list[dict[str, str]], expected: PreemptionPolicy
) -> None:
    assert path_preemption_policy(chain) == expected


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (BORROW, "LowerPriority:high", "the threshold of usher.io/preempt-while-borrowing"),
        (BORROW, "LowerPriority:2147483648", "from -2147483648 to 2147483647"),
        (BORROW, "lowerpriority", "must be Never, LowerPriority or LowerPriorityBorrowersOnly"),
        (BORROW, "Never:3", "must be Never, LowerPriority or LowerPriorityBorrowersOnly"),
        (OWN, "True", 'must be "true" or "false"'),
        (REQUEST, "WithinMax", "must be one of Any, WithinMin"),
    ],
)
def test_a_bad_value_is_refused_naming_the_attribute(key: str, value: str, says: str) -> None:
    tree = departments_tree()
    child = msgspec.structs.replace(tree.children[0], attributes={key: value})
    [error] = validate_tree(msgspec.structs.replace(tree, children=[child, tree.children[1]]))
    assert error.path == f"spec.root.children[0](Department-a).attributes.{key}"
    assert says in error.message, error.message


# ---------------------------------------------------------------------------- predicates

LOWER = PreemptionPolicy(while_borrowing=WhileBorrowing())
THRESHOLD = PreemptionPolicy(while_borrowing=WhileBorrowing(1))
WITHIN_MIN = PreemptionPolicy(request_within_min=True)


BORROWERS_ONLY = PreemptionPolicy(while_borrowing=WhileBorrowing(None, borrowers_only=True))


@pytest.mark.parametrize(
    ("policy", "preemptor", "victim", "keeps", "takes"),
    [
        (DEFAULT_POLICY, 5, 0, True, False),  # Never
        (LOWER, 5, 4, True, True),
        (LOWER, 5, 5, True, False),  # strictly lower only
        (LOWER, 5, None, True, False),  # an ended victim has no priority to compare
        (LOWER, 5, 4, False, True),  # Kueue's LowerPriority: even from a leaf's guarantee
        (THRESHOLD, 5, 1, True, True),  # at most the threshold
        (THRESHOLD, 5, 2, True, False),
        (THRESHOLD, 0, -1, True, True),
        (BORROWERS_ONLY, 5, 4, True, True),
        (BORROWERS_ONLY, 5, 4, False, False),  # only what the victim's leaf borrows
    ],
)
def test_p2_takes_lower_priorities_up_to_the_threshold(
    policy: PreemptionPolicy, preemptor: int, victim: int | None, keeps: bool, takes: bool
) -> None:
    assert takes_while_borrowing(policy, preemptor, victim, lender_keeps=keeps) is takes


@pytest.mark.parametrize(
    ("claim", "victim", "keeps"),
    [
        ({"cpu": 8}, {"cpu": 4}, True),  # 8 - 4 >= min 4: all it takes was borrowed
        ({"cpu": 8}, {"cpu": 5}, False),
        ({"cpu": 8, "memory": 1}, {"memory": 1}, True),  # memory is not asked
    ],
)
def test_p2_borrowers_only_leaves_the_lender_its_guarantee(
    claim: dict[str, int], victim: dict[str, int], keeps: bool
) -> None:
    assert lender_keeps_guarantee(claim, victim, {"cpu": 4}, [("cpu", 1)]) is keeps


@pytest.mark.parametrize(
    ("policy", "asked", "allowed"),
    [
        (DEFAULT_POLICY, 9, True),  # Any: today's behaviour
        (WITHIN_MIN, 4, True),  # exactly the min
        (WITHIN_MIN, 5, False),
        (PreemptionPolicy(request_within_min=True, while_borrowing=WhileBorrowing()), 9, True),
    ],
)
def test_p3_lets_only_a_request_within_min_preempt_in_its_leaf(
    policy: PreemptionPolicy, asked: int, allowed: bool
) -> None:
    assert preempts_in_leaf(policy, [("cpu", asked)], {"cpu": 4}) is allowed


def test_p1_sets_own_victims_aside_from_the_claim() -> None:
    assert claim_without({"cpu": 5, "memory": 2}, [{"cpu": 3}, {"memory": 2}]) == {
        "cpu": 2,
        "memory": 0,
    }


@pytest.mark.parametrize(
    ("policy", "victim_leaf", "victim_priority", "within", "in_leaf", "refused"),
    [
        (DEFAULT_POLICY, OTHER, 0, False, True, None),  # R5's own check says beyond guarantee
        (THRESHOLD, OTHER, 0, False, True, None),
        (THRESHOLD, OTHER, 3, True, True, None),  # within: any borrower (R5)
        (THRESHOLD, OTHER, 3, False, True, "preempts while borrowing only priorities below 5"),
        (WITHIN_MIN, LEAF, 0, False, False, "asks more than the min of root/A"),
        (WITHIN_MIN, LEAF, 0, False, True, None),
        (LOWER, OTHER, 0, False, True, None),  # the lender would fall below its min: Kueue's
        (BORROWERS_ONLY, OTHER, 0, False, True, "root/B would hold less than its min"),
    ],
)
def test_policy_refusal_words_what_the_policy_refuses(
    policy: PreemptionPolicy,
    victim_leaf: QuotaPath,
    victim_priority: int,
    within: bool,
    in_leaf: bool,
    refused: str | None,
) -> None:
    reason = policy_refusal(
        W,
        LEAF,
        5,
        V,
        victim_leaf,
        victim_priority,
        policy=policy,
        within=within,
        in_leaf=in_leaf,
        lender_keeps=policy not in (LOWER, BORROWERS_ONLY),  # both: taking from a guarantee
    )
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and reason.code == "StaleView" and refused in reason.message
        assert reason.blocker == V


# ---------------------------------------------------------------------------- the engine


def _tree(a_attributes: dict[str, str]) -> QuotaNode:
    """Department-a (min 60) with ``a_attributes`` and Department-b (min 40), root 100."""
    tree = departments_tree()
    a = msgspec.structs.replace(tree.children[0], attributes=a_attributes)
    return msgspec.structs.replace(tree, children=[a, tree.children[1]])


def _engine(log: Log, *, last_decided: bool = True) -> Engine:
    engine = Engine(EngineConfig(policy=Policy.ROUND, instant_release=True))
    for index, (_, envelope) in enumerate(log.entries):
        at_ms = Millis(int(envelope.time.timestamp() * 1000))
        engine.apply(envelope.event, at_ms)
        if last_decided or index < len(log.entries) - 1:
            engine.decide(at_ms)
    return engine


def _joint(a_attributes: dict[str, str], *, last_decided: bool = True) -> Engine:
    """A (min 60) runs user-a/low (priority -1, 30) and user-a/keep (10, 20); B borrows 10 with
    user-c/borrow (0, 50). user-a/in (5, 40) asks 50 + 40 > 60; a/low alone leaves 110 > 100."""
    log = Log().tree(0, _tree({"usher.io/within-quota": "LowerPriority", **a_attributes}))
    log.job(1, "user-a/low", 30, priority=-1).job(2, "user-a/keep", 20, priority=10)
    log.job(3, "user-c/borrow", 50).job(4, "user-a/in", 40, priority=5)
    return _engine(log, last_decided=last_decided)


IN = WorkloadKey("user-a/in")
JOINT_VICTIMS = [WorkloadKey("user-c/borrow"), WorkloadKey("user-a/low")]


def test_p1_one_search_takes_a_borrower_and_an_own_victim() -> None:
    assert _joint({}).state.jobs[IN].state == "Pending"
    engine = _joint({OWN: "true"})
    assert engine.state.jobs[IN].state == "Admitted"
    assert sorted(engine.state.jobs[k].state for k in JOINT_VICTIMS) == ["Pending", "Pending"]


def test_p1_the_check_of_a_proposed_reclaim_agrees_with_the_search() -> None:
    now = Millis(BASE_MS + 10_000)
    # The set P1's search takes, proposed where R5 alone rules: the borrower of B goes only
    # for a preemptor within its guarantee, judged before any eviction.
    refused = _joint({}, last_decided=False).check_preemption(IN, JOINT_VICTIMS, now)
    assert refused is not None
    assert "asks beyond the guarantee of root/Department-a" in refused.message
    # Under P1 the same proposal holds: a/low set aside, 20 + 40 <= 60.
    assert (
        _joint({OWN: "true"}, last_decided=False).check_preemption(IN, JOINT_VICTIMS, now) is None
    )
    # Without the own victim it is still beyond the guarantee: refused under P1 too.
    alone = _joint({OWN: "true"}, last_decided=False).check_preemption(IN, JOINT_VICTIMS[:1], now)
    assert alone is not None and "asks beyond the guarantee" in alone.message


def test_p2_a_threshold_refuses_a_proposed_victim_above_it() -> None:
    log = Log().tree(0, _tree({BORROW: "LowerPriority:1"}))
    log.job(1, "user-c/mid", 60, priority=3).job(2, "user-a/big", 70, priority=5)
    engine = _engine(log)
    assert engine.state.jobs[WorkloadKey("user-a/big")].state == "Pending"
    refused = engine.check_preemption(
        WorkloadKey("user-a/big"), [WorkloadKey("user-c/mid")], Millis(BASE_MS + 5000)
    )
    assert refused is not None
    assert "only priorities below 5 and at most 1" in refused.message
    assert "user-c/mid has priority 3" in refused.message


# ---------------------------------------------------------------------------- what-if


def _borrowed() -> Log:
    """Department-b borrows 40 of A's guarantee with user-c/borrow (priority 0, 80); user-a/big
    (priority 5, 70) asks beyond A's min 60."""
    return Log().tree(0).job(1, "user-c/borrow", 80).job(2, "user-a/big", 70, priority=5)


def test_what_if_preempting_while_borrowing_admits_the_big_job() -> None:
    policy = whatif.parse_zone_policy(
        (), (), None, {whatif.PREEMPT_WHILE_BORROWING_FLAG: ("Department-a=LowerPriority",)}
    )
    assert policy is not None
    config = EngineConfig()
    report = whatif.what_if(
        _borrowed().history(),
        whatif.WhatIfSpec(
            baseline=whatif.Variant(config=config),
            changed=whatif.Variant(config=config, zone_policy=policy),
        ),
    )
    assert (report.overall.baseline.admitted, report.overall.whatif.admitted) == (1, 2)
    assert (report.overall.baseline.preemptions, report.overall.whatif.preemptions) == (0, 1)
    assert report.whatif.zone_policy == "--preempt-while-borrowing Department-a=LowerPriority"


@pytest.mark.parametrize(
    ("flag", "raw", "says"),
    [
        (
            whatif.PREEMPT_WHILE_BORROWING_FLAG,
            "Department-a=Always",
            "must be Never, LowerPriority",
        ),
        (whatif.RECLAIM_WITH_OWN_VICTIMS_FLAG, "Department-a=yes", 'must be "true" or "false"'),
        (whatif.WITHIN_QUOTA_REQUEST_FLAG, "Department-a", "expected NODE=VALUE"),
    ],
)
def test_bad_preemption_flags_name_the_flag(flag: str, raw: str, says: str) -> None:
    with pytest.raises(whatif.ZonePolicyError) as raised:
        whatif.parse_zone_policy((), (), None, {flag: (raw,)})
    assert raised.value.flag == flag and says in str(raised.value), raised.value


@pytest.mark.parametrize("within_min", [False, True])
def test_p3_the_reclaim_preview_says_why_a_large_request_takes_nothing(within_min: bool) -> None:
    attributes = {"usher.io/within-quota": "LowerPriority"}
    if within_min:
        attributes[REQUEST] = "WithinMin"
    log = Log().tree(0, _tree(attributes))
    log.job(1, "user-a/lo", 80).job(2, "user-a/big", 70, priority=5)
    engine = _engine(log, last_decided=False)
    why, victims = engine.reclaim_preview(WorkloadKey("user-a/big"), Millis(BASE_MS + 5000))
    if within_min:
        assert why is not None and "usher.io/within-quota-request: WithinMin" in why, why
        assert victims == []
    else:
        assert why is None
        assert [v.workload for v in victims] == ["user-a/lo"]


@pytest.mark.parametrize(
    ("value", "admitted"), [("LowerPriority", True), ("LowerPriorityBorrowersOnly", False)]
)
def test_p2_borrowers_only_takes_nothing_of_the_lenders_guarantee(
    value: str, admitted: bool
) -> None:
    """B (min 40) borrows 40 with user-c/borrow (80): taking it leaves B at 0 < 40. Kueue's
    LowerPriority takes it; BorrowersOnly does not, and the proposal is refused likewise."""
    log = Log().tree(0, _tree({BORROW: value})).job(1, "user-c/borrow", 80)
    log.job(2, "user-a/big", 70, priority=5)
    big = WorkloadKey("user-a/big")
    assert (_engine(log).state.jobs[big].state == "Admitted") is admitted
    proposal = _engine(log, last_decided=False).check_preemption(
        big, [WorkloadKey("user-c/borrow")], Millis(BASE_MS + 5000)
    )
    if admitted:
        assert proposal is None
    else:
        assert proposal is not None and "would hold less than its min" in proposal.message
