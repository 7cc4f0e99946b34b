"""The Python client (`usher.client`), sync and async, against the whole system as processes.

The system is started in this process with ``EmbeddedSystem`` (what `usher up` runs); the
client submits through the emulator's Kubernetes API and reads states from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from schemas import Millis
from usher.adapters.pg.audit_reads import read_usage_intervals
from usher.adapters.stack_file import read_stack_info
from usher.client import (
    AlreadyExists,
    AsyncClient,
    BadInput,
    Client,
    JobInfo,
    JobRequest,
    NotFound,
    NotRunning,
    WaitTimeout,
    job_manifest,
)
from usher.client.manifests import KINDS, LAST_APPLIED, Document, apply_patch, for_create
from usher.core.history.usage import UsageBy, usage_totals
from usher.demo.driver import Burst, DemoDriver, WalkthroughJob
from usher.local.processes import pid_alive
from usher.local.system import EmbeddedSystem, SystemOptions

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"
CLASSES = REPO / "usher" / "demo" / "priority-classes.yaml"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedSystem]:
    """The whole system (servers, emulator, services as processes), tree and classes applied."""
    home = tmp_path_factory.mktemp("client") / "home"
    with pytest.MonkeyPatch.context() as env:
        for key in [k for k in os.environ if k.startswith("USHER_")]:
            env.delenv(key)  # the client must find this system through its stack.json only
        running = EmbeddedSystem(home, SystemOptions(zones=("a",)))
        info = running.start()
        try:
            with Client(home=home) as usher:
                applied = usher.apply(TREE) + usher.apply(CLASSES)
                assert [a.action for a in applied] == ["created", "created", "created"]
            yield running
        finally:
            running.stop()
    assert not [p for p in info.all_pids().values() if pid_alive(p)]


def test_the_blocking_client_submits_lists_and_waits(system: EmbeddedSystem) -> None:
    with Client(home=system.home) as usher:
        job = usher.submit(
            "train-1",
            namespace="user-a",
            image="pytorch:2",
            cpu=4,
            memory="8Gi",
            gpu=1,
            replicas=2,
            zone="a",
            duration=1,
            command=["python", "train.py"],
        )
        assert job.job == "user-a/train-1"
        assert job.label == "job.batch/train-1"
        seen: list[str] = []
        final = usher.wait(job.job, timeout=30, on_change=lambda j: seen.append(j.state))
        assert isinstance(final, JobInfo)
        assert final.state == "Finished" and final.succeeded is True
        assert "Admitted" in seen
        assert final.zone == "a"
        assert final.requests == {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}
        listed = {j.job: j for j in usher.list_jobs("user-a")}
        assert listed["user-a/train-1"].state == "Finished"
        assert usher.list_jobs("user-a", states=["Pending"]) == []


def test_the_async_client_shows_positions_and_reasons(system: EmbeddedSystem) -> None:
    async def scenario() -> tuple[JobInfo, JobInfo]:
        async with AsyncClient(home=system.home) as usher:
            big = await usher.submit("hold", namespace="user-c", image="x", cpu=90)
            await usher.wait(big.job, until="admitted", timeout=30)
            small = await usher.submit("next", namespace="user-c", image="x", cpu=20)
            with pytest.raises(WaitTimeout) as timed_out:
                await usher.wait(small.job, until="admitted", timeout=2)
            waiting = timed_out.value.job
            assert isinstance(waiting, JobInfo)
            queue = await usher.queue("root-department-b-user-c")
            assert [e.job for e in queue.pending] == ["user-c/next"]
            assert "user-c/hold" in queue.admitted
            quota = {q.path: q for q in await usher.quota()}
            assert quota["root/Department-b"].used["cpu"] == "90"
            assert quota["root/Department-b"].max["cpu"] == "100"
            return waiting, await usher.job("next", "user-c")

    waiting, again = asyncio.run(scenario())
    for job in (waiting, again):
        assert job.state == "Pending"
        assert job.position == 1
        assert job.reason_code == "QuotaExceeded"
        assert job.reason == "root/Department-b cpu 90 used + 20 requested > max 100 x 1.0"


def test_client_errors_are_typed(system: EmbeddedSystem, tmp_path: Path) -> None:
    with Client(home=system.home) as usher:
        with pytest.raises(BadInput, match="belongs to no leaf of the quota tree"):
            usher.submit(namespace="nowhere", image="x", cpu=1)
        with pytest.raises(BadInput, match=r"^memory: "):  # the parameter, not a CLI flag
            usher.submit(namespace="user-a", image="x", memory="lots")
        with pytest.raises(NotFound, match="no job user-a/never-submitted"):
            usher.job("user-a/never-submitted")
        with pytest.raises(NotFound, match="no queue 'nope'"):
            usher.queue("nope")
    with pytest.raises(NotRunning, match="no Usher is running"):
        Client(home=tmp_path)


def test_usage_from_the_log_equals_the_ledgers_intervals(system: EmbeddedSystem) -> None:
    """U1: what the client folds from the log is what the ledger's rows say, to the ms."""
    with Client(home=system.home) as usher:
        job = usher.submit("count-me", namespace="user-b", image="x", cpu=3, zone="a", duration=1)
        assert usher.wait(job.job, timeout=30).state == "Finished"
        until = datetime.now(UTC)
        until_ms = Millis(int(until.timestamp() * 1000))
        database = read_stack_info(system.home).database_url
        for by in ("node", "queue", "namespace"):

            def both(by: str = by) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
                # The ledger's rows first: the log carries them a moment later (its outbox),
                # so the fold of the log equals them once it has caught up with that read.
                intervals = asyncio.run(read_usage_intervals(database, None, None))
                ledger = usage_totals(
                    intervals, since_ms=None, until_ms=until_ms, now_ms=until_ms, by=UsageBy(by)
                )
                report = usher.usage(until=until, by=by)
                return {(r.group, r.resource): r.amount_ms for r in report.rows}, ledger

            deadline = time.monotonic() + 20
            folded, ledger = both()
            while folded != ledger and time.monotonic() < deadline:
                time.sleep(0.5)
                folded, ledger = both()
            assert folded == ledger
        by_ns = {(r.group, r.resource): r for r in usher.usage(by="namespace").rows}
        # At least the second it ran (3 cpu), in CPU-hours.
        assert by_ns[("user-b", "cpu")].amount_ms >= 3000 * 1000
        assert by_ns[("user-b", "cpu")].unit == "CPU-hours"
        with pytest.raises(BadInput, match=r"^by: 'team' is not one of node, queue, namespace"):
            usher.usage(by="team")
        with pytest.raises(BadInput, match=r"^since: .* is after until"):
            usher.usage(since=until, until=until - timedelta(hours=1))
        # B1: the demo tree carries no budget; the report says when it was taken.
        report = usher.budget()
        assert report.rows == [] and report.now_ms >= until_ms


