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

import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from nats.js import JetStreamContext

from schemas import Admitted, Released, Requeued
from tests.builders.manifests import one_department_tree, sleeping_job
from tests.conftest import Infra
from tests.e2e.checks import assert_audit_clean, assert_log_invariants
from tests.e2e.harness import (
    create_object,
    decisions,
    in_process_stack,
    kube_api,
    quiesce,
    read_log,
)
from usher.adapters.nats.subjects import Subjects
from usher.core.model.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator
from usher.local.kube_emulator.playbook import NEVER_READY

NAMESPACE = "user-a"
TIMEOUT_S = 3
SLACK_S = 12.0
"""How long after the timeout ``next`` may take to be admitted: a settle window, the ledger's
round trips, the watcher's suspension and its observation, on a shared machine."""
DECISIONS = (Admitted, Requeued, Released)
"""Admissions, requeues and releases: what the test reads of the log, in order."""


def job(name: str, never_ready: bool = False) -> dict[str, Any]:
    manifest = sleeping_job(name, NAMESPACE, cpu="10", memory="1Gi")
    if never_ready:
        # The emulator's kubelet keeps its pod not ready for an hour (a failing probe).
        manifest["metadata"].setdefault("annotations", {})[NEVER_READY] = "3600"
    return manifest


def quota_tree() -> dict[str, Any]:
    readiness = {
        "usher.io/ready-timeout-seconds": str(TIMEOUT_S),
        "usher.io/requeue-backoff-seconds": "600",
    }
    return one_department_tree(
        NAMESPACE,
        root={"cpu": "100", "memory": "100Gi"},
        department={"cpu": "10", "memory": "10Gi"},
        attributes=readiness,
    )


async def test_a_never_ready_gang_is_requeued_and_its_quota_goes_to_the_next(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    migrated_url: str,
    emu: KubeEmulator,
    tmp_path: Path,
) -> None:
    async def on_log(wanted: tuple[str, str]) -> bool:
        return wanted in await decisions(js, subjects, DECISIONS)

    async with in_process_stack(infra.nats_url, migrated_url, subjects, emu) as stack:
        async with kube_api(emu) as api:
            await create_object(api, quota_tree())
            batch = client.BatchV1Api(api)
            await create_object(api, job("stuck", never_ready=True))
            stuck_admitted = ("Admitted", "user-a/stuck")
            await stack.until(lambda: on_log(stuck_admitted), str(stuck_admitted), within_s=15.0)
            admitted_at = time.monotonic()
            await create_object(api, job("next"))
            next_admitted = ("Admitted", "user-a/next")
            await stack.until(
                lambda: on_log(next_admitted), str(next_admitted), within_s=TIMEOUT_S + SLACK_S
            )
            assert time.monotonic() - admitted_at >= TIMEOUT_S - 0.5
            stuck = await batch.read_namespaced_job("stuck", NAMESPACE)
            assert stuck.spec.suspend is True
            await quiesce(js, subjects)
        assert stack.failures() == []
    found = await decisions(js, subjects, DECISIONS)
    assert found[:3] == [
        ("Admitted", "user-a/stuck"),
        ("Requeued", "user-a/stuck"),
        ("Released", "user-a/stuck"),
    ], found
    assert ("Admitted", "user-a/next") in found[3:]
    # Released as what happened to it (issue 28): requeued for readiness, not preempted.
    causes = [
        envelope.event.cause
        for _, _, envelope in await read_log(js, subjects)
        if isinstance(envelope.event, Released) and envelope.event.workload == "user-a/stuck"
    ]
    assert causes == ["Requeued"], causes
    await assert_log_invariants(js, subjects, EngineConfig())
    # The audit agrees, the ledger's rows included (the requeued allocation and its events).
    env = {"USHER_NATS_URL": infra.nats_url, "USHER_HOME": str(tmp_path / "home")}
    await assert_audit_clean(env, subjects.prefix, migrated_url)
