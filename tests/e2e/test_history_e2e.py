"""History commands after real runs: the walkthrough's scenarios through the stack, then the CLI.

emulator -> watcher -> NATS -> dequeuer / preemptor -> ledger: the log and the ledger a real run
leaves behind are audited (no findings; every recorded pass re-run exactly), exported, tampered
with (the audit names the decision, or the pass that does not give it), replayed with other
settings (``what-if --oversell 2`` admits both jobs of walkthrough scenario 1), imported into
another installation, and explained (scenario 3's victim's Preempted history and reclaim reason).
Every command runs as a person would: ``python -m usher.cli ...``.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from nats.js import JetStreamContext

from tests.conftest import REPO, Infra
from tests.e2e.checks import assert_log_invariants
from tests.e2e.harness import InProcessStack, kube_api, play, quiesce
from usher.adapters.nats.log import delete_streams
from usher.adapters.nats.subjects import Subjects
from usher.core.history import sim
from usher.core.model.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator

SCENARIOS = REPO / "tests" / "scenarios"
WALKTHROUGH = [
    "01-walkthrough-round.yaml",
    "02-walkthrough-block.yaml",
    "03-walkthrough-reclaim.yaml",
]


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig", kubelet=True) as emulator:
        yield emulator


def config_of(path: Path) -> EngineConfig:
    return sim.load_scenario(yaml.safe_load(path.read_text()), str(path)).config


async def run_scenario(
    path: Path, infra: Infra, subjects: Subjects, js: JetStreamContext, url: str, emu: KubeEmulator
) -> None:
    """Play the scenario through the four services; the quiet log keeps every invariant."""
    stack = InProcessStack(
        nats_url=infra.nats_url,
        database_url=url,
        subjects=subjects,
        kubeconfig=emu.kubeconfig_path,
        engine=config_of(path),
    )
    await stack.start()
    try:
        async with kube_api(emu) as api:
            await play(path, api, js, subjects)
            await quiesce(js, subjects)
        assert not stack.failures()
    finally:
        await stack.stop()
    await assert_log_invariants(js, subjects, config_of(path))


async def usher(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("USHER_")}
    env["USHER_HOME"] = str(home)
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "usher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def tamper_first_admitted(source: Path, target: Path) -> tuple[int, str]:
    """Halve the requests of the first Admitted (JSON stays valid); its seq and event id."""
    lines = source.read_text().splitlines()
    out, found = [lines[0]], (0, "")
    for line in lines[1:]:
        entry = json.loads(line)
        event = entry["envelope"]["event"]
        if not found[0] and event["type"] == "decision.admitted.v1":
            event["requests"]["cpu"] //= 2
            found = (entry["seq"], entry["envelope"]["id"])
        out.append(json.dumps(entry))
    target.write_text("\n".join(out) + "\n")
    return found


def tamper_skip_the_ranked_first(source: Path, target: Path, instead: str) -> int:
    """Admit ``instead`` (waiting behind it) in place of the first job a recorded pass
    admitted; the seq of that pass's ``PassRan`` (D4)."""
    lines = source.read_text().splitlines()
    out, pass_seq, done = [lines[0]], 0, False
    for line in lines[1:]:
        entry = json.loads(line)
        event = entry["envelope"]["event"]
        if event["type"] == "pass.ran.v1" and not done:
            pass_seq = entry["seq"]
        elif pass_seq and not done and event["type"] == "decision.admitted.v1":
            event["workload"] = instead
            # On its own subject, as the ledger would write it (else it is merely forged).
            entry["subject"] = ".".join([*entry["subject"].split(".")[:-2], *instead.split("/")])
            done = True
        out.append(json.dumps(entry))
    target.write_text("\n".join(out) + "\n")
    return pass_seq


def count_types(exported: Path, *types: str) -> int:
    """How many entries of the exported log have one of ``types``."""
    lines = exported.read_text().splitlines()[1:]
    return sum(json.loads(line)["envelope"]["event"]["type"] in types for line in lines)


