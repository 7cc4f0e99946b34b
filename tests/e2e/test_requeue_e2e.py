"""A gang that never becomes ready, through the whole system (docs/admission-rules.md R10).

emulator -> watcher -> NATS -> dequeuer / preemptor -> ledger -> watcher -> emulator, the
services in this process (``harness.InProcessStack``). Department-a has a ready timeout of 3 s
and a long backoff; ``stuck`` (all of Department-a's 10 cpu) is admitted and its pod never
gets ready (the emulator's never-ready annotation; the watcher reports 0/1 ready), so its
dequeuer requeues it through the
ledger, the watcher suspends it, the ledger releases it once seen stopped, and ``next``, which
waited behind it, gets its quota within the timeout plus a few seconds. The quiet log breaks no
invariant (each requeue justified, nothing over-committed while it stopped) and ``usher audit``
of the log and the ledger exits 0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import Admitted, Released, Requeued
from tests.builders.manifests import batch_job, container, elastic_quota_tree, pod_template
from tests.conftest import Infra
from tests.e2e.checks import assert_audit_clean, assert_log_invariants
from tests.e2e.harness import InProcessStack, kube_api, quiesce, read_log
from usher.adapters.nats.subjects import Subjects
from usher.core.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator
from usher.local.kube_emulator.playbook import NEVER_READY

NAMESPACE = "user-a"
TIMEOUT_S = 3
SLACK_S = 12.0
"""How long after the timeout ``next`` may take to be admitted: a settle window, the ledger's
round trips, the watcher's suspension and its observation, on a shared machine."""


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig", kubelet=True) as emulator:
        yield emulator


def job(name: str, never_ready: bool = False) -> dict[str, Any]:
    main = container(cpu="10", memory="1Gi", command=["sleep", "1d"])
    manifest = batch_job(name, NAMESPACE, template=pod_template(main), parallelism=1, completions=1)
    if never_ready:
        # The emulator's kubelet keeps its pod not ready for an hour (a failing probe).
        manifest["metadata"].setdefault("annotations", {})[NEVER_READY] = "3600"
    return manifest


def quota_tree() -> dict[str, Any]:
    readiness = {
        "usher.io/ready-timeout-seconds": str(TIMEOUT_S),
        "usher.io/requeue-backoff-seconds": "600",
    }
    return elastic_quota_tree(
        {
            "name": "root",
            "min": {"cpu": "100", "memory": "100Gi"},
            "max": {"cpu": "100", "memory": "100Gi"},
            "children": [
                {
                    "name": "Department-a",
                    "min": {"cpu": "10", "memory": "10Gi"},
                    "max": {"cpu": "10", "memory": "10Gi"},
                    "namespaces": [NAMESPACE],
                    "attributes": readiness,
                },
            ],
        }
    )


async def decisions(js: JetStreamContext, subjects: Subjects) -> list[tuple[str, str]]:
    """Admissions, requeues and releases on the log, in order (none while it is empty)."""
    if not (await js.stream_info(subjects.stream_name)).state.last_seq:
        return []
    return [
        (type(envelope.event).__name__, envelope.event.workload)
        for _, _, envelope in await read_log(js, subjects)
        if isinstance(envelope.event, Admitted | Requeued | Released)
    ]


async def test_a_never_ready_gang_is_requeued_and_its_quota_goes_to_the_next(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    emu: KubeEmulator,
    tmp_path: Path,
) -> None:
    stack = InProcessStack(
        nats_url=infra.nats_url,
        database_url=migrated_url,
        subjects=subjects,
        kubeconfig=emu.kubeconfig_path,
        engine=EngineConfig(),
    )
    await stack.start()
    try:
        async with kube_api(emu) as api:
            tree = quota_tree()
            group, version = tree["apiVersion"].split("/")
            await client.CustomObjectsApi(api).create_namespaced_custom_object(
                group, version, "kube-system", "elasticquotatrees", tree
            )
            batch = client.BatchV1Api(api)
            await batch.create_namespaced_job(NAMESPACE, job("stuck", never_ready=True))  # type: ignore[arg-type]
            await _until(js, subjects, stack, ("Admitted", "user-a/stuck"), 15.0)
            admitted_at = time.monotonic()
            await batch.create_namespaced_job(NAMESPACE, job("next"))  # type: ignore[arg-type]
            await _until(js, subjects, stack, ("Admitted", "user-a/next"), TIMEOUT_S + SLACK_S)
            assert time.monotonic() - admitted_at >= TIMEOUT_S - 0.5
            stuck = await batch.read_namespaced_job("stuck", NAMESPACE)
            assert stuck.spec.suspend is True
            await quiesce(js, subjects)
        assert stack.failures() == []
    finally:
        await stack.stop()
    found = await decisions(js, subjects)
    assert found[:3] == [
        ("Admitted", "user-a/stuck"),
        ("Requeued", "user-a/stuck"),
        ("Released", "user-a/stuck"),
    ], found
    assert ("Admitted", "user-a/next") in found[3:]
    await assert_log_invariants(js, subjects, EngineConfig())
    # The audit agrees, the ledger's rows included (the requeued allocation and its events).
    env = {"USHER_NATS_URL": infra.nats_url, "USHER_HOME": str(tmp_path / "home")}
    await assert_audit_clean(env, subjects.prefix, migrated_url)


async def _until(
    js: JetStreamContext,
    subjects: Subjects,
    stack: InProcessStack,
    wanted: tuple[str, str],
    within_s: float,
) -> None:
    deadline = time.monotonic() + within_s
    while wanted not in await decisions(js, subjects):
        assert stack.failures() == []
        assert time.monotonic() < deadline, f"{wanted} not on the log within {within_s}s"
        await asyncio.sleep(0.1)
