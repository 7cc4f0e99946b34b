"""Quota safety under load on a tree where departments borrow and reclaim (issue 12).

The demo tree (Department-a min 60 / max 100, Department-b min 40 / max 100, root 100 cpu),
so idle guarantees are lent and taken back by preemption. A few hundred jobs of mixed sizes
(1-10 cpu x 1-3 pods), three priorities and three zones (two dequeuers plus ``default``) are
created in bursts of 20 per second through kubernetes-asyncio and run by the emulator's
kubelet for 0.2-1.2 s. Runs: no fault, and every service SIGKILLed once at a seeded moment,
each on three trees (``TREES``): the demo tree, it with lending policies (L1, L2:
``LENDING``), and it with the preemption policies P1-P3 (``PREEMPTION_POLICIES``);
one seed in ``make test`` (there the policy trees run without faults: ``RUNS``), several and
every tree killed in ``make test-long`` (``USHER_LOAD_SEEDS=1,2,3``).

Every run must end with every job completed, reclaim having happened (a run that never
preempts proves nothing about it), and the checks on the whole log and the ledger: each
workload admitted once more than it was preempted, never admitted while it still held a live
allocation, running usage (victims counted until released) within ``max`` at every instant of
the ledger's history, nothing live, nothing unpublished, and ``usher audit`` exiting 0.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from nats.js import JetStreamContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.builders.manifests import batch_job, container, pod_template
from tests.conftest import Infra
from tests.e2e.checks import (
    assert_audit_clean,
    assert_log_invariants,
    history_violations,
    story_checks,
)
from tests.e2e.harness import quiesce, read_log
from tests.e2e.procs import ServiceProcesses, start_emulator
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig

NAMESPACES = ("user-a", "user-b", "user-c")
PRIORITIES = {"low": 0, "mid": 100, "high": 1000}
ZONES = ("a", "b", "default")
DEMO = Path(__file__).resolve().parents[2] / "usher" / "demo"


LENDING = {
    "Department-a": {
        "usher.io/reclaim-within": "LowerPriority",
        "usher.io/lending-limit": "cpu=30",
    },
    "Department-b": {"usher.io/reclaim-within": "Never"},
}
"""L1 and L2 on the demo tree: Department-a lends at most 30 of its idle 60 cpu and reclaims
only from lower-priority borrowers; Department-b never reclaims, so it lends nothing."""


def walkthrough_tree(attributes: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """The demo tree, with ``attributes`` set on the children they name."""
    import yaml

    tree: dict[str, Any] = yaml.safe_load((DEMO / "walkthrough-tree.yaml").read_text())
    for child in tree["spec"]["root"]["children"]:
        child.setdefault("attributes", {}).update((attributes or {}).get(child["name"], {}))
    return tree


PREEMPTION_POLICIES: dict[str, dict[str, str]] = {
    "Department-a": {
        "usher.io/within-quota": "LowerPriority",
        "usher.io/reclaim-with-own-victims": "true",
        "usher.io/preempt-while-borrowing": "LowerPriorityBorrowersOnly:100",
    },
    "Department-b": {
        "usher.io/within-quota": "LowerPriority",
        "usher.io/within-quota-request": "WithinMin",
    },
}
"""The preemption policies (P1-P3) set on the walkthrough tree's departments for the
``policies`` variant: one search over own and cohort victims and preempting while borrowing
(up to priority 100) in Department-a, only requests within min preempting in Department-b."""


def policies_tree() -> dict[str, Any]:
    """The walkthrough tree with ``PREEMPTION_POLICIES`` on its departments."""
    tree = walkthrough_tree()
    for child in tree["spec"]["root"]["children"]:
        child["attributes"] = dict(PREEMPTION_POLICIES.get(child["name"], {}))
    return tree


def lending_tree() -> dict[str, Any]:
    """The walkthrough tree with ``LENDING`` on its departments."""
    return walkthrough_tree(LENDING)


TREES = {"walkthrough": walkthrough_tree, "lending": lending_tree, "policies": policies_tree}


def job(index: int, rng: random.Random) -> tuple[dict[str, Any], str]:
    """A job of a random size, priority and zone; its namespace/name."""
    namespace = NAMESPACES[rng.randrange(len(NAMESPACES))]
    name = f"lg-{index:04d}"
    cores = rng.randint(1, 10)
    pods = rng.randint(1, 3)
    zone = ZONES[rng.randrange(len(ZONES))]
    labels = {} if zone == "default" else {"usher.io/zone": zone}
    duration = f"{rng.uniform(0.2, 1.2):.2f}"
    priority = rng.choice(sorted(PRIORITIES))
    manifest = batch_job(
        name,
        namespace,
        template=pod_template(container("w", cpu=str(cores)), priority_class=priority),
        parallelism=pods,
        completions=pods,
        labels=labels,
        annotations={"usher.io/sim-duration": duration},
    )
    return manifest, f"{namespace}/{name}"


async def _api(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


async def _setup(api: client.ApiClient, tree: dict[str, Any]) -> None:
    scheduling = client.SchedulingV1Api(api)
    for name, value in PRIORITIES.items():
        await scheduling.create_priority_class(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    await client.CustomObjectsApi(api).create_namespaced_custom_object(
        "scheduling.sigs.k8s.io", "v1beta1", "kube-system", "elasticquotatrees", tree
    )


async def _submit_bursts(api: client.ApiClient, count: int, seed: int) -> set[str]:
    """``count`` jobs, 20 per second in bursts of varying size."""
    rng = random.Random(seed)
    batch = client.BatchV1Api(api)
    made: set[str] = set()
    index = 0
    while index < count:
        burst = min(count - index, rng.choice((5, 10, 20, 40)))
        jobs = [job(index + n, rng) for n in range(burst)]
        await asyncio.gather(
            *(batch.create_namespaced_job(m["metadata"]["namespace"], m) for m, _ in jobs)
        )
        made |= {key for _, key in jobs}
        index += burst
        await asyncio.sleep(burst / 20)
    return made


async def _finished(api: client.ApiClient) -> set[str]:
    jobs = await client.BatchV1Api(api).list_job_for_all_namespaces()
    return {
        f"{j.metadata.namespace}/{j.metadata.name}"
        for j in jobs.items
        if any(
            c.type in ("Complete", "Failed") and c.status == "True"
            for c in j.status.conditions or []
        )
    }


async def _wait_all_finished(
    finished: Callable[[], Awaitable[set[str]]],
    jobs: set[str],
    procs: ServiceProcesses,
    timeout_s: float,
) -> None:
    """Wait until ``finished()`` (the jobs seen finished) holds every one of ``jobs``."""
    deadline = time.monotonic() + timeout_s
    done: set[str] = set()
    while time.monotonic() < deadline:
        done = await finished()
        if jobs <= done:
            return
        await asyncio.sleep(0.5)
    stuck = sorted(jobs - done)
    tails = {n: p.log_tail(10) for n, p in procs.procs.items()}
    raise AssertionError(f"{len(stuck)} jobs never finished, e.g. {stuck[:5]}; logs {tails}")


async def _kill_each_once(procs: ServiceProcesses, rng: random.Random, window_s: float) -> None:
    plan = sorted((rng.uniform(1.0, window_s), name) for name in procs.names)
    began = time.monotonic()
    for at, name in plan:
        await asyncio.sleep(max(0.0, at - (time.monotonic() - began)))
        procs.kill(name)
        await asyncio.sleep(0.3)
        procs.start(name)


async def _ledger_is_drained(database_url: str) -> tuple[int, int]:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            live = await conn.scalar(
                text("SELECT count(*) FROM allocations WHERE state <> 'released'")
            )
            unpublished = await conn.scalar(
                text("SELECT count(*) FROM outbox WHERE published_at IS NULL")
            )
    finally:
        await engine.dispose()
    return int(live or 0), int(unpublished or 0)


@pytest.fixture
async def stack(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str, tmp_path: Path
) -> AsyncIterator[tuple[ServiceProcesses, client.ApiClient]]:
    kubeconfig = tmp_path / "kubeconfig"
    emulator = start_emulator(kubeconfig, tmp_path / "emulator.log")
    procs = ServiceProcesses(
        env={
            "USHER_NATS_URL": infra.nats_url,
            "USHER_DATABASE_URL": migrated_url,
            "KUBECONFIG": str(kubeconfig),
            "USHER_PREFIX": subjects.prefix,
            "USHER_HOME": str(tmp_path / "home"),
            "USHER_SETTLE_MS": "20",
        },
        logs=tmp_path / "logs",
        zones=ZONES,
    )
    api = await _api(kubeconfig)
    procs.start_all()
    try:
        yield procs, api
    finally:
        await api.close()
        procs.stop_all()
        emulator.stop()


async def _run(
    stack: tuple[ServiceProcesses, client.ApiClient],
    subjects: Subjects,
    js: JetStreamContext,
    database_url: str,
    *,
    count: int,
    seed: int,
    kill: bool,
    tree: dict[str, Any],
) -> None:
    procs, api = stack
    await asyncio.sleep(2.0)  # the services connect and replay the empty log
    await _setup(api, tree)
    submit = _submit_bursts(api, count, seed)
    if kill:
        jobs, _ = await asyncio.gather(
            submit, _kill_each_once(procs, random.Random(seed), window_s=count / 20)
        )
    else:
        jobs = await submit
    await _wait_all_finished(lambda: _finished(api), jobs, procs, timeout_s=240)
    await quiesce(js, subjects, quiet_s=1.5, timeout_s=60)
    entries = await read_log(js, subjects)
    preemptions = story_checks(entries, jobs)
    assert preemptions > 0, "no reclaim happened: this run proves nothing about it"
    # At every log entry: running usage within max, nobody admitted while live, every
    # Preempted justified; at the end nobody pending with a reason saying it fits now.
    await assert_log_invariants(js, subjects, EngineConfig())
    assert await history_violations(database_url, Fraction(1)) == []
    assert await _ledger_is_drained(database_url) == (0, 0)
    await assert_audit_clean(procs.env, subjects.prefix, database_url)


WALKTHROUGH = [int(seed) for seed in os.environ.get("USHER_LOAD_SEEDS", "20261124").split(",")]
"""Seeds of the job mixes (and kill moments); ``make test-long`` runs several."""


LONG = os.environ.get("USHER_LONG_TESTS") == "1" or "USHER_LOAD_SEEDS" in os.environ
RUNS = [
    pytest.param(tree, kill, id=f"{tree}-{'each-service-killed' if kill else 'no-fault'}")
    for tree in sorted(TREES)
    for kill in (False, True)
    if LONG or tree == "walkthrough" or not kill
]
"""Every tree with no fault and with every service killed; ``make test`` kills services on
the demo tree only (the policy trees' kill runs are in ``make test-long``, for time)."""


@pytest.mark.parametrize(("tree", "kill"), RUNS)
@pytest.mark.parametrize("seed", WALKTHROUGH)
async def test_borrowing_tree_under_bursts_ends_clean(
    stack: tuple[ServiceProcesses, client.ApiClient],
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    seed: int,
    kill: bool,
    tree: str,
) -> None:
    await _run(
        stack,
        subjects,
        js,
        migrated_url,
        count=300,
        seed=seed + kill,
        kill=kill,
        tree=TREES[tree](),
    )