@pytest.mark.parametrize("name", WALKTHROUGH, ids=[n.removesuffix(".yaml") for n in WALKTHROUGH])
async def test_history_commands_after_a_real_run(
    name: str,
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    emu: KubeEmulator,
    tmp_path: Path,
) -> None:
    path = SCENARIOS / name
    await run_scenario(path, infra, subjects, js, migrated_url, emu)
    live = ["--nats", infra.nats_url, "--prefix", subjects.prefix]
    policy = ["--policy", config_of(path).policy]

    audited = await usher(
        tmp_path, "audit", *live, *policy, "--database", migrated_url, "--quiescent"
    )
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "ledger: " in audited.stdout and "OK" in audited.stdout

    exported = tmp_path / "log.jsonl"
    result = await usher(tmp_path, "log", "export", str(exported), *live)
    assert result.returncode == 0, result.stderr
    offline = await usher(tmp_path, "audit", "--file", str(exported), *policy)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    # Every pass that proposed something is on the log and was re-run exactly (D4).
    passes = count_types(exported, "pass.ran.v1")
    assert passes >= 1
    assert f"re-ran {passes} recorded pass" in offline.stdout, offline.stdout

    live_state = await usher(tmp_path, "replay", *live, *policy, "-o", "json")
    file_state = await usher(tmp_path, "replay", "--file", str(exported), *policy, "-o", "json")
    assert live_state.returncode == 0, live_state.stderr
    assert live_state.stdout == file_state.stdout

    tampered = tmp_path / "tampered.jsonl"
    seq, event_id = tamper_first_admitted(exported, tampered)
    caught = await usher(tmp_path, "audit", "--file", str(tampered), *policy)
    assert caught.returncode == 1, caught.stdout + caught.stderr
    assert f"seq {seq}" in caught.stdout and event_id in caught.stdout
    assert "wrong-requests" in caught.stdout

    if name.startswith("01"):
        skipped = tmp_path / "skipped.jsonl"
        pass_seq = tamper_skip_the_ranked_first(exported, skipped, "user-a/pi-2xtcj")
        caught = await usher(tmp_path, "audit", "--file", str(skipped), *policy)
        assert caught.returncode == 1, caught.stdout + caught.stderr
        assert "not-from-pass" in caught.stdout and f"pass at seq {pass_seq}" in caught.stdout
        await _what_if_oversell_two(tmp_path, exported)
    if name.startswith("03"):
        await _explain_the_victim(tmp_path, live)