def test_a_job_created_twice_is_a_typed_already_exists(system: EmbeddedSystem) -> None:
    """The API's 409 AlreadyExists is ``AlreadyExists`` (kind, namespace, name), still a
    ``BadInput`` with the same words; the demo driver run again passes over it by its type."""

    async def scenario() -> list[str]:
        said: list[str] = []
        async with AsyncClient(home=system.home) as usher:
            await usher.submit("twice", namespace="user-b", image="x", cpu=1)
            with pytest.raises(AlreadyExists) as again:
                await usher.submit("twice", namespace="user-b", image="x", cpu=1)
            assert isinstance(again.value, BadInput)
            assert (again.value.kind, again.value.namespace, again.value.name) == (
                "Job",
                "user-b",
                "twice",
            )
            assert again.value.message == "job.batch/twice already exists in namespace user-b"
            manifest = job_manifest(
                JobRequest(namespace="user-b", image="x", name="twice", cpu="1")
            )
            with pytest.raises(AlreadyExists, match=r"^job\.batch/twice already exists"):
                await usher.submit_manifest(manifest)
            driver = DemoDriver(usher, say=said.append)
            job = WalkthroughJob(0, "seeded-twice", "user-b", 1, 1, note="once")
            await driver._walkthrough_job(job)
            await driver._walkthrough_job(job)  # a restart replays the script: no error, no line
        return said

    assert asyncio.run(scenario()) == ["demo: job.batch/seeded-twice submitted (once)"]


def test_the_demo_plays_its_reclaim_burst_in_a_zone_with_a_node(system: EmbeddedSystem) -> None:
    """Pinned to zone ``default`` (no node here, zones a only) its pods stayed Pending while
    the Job completed; the burst goes where the OOM and stuck-gang steps go."""

    async def scenario() -> str | None:
        said: list[str] = []
        async with AsyncClient(home=system.home) as usher:
            driver = DemoDriver(usher, zones=system.options.zones, say=said.append)
            await driver._burst(Burst(replicas=1, cpu="1", memory=None))
            [line] = said
            key = line.removeprefix("demo: ").split(" ")[0]
            for _ in range(100):
                with contextlib.suppress(NotFound):
                    found = await usher.job(key)
                    if found.zone is not None:
                        return found.zone
                await asyncio.sleep(0.1)
        return None

    assert asyncio.run(scenario()) == "a"


