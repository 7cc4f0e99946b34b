"""`usher hold | drain | resume` as real processes against a real `usher up --no-demo`
(docs/admission-rules.md R14, R15): the ledger records each order with who asked, a job
below a held node waits saying so, `usher queues` shows the hold, bad orders are refused
naming the field, a resume admits again, and the log still passes `usher audit`."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tests.cli.stack_process import UpProcess, poll, usher, usher_json
from usher.cli.live import queue_lines
from usher.client.state import QueueInfo

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"
JOB = ["--image", "busybox", "--cpu", "10", "--memory", "1Gi"]
KUBECTL = shutil.which("kubectl")


def ok(home: Path, *args: str) -> str:
    result = usher(home, *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def _queue_rows(home: Path) -> str:
    """``kubectl get queue -o wide`` against the stack's emulator (R14: the HOLD column)."""
    stack = json.loads((home / "stack.json").read_text())
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", stack["kubeconfig"], "--cache-dir", str(home / "kube-cache"),
         "get", "queue", "-n", "kube-queue", "-o", "wide"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return result.stdout


def job(home: Path, key: str) -> dict[str, object] | None:
    return next((j for j in usher_json(home, "jobs") if j["job"] == key), None)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("holds") / "home"
    with UpProcess(home) as up:
        up.stack()
        ok(home, "apply", "-f", str(TREE))
        poll(lambda: usher_json(home, "queues") or None)
        yield home


def test_hold_then_resume_through_the_ledger(running: Path) -> None:
    home = running
    said = ok(home, "hold", "Department-a", "--reason", "GPU maintenance")
    assert said.strip() == (
        "root/Department-a held by admin: GPU maintenance; running work goes on"
    )
    ok(home, "submit", "--name", "waits", "-n", "user-a", *JOB)
    ok(home, "submit", "--name", "runs", "-n", "user-c", *JOB)

    def held() -> dict[str, object] | None:
        found = job(home, "user-a/waits")
        return found if found is not None and found.get("reason_code") == "Held" else None

    waiting = poll(held)
    assert waiting["state"] == "Pending"
    reason = str(waiting["reason"])
    assert reason.startswith("root/Department-a held by admin at ")
    assert reason.endswith(": GPU maintenance")
    poll(lambda: (job(home, "user-c/runs") or {}).get("state") == "Admitted" or None)
    queues = ok(home, "queues")
    assert queues.splitlines()[0].split()[-1] == "HOLD"
    assert "root/Department-a held by admin" in queues
    explained = ok(home, "explain", "user-a/waits")
    assert "Held" in explained and "GPU maintenance" in explained
    if KUBECTL is not None:
        wide = poll(lambda: _queue_rows(home) if "GPU maintenance" in _queue_rows(home) else None)
        lines = wide.splitlines()
        assert lines[0].split() == ["NAME", "AGE", "HOLD"]
        [held_row] = [line for line in lines if line.startswith("root-department-a-user-a")]
        assert "root/Department-a held by admin at " in held_row
        [free_row] = [line for line in lines if line.startswith("root-department-b-user-c")]
        assert free_row.split()[-1] == "<none>"

    assert ok(home, "resume", "root-department-a-user-a").strip() == (
        "root/Department-a resumed by admin"
    )
    poll(lambda: (job(home, "user-a/waits") or {}).get("state") == "Admitted" or None)
    assert "HOLD" not in ok(home, "queues").splitlines()[0]
    audit = usher(home, "audit")
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["hold", "root/nowhere"], 3, "usher: target: 'root/nowhere' names no node"),
        (["drain", "Department-b", "--grace", "-5"], 3, "usher: grace_seconds: grace must be"),
        (["drain", "Department-b", "--grace", "soon"], 2, "usher: --grace: expected seconds"),
        (
            ["resume", "Department-b"],
            3,
            "usher: target: root/Department-b is not held by an order",
        ),
    ],
)
def test_a_bad_order_is_refused_naming_the_field(
    running: Path, args: list[str], code: int, message: str
) -> None:
    result = usher(running, *args)
    assert result.returncode == code, result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_the_live_view_says_a_queue_is_held() -> None:
    queue = QueueInfo(
        name="root-a-a", quota="root/A", policy="Round", namespaces=["a"], pending=[], admitted=[]
    )
    assert queue_lines(queue) == ["queue root-a-a (root/A, Round): 0 pending, 0 admitted"]
    held = msgspec.structs.replace(queue, hold="root/A held by alice at 2026-11-24T10:00Z: why")
    assert queue_lines(held)[0].endswith("; held: root/A held by alice at 2026-11-24T10:00Z: why")