async def _what_if_oversell_two(home: Path, exported: Path) -> None:
    result = await usher(home, "what-if", "--oversell", "2", "--file", str(exported), "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["overall"]["baseline"]["admitted"] == 1
    assert report["overall"]["whatif"]["admitted"] == 2
    assert report["overall"]["whatif"]["pending_at_end"] == 0
    [difference] = report["differences"]
    assert (difference["workload"], difference["action"]) == ("user-a/pi-2xtcj", "admit")
    assert difference["baseline_at"] is None and difference["whatif_at"] is not None


async def _explain_the_victim(home: Path, live: list[str]) -> None:
    result = await usher(home, "explain", "user-b/borrow", *live)
    assert result.returncode == 0, result.stderr
    assert "Pending" in result.stdout
    assert "Preempted" in result.stdout and "by user-c/urgent" in result.stdout
    assert "Reclaim: user-c/urgent reclaims the guarantee of root/Department-b" in result.stdout
    as_json = await usher(home, "explain", "user-b/borrow", *live, "-o", "json")
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["reclaim"]["possible"] is False
    whats = [line["what"] for line in doc["history"]]
    assert "Preempted" in whats and "Released" in whats
    unknown = await usher(home, "explain", "user-b/nobody", *live)
    assert unknown.returncode == 3 and "unknown job" in unknown.stderr


async def test_log_import_into_another_installation(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    emu: KubeEmulator,
    tmp_path: Path,
) -> None:
    await run_scenario(SCENARIOS / WALKTHROUGH[0], infra, subjects, js, migrated_url, emu)
    exported = tmp_path / "log.jsonl"
    source = ["--nats", infra.nats_url, "--prefix", subjects.prefix]
    assert (await usher(tmp_path, "log", "export", str(exported), *source)).returncode == 0
    other = Subjects(f"t{secrets.token_hex(4)}")
    target = ["--nats", infra.nats_url, "--prefix", other.prefix]
    try:
        imported = await usher(tmp_path, "log", "import", str(exported), *target)
        assert imported.returncode == 0, imported.stderr
        entries = len(exported.read_text().splitlines()) - 1
        assert f"imported {entries} entries" in imported.stdout
        refused = await usher(tmp_path, "log", "import", str(exported), *target)
        assert refused.returncode == 2 and "--force" in refused.stderr
        again = await usher(tmp_path, "log", "import", str(exported), *target, "--force")
        assert again.returncode == 0 and f"({entries} already there" in again.stdout
        original = await usher(tmp_path, "replay", *source, "-o", "json")
        copy = await usher(tmp_path, "replay", *target, "-o", "json")
        assert copy.returncode == 0, copy.stderr
        assert json.loads(copy.stdout)["jobs"] == json.loads(original.stdout)["jobs"]
        missing = await usher(tmp_path, "replay", "--nats", infra.nats_url, "--prefix", "nobody")
        assert missing.returncode == 4 and "no log stream NOBODY_LOG" in missing.stderr
    finally:
        await delete_streams(js, other)


async def test_audit_window_is_the_log_time_and_rejected_entries_do_not_fail_it(
    infra: Infra, subjects: Subjects, js: JetStreamContext, tmp_path: Path
) -> None:
    """On a real stream: garbage on a log subject is listed apart (exit 0), and ``--since``
    reads when the stream stored a decision, not the time its (forged) envelope claims."""
    from datetime import UTC, datetime

    from schemas import WorkloadKey
    from tests.builders.log import Log
    from usher.adapters.nats.log import publish_envelope

    async def publish(log: Log, start: int) -> list[int]:
        seqs = []
        for subject, envelope in log.entries[start:]:
            # As its owner records it, under this installation's prefix.
            mine = f"{subjects.prefix}.{subject.partition('.')[2]}"
            ack = await publish_envelope(js, mine, envelope)
            seqs.append(ack.seq)
        return seqs

    live = ("--nats", infra.nats_url, "--prefix", subjects.prefix, "--no-ledger", "-o", "json")
    log = Log().tree(0).job(1, "user-a/x", 60).admitted(2, "user-a/x", 60).job(3, "user-a/y", 60)
    await publish(log, 0)
    garbage = (await js.publish(f"{subjects.prefix}.cluster.test", b"\x00 not an envelope")).seq
    clean = await usher(tmp_path, "audit", *live)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    doc = json.loads(clean.stdout)
    assert doc["findings"] == [] and [r["seq"] for r in doc["rejected"]] == [garbage]

    await asyncio.sleep(0.05)
    window = datetime.now(UTC).isoformat()
    await asyncio.sleep(0.05)
    # An over-quota Admitted whose envelope claims a time 24 years before the window.
    log.admitted(-24 * 365 * 86400, "user-a/y", 60)
    [forged] = await publish(log, len(log.entries) - 1)
    caught = await usher(tmp_path, "audit", "--since", window, *live)
    assert caught.returncode == 1, caught.stdout + caught.stderr
    doc = json.loads(caught.stdout)
    # Only the forged admission is in the window; the ledger's rule (over-quota) and the
    # running-usage invariant (over-commit, per node over its cap) both name it.
    assert {(f["seq"], f["workload"]) for f in doc["findings"]} == {
        (forged, str(WorkloadKey("user-a/y")))
    }
    assert {f["check"] for f in doc["findings"]} == {"over-quota", "over-commit"}
    assert doc["decisions"] == 1  # the Admitted of x was stored before the window
    relative = await usher(tmp_path, "audit", "--since", "-30s", *live)
    assert {f["seq"] for f in json.loads(relative.stdout)["findings"]} == {forged}
    # An export keeps the stored times: offline, the window means the same.
    exported = tmp_path / "forged.jsonl"
    source = ("--nats", infra.nats_url, "--prefix", subjects.prefix)
    assert (await usher(tmp_path, "log", "export", str(exported), *source)).returncode == 0
    offline = await usher(
        tmp_path, "audit", "--since", window, "--file", str(exported), "-o", "json"
    )
    assert {f["seq"] for f in json.loads(offline.stdout)["findings"]} == {forged}
    assert json.loads(offline.stdout)["decisions"] == 1
