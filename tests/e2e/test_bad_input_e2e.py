"""Bad input through the whole system: it is rejected or parked, and good jobs keep flowing.

emulator -> watcher -> NATS -> dequeuer / preemptor -> ledger -> watcher -> emulator, all four
services in this process (``harness.InProcessStack``). While good jobs are being admitted the
test injects a malformed Job, a job of a kind Usher does not support, an invalid
ElasticQuotaTree update, and garbage bytes on the log (a job subject and a decision subject) and
on the ledger's and the preemptor's request subjects; then ~900 KB of garbage (parked as a
reference) and the tree's deletion (the last tree stays in force). Each must end up where the
services README says (``WorkloadRejected`` / ``QuotaTreeRejected`` on the log, a ``DeadLetter``
on the DLQ, a ``LedgerError`` reply), the previous tree must stay in force, every good job
created before and after must be admitted, and no service may crash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

import msgspec
from kubernetes_asyncio import client
from nats.aio.client import Client
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import create_async_engine

from schemas import (
    Admitted,
    DeadLetter,
    Inadmissible,
    LedgerError,
    QuotaPath,
    QuotaTreeApplied,
    QuotaTreeDeleted,
    QuotaTreeRejected,
    WorkloadRejected,
    Zone,
    decode,
    decode_envelope,
)
from schemas.envelope import LogEvent
from tests.builders.manifests import elastic_quota_tree, sleeping_job
from tests.conftest import Infra
from tests.e2e.checks import assert_log_invariants
from tests.e2e.harness import (
    InProcessStack,
    apply_tree,
    create_object,
    in_process_stack,
    kube_api,
    quiesce,
)
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.ledger_store import LedgerStore
from usher.core.model.config import EngineConfig
from usher.local.kube_emulator import KubeEmulator

T = TypeVar("T")
NAMESPACE = "user-a"
LEAF = QuotaPath("root/Department-a")
CPU_PATH = "spec.template.spec.containers[0].resources.requests.cpu"
GARBAGE = b"\x00\xff{not an envelope"
WITHIN_S = 10.0
PROJECTIONS = ("dequeuer", "preemptor", "ledger", "watcher")
"""The services that read cluster events of the log into a projection of their own."""


# --------------------------------------------------------------------------- manifests


def job(name: str, cpu: str = "1") -> dict[str, Any]:
    """A suspended batch Job in ``user-a`` (Department-a) asking for ``cpu`` and 1Gi."""
    return sleeping_job(name, NAMESPACE, cpu=cpu, memory="1Gi")


def xgboost_job(name: str) -> dict[str, Any]:
    """A suspended Kubeflow XGBoostJob: a kind Usher does not admit."""
    template = job("unused")["spec"]["template"]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "XGBoostJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "runPolicy": {"suspend": True},
            "xgbReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 2, "template": template},
            },
        },
    }


def quota_tree(a_min_cpu: str = "60", a_max_cpu: str = "100") -> dict[str, Any]:
    """Department-a (``user-a``) min 60/max 100 cpu by default, under a root of 100 cpu."""

    def node(name: str, cpu: tuple[str, str], memory_min: str, **rest: Any) -> dict[str, Any]:
        return {
            "name": name,
            "min": {"cpu": cpu[0], "memory": memory_min},
            "max": {"cpu": cpu[1], "memory": "100Gi"},
            **rest,
        }

    root = node(
        "root",
        ("100", "100"),
        "100Gi",
        children=[
            node("Department-a", (a_min_cpu, a_max_cpu), "60Gi", namespaces=[NAMESPACE]),
            node("Department-b", ("0", "100"), "0", namespaces=["user-c"]),
        ],
    )
    return elastic_quota_tree(root)


# --------------------------------------------------------------------------- reading back


@dataclass(frozen=True)
class Entry:
    """One log entry; ``event`` is None for bytes that are not an envelope (garbage)."""

    seq: int
    subject: str
    event: LogEvent | None


async def log_entries(js: JetStreamContext, subjects: Subjects) -> list[Entry]:
    """Every log entry, via direct gets (like ``harness.read_log``, but garbage-tolerant)."""
    info = await js.stream_info(subjects.stream_name)
    out: list[Entry] = []
    for seq in range(int(info.state.first_seq), int(info.state.last_seq) + 1):
        msg = await js.get_msg(subjects.stream_name, seq, direct=True)
        try:
            event: LogEvent | None = decode_envelope(msg.data or b"").event
        except (msgspec.DecodeError, msgspec.ValidationError):
            event = None
        out.append(Entry(seq, msg.subject or "", event))
    return out


async def dead_letters(js: JetStreamContext, subjects: Subjects) -> list[DeadLetter]:
    """Every DeadLetter on the DLQ stream, by sequence (no consumer)."""
    info = await js.stream_info(subjects.dlq_stream_name)
    letters: list[DeadLetter] = []
    for seq in range(max(int(info.state.first_seq), 1), int(info.state.last_seq) + 1):
        # The DLQ stream does not allow direct gets: the stream's message-get API instead.
        msg = await js.get_msg(subjects.dlq_stream_name, seq)
        if msg.data:
            letters.append(decode(msg.data, DeadLetter))
    return letters


def of_type(entries: list[Entry], kind: type[T]) -> list[T]:
    return [e.event for e in entries if isinstance(e.event, kind)]


async def ledger_usage(database_url: str) -> dict[QuotaPath, dict[str, int]]:
    engine = create_async_engine(database_url)
    try:
        usage = await LedgerStore(engine, Fraction(1)).usage()
    finally:
        await engine.dispose()
    return {path: {r: v for r, v in used.items() if v} for path, used in usage.items()}


# --------------------------------------------------------------------------- the test


@dataclass
class Run:
    """The running system and the means to poke at it."""

    stack: InProcessStack
    api: client.ApiClient
    js: JetStreamContext
    nc: Client
    subjects: Subjects

    async def eventually(self, check: Callable[[], Awaitable[T | None]], what: str) -> T:
        """Poll ``check`` until it returns something truthy, failing fast on a crash."""
        return await self.stack.until(check, what, within_s=WITHIN_S)

    async def create_job(self, manifest: dict[str, Any]) -> None:
        await create_object(self.api, manifest)

    async def suspended(self, name: str) -> bool:
        obj = await client.BatchV1Api(self.api).read_namespaced_job(name, NAMESPACE)
        return bool(obj.spec.suspend)

    async def all_admitted(self, names: list[str]) -> bool:
        """Each job has its ``Admitted`` on the log and runs (unsuspended) in the cluster."""
        entries = await log_entries(self.js, self.subjects)
        admitted = {e.workload for e in of_type(entries, Admitted)}
        if not {f"{NAMESPACE}/{n}" for n in names} <= admitted:
            return False
        return not any([await self.suspended(n) for n in names])

    async def rejected(self, name: str) -> WorkloadRejected | None:
        events = of_type(await log_entries(self.js, self.subjects), WorkloadRejected)
        return next((e for e in events if e.workload == f"{NAMESPACE}/{name}"), None)

    async def garbage_request(self, subject: str) -> LedgerError:
        reply = await self.nc.request(subject, GARBAGE, timeout=5)
        return decode(reply.data, LedgerError)


async def test_bad_input_is_rejected_or_parked_and_good_jobs_keep_flowing(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    nc: Client,
    migrated_url: str,
    emu: KubeEmulator,
) -> None:
    async with in_process_stack(infra.nats_url, migrated_url, subjects, emu) as stack:
        async with kube_api(emu) as api:
            run = Run(stack, api, js, nc, subjects)
            await _play(run, migrated_url)
            await quiesce(js, subjects)
        assert stack.failures() == []
    await assert_log_invariants(js, subjects, EngineConfig())


async def _play(run: Run, database_url: str) -> None:
    subjects = run.subjects
    custom = client.CustomObjectsApi(run.api)
    tree = quota_tree()
    group, version = tree["apiVersion"].split("/")
    await create_object(run.api, tree)
    for name in ("good-1", "good-2"):
        await run.create_job(job(name))

    # (a), (b) and garbage on a job subject of the log, while good-1/2 are being admitted.
    await run.create_job(job("bad-cpu", cpu="ten cores"))
    await custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", NAMESPACE, "xgboostjobs", xgboost_job("xgb")
    )
    job_subject = subjects.job(Zone("default"), NAMESPACE, "garbage")
    job_garbage_seq = (await run.js.publish(job_subject, GARBAGE)).seq
    await run.create_job(job("good-3"))

    bad_cpu = await run.eventually(lambda: run.rejected("bad-cpu"), "bad-cpu rejected")
    assert CPU_PATH in [e.path for e in bad_cpu.errors], bad_cpu.errors
    xgb = await run.eventually(lambda: run.rejected("xgb"), "xgb rejected")
    assert xgb.kind == "kubeflow.org/v1/XGBoostJob"
    assert [e.code for e in xgb.errors] == ["unsupported-kind"]
    assert "batch/v1/Job" in xgb.errors[0].message
    good = ["good-1", "good-2", "good-3"]
    await run.eventually(lambda: run.all_admitted(good), "good-1..3 admitted")
    usage_before = await ledger_usage(database_url)
    assert usage_before[LEAF] == {"cpu": 3000, "memory": 3 * 2**30}

    # (c) An invalid tree update (Department-a min above its max): rejected, old tree stays.
    await apply_tree(run.api, quota_tree(a_min_cpu="10", a_max_cpu="5"))

    async def tree_rejected() -> QuotaTreeRejected | None:
        events = of_type(await log_entries(run.js, subjects), QuotaTreeRejected)
        return events[-1] if events else None

    rejected_tree = await run.eventually(tree_rejected, "tree rejected")
    named = " ".join(f"{e.path} {e.code} {e.message}" for e in rejected_tree.errors)
    assert "Department-a" in named and "cpu" in named, named
    assert await ledger_usage(database_url) == usage_before
    # 10 cpu fits the tree in force (max 100), not the rejected one (max 5).
    await run.create_job(job("good-big", cpu="10"))
    good.append("good-big")
    await run.eventually(lambda: run.all_admitted(good), "good-big admitted under the old tree")

    # (d) Garbage on the request subjects and on a decision subject of the log.
    ledger_reply = await run.garbage_request(subjects.ledger_reserve)
    assert (ledger_reply.code, ledger_reply.transient) == ("bad-request", False)
    preemptor_reply = await run.garbage_request(subjects.preempt_request)
    assert (preemptor_reply.code, preemptor_reply.transient) == ("bad-request", False)
    decision_subject = subjects.decision(Zone("default"), "admitted", NAMESPACE, "nobody")
    decision_garbage_seq = (await run.js.publish(decision_subject, GARBAGE)).seq
    await run.create_job(job("good-4"))
    good.append("good-4")
    await run.eventually(lambda: run.all_admitted(good), "good-4 admitted")

    # Every projection of the log parks the garbage on a job subject, each once.
    wanted = {
        *((service, job_subject, job_garbage_seq) for service in PROJECTIONS),
        ("ledger", subjects.ledger_reserve, None),
        ("preemptor", subjects.preempt_request, None),
        ("watcher", decision_subject, decision_garbage_seq),
    }

    async def parked() -> list[DeadLetter] | None:
        letters = await dead_letters(run.js, subjects)
        found = {(d.service, d.subject, d.stream_seq) for d in letters}
        return letters if wanted <= found else None

    letters = await run.eventually(parked, "dead letters of every service")
    on_job_subject = [d.service for d in letters if d.subject == job_subject]
    assert sorted(on_job_subject) == sorted(PROJECTIONS)
    for letter in letters:
        assert letter.data == GARBAGE, letter
        assert letter.error in ("DecodeError", "ValidationError"), letter
        assert letter.detail, letter

    # What was refused stays suspended; usage counts exactly the good jobs.
    entries = await log_entries(run.js, subjects)
    admitted = {e.workload for e in of_type(entries, Admitted)}
    assert admitted == {f"{NAMESPACE}/{n}" for n in good}
    assert await run.suspended("bad-cpu")
    xgb_obj = await client.CustomObjectsApi(run.api).get_namespaced_custom_object(
        "kubeflow.org", "v1", NAMESPACE, "xgboostjobs", "xgb"
    )
    assert xgb_obj["spec"]["runPolicy"]["suspend"] is True
    assert len(of_type(entries, QuotaTreeApplied)) == 1
    usage = await ledger_usage(database_url)
    assert usage[LEAF] == {"cpu": 14000, "memory": 5 * 2**30}

    # (e) ~900 KB of garbage on a job subject: too large to park whole (base64 inside a letter
    # exceeds max_payload), so every projection parks a reference to it.
    huge = bytes(range(256)) * 3600
    huge_seq = (await run.js.publish(job_subject, huge)).seq

    async def referenced() -> list[DeadLetter] | None:
        letters = [d for d in await dead_letters(run.js, subjects) if d.stream_seq == huge_seq]
        return letters if len(letters) == len(PROJECTIONS) else None

    for letter in await run.eventually(referenced, "references to the huge message"):
        assert letter.truncated and letter.size == len(huge), letter.service
        assert letter.sha256 == hashlib.sha256(huge).hexdigest()
        assert huge.startswith(letter.data) and 0 < len(letter.data) < 10_000

    # (f) The tree is deleted: the log says so, and admissions go on under the last tree.
    await custom.delete_namespaced_custom_object(
        group, version, "kube-system", "elasticquotatrees", tree["metadata"]["name"]
    )

    async def tree_deleted() -> QuotaTreeDeleted | None:
        events = of_type(await log_entries(run.js, subjects), QuotaTreeDeleted)
        return events[-1] if events else None

    deleted = await run.eventually(tree_deleted, "tree deletion on the log")
    assert (deleted.namespace, deleted.name) == ("kube-system", tree["metadata"]["name"])
    await run.create_job(job("after-delete", cpu="5"))
    good.append("after-delete")
    await run.eventually(lambda: run.all_admitted(good), "admitted under the last tree")
    # Its limits still hold: more than max 100 cpu of the deleted tree is never admitted.
    await run.create_job(job("too-big", cpu="101"))

    async def inadmissible() -> Inadmissible | None:
        events = of_type(await log_entries(run.js, subjects), Inadmissible)
        return next((e for e in events if e.workload == f"{NAMESPACE}/too-big"), None)

    refused = await run.eventually(inadmissible, "too-big inadmissible under the last tree")
    assert refused.reason.code == "ExceedsMax", refused.reason
    assert (await ledger_usage(database_url))[LEAF] == {"cpu": 19000, "memory": 6 * 2**30}