# --------------------------------------------------------------------------- pure parts


def test_job_manifest_is_a_suspended_gang_of_identical_pods() -> None:
    manifest = job_manifest(
        JobRequest(
            namespace="user-a",
            image="docker.io/library/perl:5.34.0",
            cpu="10",
            memory="10Gi",
            replicas=6,
            priority_class="priority-2",
            zone="a",
            duration_s=30,
            command=("sleep", "1d"),
        )
    )
    assert manifest["metadata"] == {
        "namespace": "user-a",
        "generateName": "perl-",
        "labels": {"usher.io/zone": "a"},
        "annotations": {"usher.io/sim-duration": "30"},
    }
    spec = manifest["spec"]
    assert (spec["suspend"], spec["parallelism"], spec["completions"]) == (True, 6, 6)
    pod = spec["template"]["spec"]
    assert pod["priorityClassName"] == "priority-2"
    container = pod["containers"][0]
    assert container["command"] == ["sleep", "1d"]
    assert container["resources"]["requests"] == {"cpu": "10", "memory": "10Gi"}
    assert container["resources"]["limits"] == container["resources"]["requests"]


def test_job_manifest_names_every_bad_option() -> None:
    with pytest.raises(BadInput) as caught:
        job_manifest(JobRequest(namespace="User A", image="", cpu="-1", replicas=0))
    assert caught.value.lines == [
        "namespace 'User A' is not a valid name (lower-case letters, digits and '-', starting "
        "and ending with a letter or digit, at most 63 characters)",
        "image must not be empty",
        "replicas must be a whole number from 1 to 1000000, got '0'",
        "cpu: quantity '-1' is negative",
    ]


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"cpu": "\uff11\uff12"}, "cpu: quantity '\uff11\uff12' is not Kubernetes notation"),
        ({"cpu": " 5 "}, "cpu must be a quantity without surrounding spaces, got ' 5 '"),
        ({"memory": "1e300"}, "memory: quantity '1e300' is too large"),
        ({"duration_s": float("inf")}, "duration must be a decimal number of seconds from 0 to"),
        ({"duration_s": float("nan")}, "duration must be a decimal number of seconds from 0 to"),
        ({"duration_s": 1e300}, "duration must be a decimal number of seconds from 0 to"),
        ({"zone": "z" * 100_000}, "zone must be a zone name of at most 63 characters"),
        ({"zone": "NaN"}, "zone must be a zone name"),
    ],
)
def test_job_manifest_refuses_loose_values_naming_the_parameter(
    fields: dict[str, object], line: str
) -> None:
    """The client reads its parameters with the core's parsers: no fullwidth digits, spaces,
    non-finite or unbounded values, and a zone that could go into a subject."""
    request: dict[str, Any] = {"namespace": "user-a", "image": "x", "cpu": "1", **fields}
    with pytest.raises(BadInput) as caught:
        job_manifest(JobRequest(**request))
    assert caught.value.lines[0].startswith(line)
    assert len(caught.value.lines[0]) < 400


def test_apply_patch_is_three_way_and_never_touches_suspend() -> None:
    kind = KINDS[("batch/v1", "Job")]
    first = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "n", "labels": {"team": "a", "old": "x"}},
        "spec": {"suspend": True, "template": {"spec": {"containers": []}}},
    }
    live = for_create(Document("f", 1, first, kind))
    live["metadata"]["labels"]["usher.io/zone"] = "a"  # someone else's label
    live["spec"]["suspend"] = False  # admitted by Usher
    live["spec"]["backoffLimit"] = 6  # a server default
    assert apply_patch(Document("f", 1, first, kind), live) is None
    second = {**first, "metadata": {"name": "j", "namespace": "n", "labels": {"team": "b"}}}
    patch = apply_patch(Document("f", 1, second, kind), live)
    assert patch is not None
    annotations = patch["metadata"].pop("annotations")
    assert patch == {"metadata": {"labels": {"team": "b", "old": None}}}
    assert LAST_APPLIED in annotations
