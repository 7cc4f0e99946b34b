"""The preemptor over real NATS: it re-checks proposals with the core and refuses stale ones."""

from __future__ import annotations

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from schemas import (
    Admitted,
    DeadLetter,
    LedgerError,
    Preempted,
    PreemptRequest,
    QueueName,
    QuotaPath,
    QuotaTreeApplied,
    Reason,
    RequestId,
    Reservation,
    ReserveReply,
    WorkloadKey,
    Zone,
    decode,
    encode,
)
from services.common.settings import ServiceSettings
from services.preemptor.service import main
from tests.builders.events import CORE, observed
from tests.builders.trees import two_leaf_tree
from tests.conftest import Infra
from tests.services.helpers import publish, running
from usher.adapters.nats.subjects import Subjects


def _request(victim: str, log_seq: int) -> PreemptRequest:
    return PreemptRequest(
        request_id=RequestId("r1"),
        zone=Zone("default"),
        preemptor=Reservation(
            workload=WorkloadKey("b1/claim"),
            queue=QueueName("q"),
            quota=QuotaPath("root/B"),
            zone=Zone("default"),
            requests={"cpu": 30 * CORE},
        ),
        victims=[
            Preempted(
                workload=WorkloadKey(victim),
                queue=QueueName("q"),
                quota=QuotaPath("root/A"),
                preemptor=WorkloadKey("b1/claim"),
                reason=Reason(code="Reclaim", message="r"),
            )
        ],
        log_seq=log_seq,
    )


async def test_stale_proposal_is_refused_with_the_reason(
    infra: Infra, subjects: Subjects, js: JetStreamContext, nc: Client
) -> None:
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    for name, cores in (("base", 60), ("borrow", 40)):
        await publish(js, subjects.job(Zone("default"), "a1", name), observed("a1", name, cores))
        await publish(
            js,
            subjects.decision(Zone("default"), "admitted", "a1", name),
            Admitted(
                workload=WorkloadKey(f"a1/{name}"),
                queue=QueueName("q"),
                quota=QuotaPath("root/A"),
                zone=Zone("default"),
                requests={"cpu": cores * CORE},
            ),
        )
    await publish(js, subjects.job(Zone("default"), "b1", "claim"), observed("b1", "claim", 30))
    seq = int((await js.stream_info(subjects.stream_name)).state.last_seq)
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix)
    async with running("preemptor", main, settings, subjects):
        raw = await nc.request(
            subjects.preempt_request, encode(_request("a1/ghost", seq)), timeout=5
        )
        reply = decode(raw.data, ReserveReply)
        [result] = reply.results
        assert not result.granted and result.reason is not None
        assert (
            result.reason.code == "StaleView"
            and "a1/ghost is not admitted" in result.reason.message
        )
        # A victim of the preemptor's own leaf needs LowerPriority, which is off.
        await publish(
            js,
            subjects.decision(Zone("default"), "admitted", "b1", "other"),
            Admitted(
                workload=WorkloadKey("b1/other"),
                queue=QueueName("q"),
                quota=QuotaPath("root/B"),
                zone=Zone("default"),
                requests={"cpu": 10 * CORE},
            ),
        )
        seq = int((await js.stream_info(subjects.stream_name)).state.last_seq)
        raw = await nc.request(
            subjects.preempt_request, encode(_request("b1/other", seq)), timeout=5
        )
        [result] = decode(raw.data, ReserveReply).results
        assert result.granted is False and result.reason is not None
        assert "not of lower priority" in result.reason.message


async def test_garbage_request_gets_an_error_and_a_dead_letter(
    infra: Infra, subjects: Subjects, js: JetStreamContext, nc: Client
) -> None:
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix)
    dlq = await js.subscribe(subjects.dlq("preemptor"), stream=subjects.dlq_stream_name)
    async with running("preemptor", main, settings, subjects):
        raw = await nc.request(
            subjects.preempt_request, b'{"type": "ledger.preempt.v1"}', timeout=5
        )
        error = decode(raw.data, LedgerError)
        assert error.code == "bad-request" and not error.transient
        assert "request_id" in error.message
        letter = decode((await dlq.next_msg(timeout=5)).data, DeadLetter)
        assert letter.service == "preemptor" and letter.error == "ValidationError"
        # Still serving.
        raw = await nc.request(subjects.preempt_request, b"not json", timeout=5)
        assert decode(raw.data, LedgerError).code == "bad-request"
    await dlq.unsubscribe()


async def test_a_request_a_consumer_delivers_is_parked_and_never_answered(
    infra: Infra, subjects: Subjects, js: JetStreamContext, nc: Client
) -> None:
    """A consumer whose deliveries someone pointed at ``preempt.request`` (NATS cannot forbid
    it: nats-io/nats-server#8274) answers to ``$JS.ACK...``: parked, not served."""
    settings = ServiceSettings(nats_url=infra.nats_url, prefix=subjects.prefix)
    dlq = await js.subscribe(subjects.dlq("preemptor"), stream=subjects.dlq_stream_name)
    injected = f"{subjects.prefix}.cluster.inject"
    async with running("preemptor", main, settings, subjects):
        await js.add_consumer(
            subjects.stream_name,
            ConsumerConfig(
                deliver_subject=subjects.preempt_request, deliver_group="preemptor",
                filter_subject=injected, deliver_policy=DeliverPolicy.NEW,
                ack_policy=AckPolicy.NONE,
            ),
        )  # fmt: skip
        await js.publish(injected, encode(_request("a1/ghost", 1)))
        letters = [decode((await dlq.next_msg(timeout=5)).data, DeadLetter) for _ in range(2)]
        untrusted = [letter for letter in letters if letter.error == "UntrustedReply"]
        assert [letter.subject for letter in untrusted] == [injected]
        assert "$JS.ACK." in untrusted[0].detail
        # Still serving a requester.
        raw = await nc.request(subjects.preempt_request, b"not json", timeout=5)
        assert decode(raw.data, LedgerError).code == "bad-request"
    await dlq.unsubscribe()
