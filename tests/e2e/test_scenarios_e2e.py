"""Every scenario (the project's shared ones, else the repository's) equals ``usher sim`` live.

emulator -> watcher -> NATS -> dequeuer / preemptor -> ledger -> watcher -> emulator: the final
job states, queue orders (as the watcher's Queue objects show them) and quota usage (as the
ledger holds it) are those the pure simulator computes for the same file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from tests.conftest import REPO, Infra
from tests.e2e.checks import assert_log_invariants
from tests.e2e.harness import (
    InProcessStack,
    Outcome,
    expected_quota,
    keys,
    kube_api,
    outcome,
    play,
)
from usher.adapters.nats.subjects import Subjects
from usher.core.history import sim
from usher.local.kube_emulator import KubeEmulator

# kube-queue's ElasticQuotaTree walkthrough, its three scenarios (tests/cli/test_cli_sim.py
# checks them with `usher sim --check` too).
_WALKTHROUGH = [
    "01-walkthrough-round.yaml",
    "02-walkthrough-block.yaml",
    "03-walkthrough-reclaim.yaml",
]
SCENARIOS = [REPO / "tests" / "scenarios" / name for name in _WALKTHROUGH]


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig", kubelet=True) as emulator:
        yield emulator


def simulated(path: Path) -> Outcome:
    scenario = sim.load_scenario(sim_yaml(path), str(path))
    result = sim.run(scenario)
    return Outcome(
        jobs={str(k): v.state for k, v in result.jobs.items()},
        queues={str(q): [str(e.job) for e in entries] for q, entries in result.queues.items()},
        quota=expected_quota(result.quota_used),
        preempted=keys(result.preempted),
    )


def sim_yaml(path: Path) -> object:
    import yaml

    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
async def test_scenario_through_the_whole_system_matches_sim(
    path: Path,
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    emu: KubeEmulator,
) -> None:
    want = simulated(path)
    config = sim.load_scenario(sim_yaml(path), str(path)).config
    stack = InProcessStack(
        nats_url=infra.nats_url,
        database_url=migrated_url,
        subjects=subjects,
        kubeconfig=emu.kubeconfig_path,
        engine=config,
    )
    await stack.start()
    try:
        async with kube_api(emu) as api:
            await play(path, api, js, subjects)
            got = await _settled_outcome(api, js, subjects, migrated_url, config, want)
        assert not stack.failures()
    finally:
        await stack.stop()
    assert got.jobs == want.jobs
    assert {q: v for q, v in got.queues.items() if v} == {q: v for q, v in want.queues.items() if v}
    assert got.quota == want.quota
    assert got.preempted == want.preempted
    await assert_log_invariants(js, subjects, config)


async def _settled_outcome(api, js, subjects, database_url, config, want: Outcome) -> Outcome:  # type: ignore[no-untyped-def]
    # Queue objects are written rate-limited: give the watcher a moment to catch up.
    deadline = time.monotonic() + 10
    while True:
        got = await outcome(api, js, subjects, database_url, config)
        if got == want or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.2)
