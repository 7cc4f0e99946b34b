"""``Engine.preview_pass``: what a pass would decide, asked without deciding anything.

The preview must give exactly the decisions and the waiting workloads' views a real pass
gives on the same state, and leave the engine as it found it: every attribute and record
equal, the same snapshot bytes, the same answers, and the same decisions from its next pass.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import Millis, QuotaNode, QuotaTreeApplied
from tests.core.test_properties import Op, trees
from tests.core.test_snapshot import (
    RECLAIM_STORY,
    TWO_LEAVES,
    Step,
    World,
    _busy_engine,
    _observable,
    histories,
    snapshot_configs,
)
from usher.core.engine.facade import DERIVED_WRITTEN_BY_A_PASS, READ_BY_A_PASS, Engine
from usher.core.engine.snapshot import restore, snapshot
from usher.core.model.config import EngineConfig, Policy, WithinQuota
from usher.core.state.indexed import PENDING, QuotaNodeInfo


def _plain(value: Any) -> Any:
    """The value as plain, comparable data: records by their slots, nodes' ancestors by path."""
    if isinstance(value, QuotaNodeInfo):
        return tuple(
            tuple(a.path for a in value.ancestors)
            if name == "ancestors"
            else _plain(getattr(value, name))
            for name in QuotaNodeInfo.__slots__
        )
    if isinstance(value, dict):
        return [(_plain(k), _plain(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(map(repr, value))
    slots = getattr(type(value), "__slots__", None)
    if slots and not isinstance(value, msgspec.Struct):
        return (type(value).__name__, tuple(_plain(getattr(value, name)) for name in slots))
    return value


def _state(engine: Engine) -> Any:
    """Every attribute of the engine (caches included), in insertion order, as plain data."""
    return [(name, _plain(value)) for name, value in vars(engine).items()]


def _check_preview(engine: Engine, config: EngineConfig, now: Millis) -> None:
    assert engine.stale_offer_keys() == []
    before_state = _state(engine)
    before_bytes = snapshot(engine)
    real = copy.deepcopy(engine)  # the test may copy: it is the reference the preview must match

    preview = engine.preview_pass(now)

    assert _state(engine) == before_state
    assert snapshot(engine) == before_bytes
    decided = real.decide(now)
    assert msgspec.msgpack.encode(preview.decisions) == msgspec.msgpack.encode(decided)
    waiting = sorted(k for k, v in copy.deepcopy(engine).jobs().items() if v.state == PENDING)
    assert list(preview.waiting) == waiting
    assert preview.waiting == {key: real.job_state(key) for key in waiting}
    # Nothing of the preview leaked into the engine: its own pass is the reference's.
    assert msgspec.msgpack.encode(engine.decide(now)) == msgspec.msgpack.encode(decided)
    assert snapshot(engine) == snapshot(real)
    assert _observable(engine) == _observable(real)
    # And a snapshot restore (caches rebuilt) agrees with both.
    assert _observable(restore(snapshot(engine), config)) == _observable(real)


def test_every_engine_attribute_is_either_set_aside_or_only_read_by_a_pass() -> None:
    # A new attribute must be classified deliberately, or a preview could leak into it.
    written, read = set(DERIVED_WRITTEN_BY_A_PASS), set(READ_BY_A_PASS)
    assert set(vars(Engine())) == {"state"} | written | read
    assert not written & read


@pytest.mark.parametrize("policy", [Policy.ROUND, Policy.BLOCK])
@pytest.mark.parametrize("within", ["Never", "LowerPriority"])
def test_preview_at_every_step_of_a_reclaim_story(policy: Policy, within: WithinQuota) -> None:
    # The story has holds, preemptors, reclaims, stopping victims and wakeups at some step.
    config = EngineConfig(policy=policy, within_quota=within, min_runtime_ms=3000)
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=TWO_LEAVES), Millis(0))
    world = World(TWO_LEAVES, TWO_LEAVES)
    for number, step in enumerate(RECLAIM_STORY):
        world.step(engine, number, step)
        _check_preview(copy.deepcopy(engine), config, Millis(number * 1000 + 500))


def test_preview_of_a_busy_engine_and_of_an_empty_one() -> None:
    config = EngineConfig(min_runtime_ms=1000)
    _check_preview(_busy_engine(config), config, Millis(40_000))
    _check_preview(Engine(config), config, Millis(0))


@settings(max_examples=60, deadline=None)
@given(snapshot_configs, trees(), trees(), histories, st.data())
def test_preview_decides_as_a_pass_on_random_histories(
    config: EngineConfig,
    tree: QuotaNode,
    alternative: QuotaNode,
    history: list[Op | Step],
    data: st.DataObject,
) -> None:
    engine = Engine(config)
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    world = World(tree, alternative)
    split = data.draw(st.integers(0, len(history)), label="split")
    for number in range(split):
        world.step(engine, number, history[number])
    _check_preview(engine, config, Millis(split * 1000))
