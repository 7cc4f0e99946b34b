"""Fan-out against a real ``usher up --no-demo``, as a person types it and as a notebook calls it.

A 30-day fan-out whose 15th day fails: ``usher submit --for-each-day ... --wait`` exits 1 and
names that day; every job carries the group's label, its day's tag and ``DAY`` in its
environment; ``usher jobs/wait/delete --group`` treat the 30 as one. A Ctrl-C in the middle of
a fan-out of thousands of days says how many were created and which were not, and that count is
exactly what the Kubernetes API holds. The Python client does the same, blocking and asyncio.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.stack_process import USHER, UpProcess, clean_env, poll, usher
from usher.adapters.kube import KubeClient, Resource
from usher.client import AsyncClient, Client, JobRequest
from usher.client.errors import GroupIncomplete
from usher.client.fanout import GROUP_LABEL, VALUE_LABEL, for_each, for_each_day

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"
JOBS = Resource("batch", "v1", "jobs", "Job")
QUEUE_A = "root-department-a-user-a"
DEPARTMENT_B = "root/Department-b"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("fanout") / "home"
    with UpProcess(home, ("--no-demo", "--no-console")) as up:
        up.stack()
        _ok(home, "apply", "-f", str(TREE))
        poll(lambda: True if QUEUE_A in _ok(home, "queues") else None)
        yield home


def _ok(home: Path, *args: str) -> str:
    result = usher(home, *args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def _kube(home: Path, work: Any) -> Any:
    stack = json.loads((home / "stack.json").read_text())

    async def run() -> Any:
        async with await KubeClient.from_kubeconfig(Path(stack["kubeconfig"])) as kube:
            return await work(kube)

    return asyncio.run(run())


def _group_jobs(home: Path, group: str) -> list[dict[str, Any]]:
    async def listed(kube: KubeClient) -> list[dict[str, Any]]:
        return (await kube.list(JOBS, label_selector=f"{GROUP_LABEL}={group}")).items

    found: list[dict[str, Any]] = _kube(home, listed)
    return found


def _background(home: Path, out: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(out, "wb") as sink:
        return subprocess.Popen(
            [*USHER, *args], env=clean_env(home), stdout=sink, stderr=subprocess.STDOUT
        )


def test_a_30_day_fan_out_with_one_failing_day_exits_1_naming_it(
    home: Path, tmp_path: Path
) -> None:
    _ok(home, "hold", QUEUE_A, "--reason", "until day 15 is set to fail")
    out = tmp_path / "submit.out"
    days = "2026-01-01..2026-01-30"
    args = ["-n", "user-a", "--name", "day", "--image", "x", "--cpu", "1", "--duration", "0.2"]
    submit = _background(
        home, out, "submit", *args, "--for-each-day", days, "--wait", "--timeout", "120"
    )
    try:
        poll(lambda: True if "group day: 30 jobs created" in out.read_text() else None)
        patch = {"metadata": {"annotations": {"usher.io/sim-result": "Failed"}}}
        _kube(home, lambda kube: kube.merge_patch(JOBS, "user-a", "day-2026-01-15", patch))
        _ok(home, "resume", QUEUE_A)
        assert submit.wait(timeout=120) == 1, out.read_text()
    finally:
        if submit.poll() is None:
            submit.kill()
    text = out.read_text()
    assert "usher:   user-a/day-2026-01-15 (failed)" in text
    assert text.rstrip().splitlines()[-1] == (
        "usher: group day: 1 of 30 failed: user-a/day-2026-01-15"
    )

    jobs = {j["metadata"]["name"]: j for j in _group_jobs(home, "day")}
    assert sorted(jobs) == [f"day-2026-01-{d:02d}" for d in range(1, 31)]
    third = jobs["day-2026-01-03"]
    assert third["metadata"]["labels"][VALUE_LABEL] == "2026-01-03"
    env = third["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DAY", "value": "2026-01-03"} in env
    assert {"name": "USHER_GROUP", "value": "day"} in env

    listed = json.loads(_ok(home, "jobs", "--group", "day", "-o", "json"))
    assert len(listed) == 30
    assert [j["job"] for j in listed if j["succeeded"] is False] == ["user-a/day-2026-01-15"]

    again = usher(home, "wait", "--group", "day")
    assert again.returncode == 1
    assert "usher: group day: 1 of 30 failed: user-a/day-2026-01-15" in again.stderr

    deleted = _ok(home, "delete", "--group", "day")
    assert deleted.rstrip().splitlines()[-1] == "group day: 30 jobs deleted"
    assert _group_jobs(home, "day") == []
    gone = usher(home, "wait", "--group", "day")
    assert gone.returncode == 3 and "no job of group 'day'" in gone.stderr


def test_ctrl_c_in_a_large_fan_out_says_exactly_what_was_created(
    home: Path, tmp_path: Path
) -> None:
    _ok(home, "hold", DEPARTMENT_B, "--reason", "nothing of this group runs")
    out = tmp_path / "submit.out"
    days = "2000-01-01..2026-01-01"  # 9498 days
    submit = _background(
        home, out, "submit", "-n", "user-c", "--name", "big", "--image", "x", "--cpu", "1",
        "--for-each-day", days,
    )  # fmt: skip
    try:
        poll(lambda: True if " created (" in out.read_text() else None, every=0.05)
        submit.send_signal(signal.SIGINT)
        assert submit.wait(timeout=120) == 130, out.read_text()
    finally:
        if submit.poll() is None:
            submit.kill()
    text = out.read_text()
    made = re.search(r"usher: created (\d+) of 9498 jobs: ", text)
    missing = re.search(r"usher: not created (\d+) of 9498: ", text)
    assert made and missing, text
    created, not_created = int(made[1]), int(missing[1])
    assert created + not_created == 9498 and 0 < created < 9498
    assert "usher: group big: interrupted" in text
    assert len(_group_jobs(home, "big")) == created
    assert len([line for line in text.splitlines() if " created (" in line]) == created
    _ok(home, "delete", "--group", "big")
    _ok(home, "resume", DEPARTMENT_B)


def test_ctrl_c_in_a_notebook_raises_what_the_fan_out_created(home: Path) -> None:
    """The blocking client: a Ctrl-C (KeyboardInterrupt in the caller's thread) while
    ``submit_each`` runs cancels it on the client's loop and raises ``GroupIncomplete``."""
    _ok(home, "hold", DEPARTMENT_B)
    request = JobRequest(namespace="user-c", image="x", cpu="1")
    interrupted: list[bool] = []

    def ctrl_c_after_the_first(_made: Any) -> None:
        if not interrupted:
            interrupted.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # Jupyter's interrupt: SIGINT to the kernel

    with Client(home=home) as client, pytest.raises(GroupIncomplete) as stopped:
        client.submit_each(
            for_each_day("2000-01-01..2020-01-01"),
            request,
            group="nb",
            on_created=ctrl_c_after_the_first,
        )
    report = stopped.value
    assert report.interrupted and report.group == "nb"
    assert len(report.created) + len(report.not_created) == 7306
    assert 0 < len(report.created) < 7306
    assert sorted(report.created) == sorted(
        f"user-c/{j['metadata']['name']}" for j in _group_jobs(home, "nb")
    )
    _ok(home, "delete", "--group", "nb")
    _ok(home, "resume", DEPARTMENT_B)


def test_the_python_client_fans_out_blocking_and_async(home: Path) -> None:
    request = JobRequest(namespace="user-c", image="x", cpu="1", duration_s=0.2)
    with Client(home=home) as client:
        made = client.submit_each(for_each("LR=0.1,0.01"), request, group="lr")
        assert [j.job for j in made.jobs] == ["user-c/lr-0-1", "user-c/lr-0-01"]
        result = client.wait_group("lr", timeout=60)
        assert result.ok and len(result.jobs) == 2
        assert len(client.delete_group("lr")) == 2

    async def notebook() -> list[str]:
        async with AsyncClient(home=home) as client:
            made = await client.submit_each(
                for_each_day("D=2026-01-01..2026-01-04", weekdays=True), request, group="wk"
            )
            result = await client.wait_group(made.group, "user-c", timeout=60)
            assert result.ok, result
            return sorted(j.job for j in result.jobs)

    assert asyncio.run(notebook()) == ["user-c/wk-2026-01-01", "user-c/wk-2026-01-02"]


def test_a_wide_task_is_one_indexed_job_admitted_at_its_parallelism(
    home: Path, tmp_path: Path
) -> None:
    """The how-to's advice for very wide work: 6 shards, 2 pods at a time, one workload."""
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "shards",
            "namespace": "user-c",
            "annotations": {"usher.io/sim-duration": "0.2"},
        },
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "completions": 6,
            "parallelism": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "command": ["sh", "-c", "run --shard $JOB_COMPLETION_INDEX"],
                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
                        }
                    ],
                }
            },
        },
    }
    path = tmp_path / "shards.yaml"
    path.write_text(json.dumps(manifest))
    done = usher(home, "submit", str(path), "--wait", "--timeout", "60")
    assert done.returncode == 0, done.stderr
    listed = json.loads(_ok(home, "jobs", "-n", "user-c", "-o", "json"))
    shards = next(j for j in listed if j["name"] == "shards")
    assert shards["requests"]["cpu"] == "2" and shards["succeeded"] is True
