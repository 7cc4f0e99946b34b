"""Hold, resume and drain through the whole system (docs/admission-rules.md R14, R15).

emulator -> watcher -> NATS -> dequeuer -> ledger -> watcher -> emulator, the services in this
process (``harness.InProcessStack``). The admin asks the ledger to hold Department-a; a job
submitted there waits, saying who held it and why, and is not admitted; resumed, it is
admitted. Drained with a 1 s grace, it is preempted as its own preemptor (through the ledger,
which records it and releases it once the watcher saw it stopped). The quiet log breaks no
invariant and ``usher audit`` of the log and the ledger exits 0.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats.errors
import nats.js.errors
from kubernetes_asyncio import client
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import (
    Admitted,
    HoldAction,
    HoldReply,
    HoldRequest,
    NodeHeld,
    NodeResumed,
    Preempted,
    QuotaPath,
    Released,
    RequestId,
    WorkloadKey,
    decode,
    encode,
)
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
from usher.client.state import now_ms, read_state
from usher.core.model.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator

NAMESPACE = "user-a"
NODE = "root/Department-a"
WAITS = WorkloadKey("user-a/waits")
WITHIN_S = 15.0
DECISIONS = (Admitted, Preempted, Released)


async def order(
    nc: Client, subjects: Subjects, action: HoldAction, grace: int | None = None
) -> NodeHeld | NodeResumed:
    """The admin's order, answered by the ledger with what it recorded."""
    reply = await ask(nc, subjects, action, grace)
    assert reply.recorded is not None, reply
    return reply.recorded


async def ask(
    nc: Client, subjects: Subjects, action: HoldAction, grace: int | None = None
) -> HoldReply:
    request = HoldRequest(
        request_id=RequestId(f"e2e-{time.time_ns()}"),
        action=action,
        target=NODE,
        reason="maintenance",
        grace_seconds=grace,
    )
    raw = await nc.request(subjects.ledger_hold("admin"), encode(request), timeout=10)
    return decode(raw.data, HoldReply)


async def test_hold_keeps_a_job_waiting_resume_admits_it_and_drain_preempts_it(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    nc: Client,
    migrated_url: str,
    emu: KubeEmulator,
    tmp_path: Path,
) -> None:
    async def on_log(wanted: tuple[str, str]) -> bool:
        return wanted in await decisions(js, subjects, DECISIONS)

    async def reason_code() -> str | None:
        state = await read_state(js, subjects, EngineConfig())
        found = state.view(now_ms()).jobs
        job = next((j for j in found if j.job == WAITS), None)
        return job.reason_code if job is not None else None

    async with in_process_stack(infra.nats_url, migrated_url, subjects, emu) as stack:
        async with kube_api(emu) as api:
            tree = one_department_tree(
                NAMESPACE,
                root={"cpu": "100", "memory": "100Gi"},
                department={"cpu": "10", "memory": "10Gi"},
            )
            await create_object(api, tree)

            async def held_once_the_ledger_knows_the_tree() -> bool:
                try:
                    return (await ask(nc, subjects, "Hold")).recorded is not None
                except nats.errors.NoRespondersError:
                    return False  # the ledger is not serving yet

            await stack.until(held_once_the_ledger_knows_the_tree, "the hold", within_s=WITHIN_S)

            async def hold_on_the_log() -> bool:
                # A hold governs the engines from its entry on the log (the ledger's outbox
                # puts it there a moment after the reply): a job observed before it may be
                # admitted, as before any hold.
                try:
                    await js.get_last_msg(subjects.stream_name, subjects.hold(QuotaPath(NODE)))
                except nats.js.errors.NotFoundError:
                    return False
                return True

            await stack.until(hold_on_the_log, "the hold on the log", within_s=WITHIN_S)
            await create_object(api, sleeping_job("waits", NAMESPACE, cpu="10", memory="1Gi"))

            async def held() -> bool:
                return await reason_code() == "Held"

            await stack.until(held, "the Held reason", within_s=WITHIN_S)
            await asyncio.sleep(2.0)  # passes come and go: still nothing admitted
            assert not await on_log(("Admitted", WAITS))

            resumed = await order(nc, subjects, "Resume")
            assert isinstance(resumed, NodeResumed) and resumed.by == "admin"
            await stack.until(
                lambda: on_log(("Admitted", WAITS)), "the admission", within_s=WITHIN_S
            )

            drained = await order(nc, subjects, "Drain", grace=1)
            assert isinstance(drained, NodeHeld) and drained.grace_seconds == 1
            await stack.until(lambda: on_log(("Preempted", WAITS)), "the drain", within_s=WITHIN_S)
            await stack.until(lambda: on_log(("Released", WAITS)), "the release", within_s=WITHIN_S)
            job = await client.BatchV1Api(api).read_namespaced_job("waits", NAMESPACE)
            assert job.spec.suspend is True
            await quiesce(js, subjects)
        assert stack.failures() == []
    entries = await read_log(js, subjects)
    [drain] = [e for _, _, e in entries if isinstance(e.event, Preempted)]
    assert drain.event.preemptor == WAITS and drain.event.reason.code == "Drained"
    await assert_log_invariants(js, subjects, EngineConfig())
    env = {"USHER_NATS_URL": infra.nats_url, "USHER_HOME": str(tmp_path / "home")}
    await assert_audit_clean(env, subjects.prefix, migrated_url)
