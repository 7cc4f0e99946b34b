"""The emulator's kubelet plays a Job's pods one by one when the Job carries a playbook.

``emulator.usher.io/*`` annotations make pods slow to get ready, OOMKilled below a memory
request, fail with an exit code, or finish at different times; the Job's status is then counted
from its pods as the Job controller does (``active``, ``ready``, ``succeeded``, ``failed``,
``completedIndexes``, ``spec.successPolicy``, ``spec.backoffLimit``), and the pods look as
kubectl shows them in a real cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_kube_emulator_kubectl import kubectl, needs_kubectl
from tests.builders.manifests import batch_job, container, pod_template
from tests.services.helpers import eventually
from usher.local.kube_emulator import KubeEmulator, resource
from usher.local.kube_emulator.playbook import fate, playbook
from usher.local.kube_emulator.played import format_indexes, parse_indexes, success_rule_met

JOBS = resource("batch", "v1", "jobs")
PODS = resource("", "v1", "pods")
NODES = resource("", "v1", "nodes")


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubelet=True) as emulator:
        emulator.store.create(NODES, None, {"metadata": {"name": "node-a"}})
        yield emulator


def played_job(
    name: str,
    annotations: dict[str, str],
    *,
    pods: int = 2,
    memory: str = "4Gi",
    spec: dict[str, Any] | None = None,
    completions: int | None = None,
) -> Any:
    return batch_job(
        name,
        "team",
        template=pod_template(container(cpu="1", memory=memory)),
        suspend=None,
        parallelism=pods,
        completions=pods if completions is None else completions,
        annotations=annotations,
        spec=spec,
    )


def pods_of(emu: KubeEmulator, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in emu.store.objects(PODS)
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job
    ]


def status(emu: KubeEmulator, job: str) -> dict[str, Any]:
    return dict(emu.store.get(JOBS, "team", job).get("status") or {})


def conditions(emu: KubeEmulator, job: str) -> dict[str, str]:
    return {c["type"]: c.get("reason", "") for c in status(emu, job).get("conditions") or []}


async def until(check: Callable[[], bool], within: float = 10.0) -> None:
    async def checked() -> bool:
        return check()

    assert await eventually(checked, timeout_s=within), "timed out"


def test_the_playbook_reads_its_annotations_and_ignores_what_does_not_parse() -> None:
    assert playbook({"metadata": {"annotations": {"usher.io/sim-duration": "3"}}}) is None
    book = playbook(
        {
            "metadata": {
                "annotations": {
                    "emulator.usher.io/never-ready-seconds": "2",
                    "emulator.usher.io/pod-durations-seconds": "1,x,30",
                    "emulator.usher.io/oom-below-memory": "6Gi",
                    "emulator.usher.io/fail-exit-code": "not-a-number",
                }
            }
        }
    )
    assert book is not None
    assert (book.not_ready_s, book.durations, book.oom_below, book.exit_code) == (
        2.0, (1.0, 30.0), 6 * 2**30, None
    )  # fmt: skip
    small = fate(book, [container(memory="4Gi")], 0)
    big = fate(book, [container(memory="6Gi")], 5)  # past the list: the last duration
    assert (small.ready_after, small.ends_after, small.fails) == (2.0, 3.0, True)
    assert dict(small.containers)["main"].reason == "OOMKilled"
    assert (big.ends_after, big.fails) == (32.0, False)


def test_index_sets_read_and_write_as_kubernetes_does() -> None:
    assert parse_indexes("0,2-4,7") == {0, 2, 3, 4, 7}
    assert format_indexes({0, 2, 3, 4, 7}) == "0,2-4,7"
    rules = {"successPolicy": {"rules": [{"succeededIndexes": "1-4", "succeededCount": 3},
                                         {"succeededIndexes": "0,5"}]}}  # fmt: skip
    assert success_rule_met(rules, {1, 3, 5}) is None  # the example of the Kubernetes docs
    assert success_rule_met(rules, {0, 5}) == 1
    assert success_rule_met(rules, {1, 2, 4}) == 0


async def test_pods_stay_unready_for_the_seconds_asked_then_the_job_counts_them_ready(
    emu: KubeEmulator,
) -> None:
    emu.store.create(
        JOBS, "team", played_job("slow", {"emulator.usher.io/never-ready-seconds": "0.6"})
    )
    await until(lambda: len(pods_of(emu, "slow")) == 2)
    await until(lambda: all(p["status"]["phase"] == "Running" for p in pods_of(emu, "slow")))
    for pod in pods_of(emu, "slow"):
        ready = {c["type"]: c for c in pod["status"]["conditions"]}["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "ContainersNotReady")
        [main] = pod["status"]["containerStatuses"]
        assert (main["ready"], main["started"], list(main["state"])) == (False, True, ["running"])
    assert (status(emu, "slow")["active"], status(emu, "slow")["ready"]) == (2, 0)
    await until(lambda: status(emu, "slow").get("ready") == 2)
    assert all(
        p["status"]["containerStatuses"][0]["ready"] for p in pods_of(emu, "slow")
    ) and "Complete" not in conditions(emu, "slow")  # no duration: runs on


async def test_a_container_below_the_memory_asked_is_oomkilled_and_the_job_fails(
    emu: KubeEmulator,
) -> None:
    oom = {"emulator.usher.io/oom-below-memory": "6Gi", "usher.io/sim-duration": "0.2"}
    emu.store.create(JOBS, "team", played_job("small", oom, spec={"backoffLimit": 1}, pods=1))
    emu.store.create(JOBS, "team", played_job("big", oom, memory="6Gi", pods=1))
    await until(lambda: "Failed" in conditions(emu, "small"))
    await until(lambda: "Complete" in conditions(emu, "big"))
    assert conditions(emu, "small")["Failed"] == "BackoffLimitExceeded"
    # backoffLimit 1: one replacement pod, then two failures are one too many.
    failed = pods_of(emu, "small")
    assert len(failed) == 2 and status(emu, "small")["failed"] == 2
    for pod in failed:
        assert pod["status"]["phase"] == "Failed"
        ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (ended["reason"], ended["exitCode"]) == ("OOMKilled", 137)
    [done] = pods_of(emu, "big")
    ended = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (done["status"]["phase"], ended["reason"], ended["exitCode"]) == (
        "Succeeded",
        "Completed",
        0,
    )
    assert status(emu, "big")["succeeded"] == 1 and "active" not in status(emu, "big")


async def test_an_exit_code_fails_the_pods_with_reason_error(emu: KubeEmulator) -> None:
    annotations = {"emulator.usher.io/fail-exit-code": "3"}
    emu.store.create(JOBS, "team", played_job("bad", annotations, spec={"backoffLimit": 0}))
    await until(lambda: "Failed" in conditions(emu, "bad"))
    ended = [
        p["status"]["containerStatuses"][0]["state"]["terminated"] for p in pods_of(emu, "bad")
    ]
    assert {(e["reason"], e["exitCode"]) for e in ended} == {("Error", 3)}


async def test_pods_finish_at_their_own_times_and_the_job_counts_each(emu: KubeEmulator) -> None:
    durations = {"emulator.usher.io/pod-durations-seconds": "0.1,0.3,30"}
    emu.store.create(JOBS, "team", played_job("staggered", durations, pods=3))
    await until(lambda: status(emu, "staggered").get("succeeded") == 2)
    seen = status(emu, "staggered")
    assert (seen["active"], seen["ready"]) == (1, 1) and "Complete" not in conditions(
        emu, "staggered"
    )
    phases = sorted(p["status"]["phase"] for p in pods_of(emu, "staggered"))
    assert phases == ["Running", "Succeeded", "Succeeded"]
    # Suspending removes the pod still running; the finished ones stay, as in a cluster.
    job = emu.store.get(JOBS, "team", "staggered")
    job["spec"]["suspend"] = True
    emu.store.update(JOBS, "team", "staggered", job)
    await until(lambda: len(pods_of(emu, "staggered")) == 2)
    assert (
        "Suspended" in conditions(emu, "staggered") and status(emu, "staggered")["succeeded"] == 2
    )
    job = emu.store.get(JOBS, "team", "staggered")
    job["spec"]["suspend"] = False
    emu.store.update(JOBS, "team", "staggered", job)
    # Resumed: one pod for the one completion left, and it is the job's fourth pod.
    await until(lambda: len(pods_of(emu, "staggered")) == 3)
    assert status(emu, "staggered")["active"] == 1


async def test_an_indexed_job_completes_by_its_success_policy_and_removes_the_rest(
    emu: KubeEmulator,
) -> None:
    rule = {"succeededIndexes": "0-2", "succeededCount": 2}
    spec = {"completionMode": "Indexed", "successPolicy": {"rules": [rule]}}
    durations = {"emulator.usher.io/pod-durations-seconds": "0.1,0.2,30,30"}
    emu.store.create(JOBS, "team", played_job("indexed", durations, pods=4, spec=spec))
    await until(lambda: "Complete" in conditions(emu, "indexed"))
    assert conditions(emu, "indexed") == {
        "SuccessCriteriaMet": "SuccessPolicy",
        "Complete": "SuccessPolicy",
    }
    seen = status(emu, "indexed")
    assert (seen["succeeded"], seen["completedIndexes"], seen.get("active")) == (2, "0-1", None)
    await until(lambda: len(pods_of(emu, "indexed")) == 2)  # the lingering pods are removed
    names = sorted(p["metadata"]["name"] for p in pods_of(emu, "indexed"))
    assert [n.split("-")[1] for n in names] == ["0", "1"]  # <job>-<index>-<suffix>
    for pod in pods_of(emu, "indexed"):
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index


@needs_kubectl
async def test_kubectl_shows_unready_and_oomkilled_pods_as_in_a_cluster(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    emu.store.create(
        JOBS, "team", played_job("slow", {"emulator.usher.io/never-ready-seconds": "60"}, pods=1)
    )
    oom = {"emulator.usher.io/oom-below-memory": "6Gi"}
    emu.store.create(JOBS, "team", played_job("oom", oom, pods=1, spec={"backoffLimit": 0}))
    await until(lambda: "Failed" in conditions(emu, "oom"))
    await until(lambda: [p["status"]["phase"] for p in pods_of(emu, "slow")] == ["Running"])
    code, out = await kubectl(emu, tmp_path, "get", "pods", "-n", "team")
    assert code == 0, out
    rows = {line.split()[0].rsplit("-", 1)[0]: line.split()[1:3] for line in out.splitlines()[1:]}
    assert rows == {"slow": ["0/1", "Running"], "oom": ["0/1", "OOMKilled"]}
    code, out = await kubectl(emu, tmp_path, "get", "jobs", "-n", "team", "oom")
    assert code == 0 and out.splitlines()[1].split()[1] == "Failed", out


async def test_a_job_without_a_playbook_keeps_its_whole_job_timing(emu: KubeEmulator) -> None:
    emu.store.create(JOBS, "team", played_job("plain", {"usher.io/sim-duration": "0.2"}))
    await until(lambda: "Complete" in conditions(emu, "plain"))
    assert all("emulator.usher.io/pod-ordinal" not in (p["metadata"].get("annotations") or {})
               for p in pods_of(emu, "plain"))  # fmt: skip
