"""Leader election with real processes: two dequeuers of one zone, a ledger, one SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from schemas import Admitted, QuotaTreeApplied, Zone
from tests.builders.events import observed
from tests.builders.trees import two_leaf_tree
from tests.conftest import Infra
from tests.services.helpers import eventually, log_events, publish
from usher.adapters.nats.subjects import Subjects
from usher.local.processes import ManagedProcess

TTL_S = 3.0


def _process(
    name: str, argv: list[str], env: dict[str, str], logs: Path, instance: str
) -> ManagedProcess:
    return ManagedProcess(
        name,
        [sys.executable, "-m", "usher", "run", *argv],
        logs / f"{name}.log",
        env={**os.environ, **env, "USHER_INSTANCE": instance},
    )


async def _admissions(js: JetStreamContext, subjects: Subjects) -> Counter[str]:
    return Counter(e.workload for e in await log_events(js, subjects) if isinstance(e, Admitted))


async def _wait_for_log(proc: ManagedProcess, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in proc.log_path.read_text(errors="replace"):
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.mark.e2e
async def test_one_dequeuer_decides_and_a_standby_takes_over_after_a_kill(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    tmp_path: Path,
) -> None:
    env = {
        "USHER_NATS_URL": infra.nats_url,
        "USHER_DATABASE_URL": migrated_url,
        "USHER_PREFIX": subjects.prefix,
        "USHER_HOME": str(tmp_path / "home"),  # no stack.json: settings come from here
        "USHER_LEADER_TTL_SECONDS": str(TTL_S),
        "USHER_METRICS_PORT": "0",
        "USHER_SNAPSHOTS": "off",
    }
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    ledger = _process("ledger", ["ledger"], env, tmp_path, "ledger-1")
    first = _process("dequeuer-1", ["dequeuer", "--zone", "a"], env, tmp_path, "dq-1")
    second = _process("dequeuer-2", ["dequeuer", "--zone", "a"], env, tmp_path, "dq-2")
    procs = [ledger, first, second]
    try:
        ledger.start()
        first.start()
        assert await _wait_for_log(first, "leadership acquired", 20), first.log_tail()
        second.start()
        assert await _wait_for_log(second, "standby", 20), second.log_tail()

        # Both follow the log; only the leader decides: each workload admitted once.
        for name in ("w1", "w2"):
            await publish(
                js, subjects.job(Zone("a"), "a1", name), observed("a1", name, 10, zone="a")
            )

        async def both_admitted() -> Counter[str]:
            seen = await _admissions(js, subjects)
            return seen if {"a1/w1", "a1/w2"} <= seen.keys() else Counter()

        assert await eventually(both_admitted, timeout_s=15), first.log_tail()
        assert "pass reserved" in first.log_path.read_text()
        assert "pass reserved" not in second.log_path.read_text()

        # The leader dies without a word: the standby must take over once the key expires.
        assert first.popen is not None
        killed_at = time.monotonic()
        os.kill(first.popen.pid, signal.SIGKILL)
        first.popen.wait(timeout=10)
        assert await _wait_for_log(second, "leadership acquired", 15), second.log_tail()
        handover_s = time.monotonic() - killed_at
        assert handover_s < 15
        print(f"handover after SIGKILL: {handover_s:.2f}s (TTL {TTL_S:g}s)")

        for name in ("w3", "w4"):
            await publish(
                js, subjects.job(Zone("a"), "a1", name), observed("a1", name, 10, zone="a")
            )

        async def all_admitted() -> Counter[str]:
            seen = await _admissions(js, subjects)
            return seen if {"a1/w3", "a1/w4"} <= seen.keys() else Counter()

        seen = await eventually(all_admitted, timeout_s=15)
        assert seen, second.log_tail()
        assert set(seen) == {"a1/w1", "a1/w2", "a1/w3", "a1/w4"}
        assert all(count == 1 for count in seen.values()), seen  # no double decision
        assert "pass reserved" in second.log_path.read_text()
    finally:
        for proc in reversed(procs):
            proc.stop(timeout=10)
