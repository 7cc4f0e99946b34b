"""Contract tests of the NATS JetStream adapter against a real server."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import (
    DeadLetter,
    Envelope,
    EventId,
    WorkloadDeleted,
    WorkloadKey,
    Zone,
    decode,
    decode_envelope,
)
from usher.adapters.nats.log import PARK_HEAD_BYTES, ensure_streams, park, publish_envelope
from usher.adapters.nats.subjects import Subjects, token


def _envelope(event_id: str) -> Envelope:
    return Envelope(
        id=EventId(event_id),
        time=datetime(2026, 1, 1, tzinfo=UTC),
        source="usher/test",
        event=WorkloadDeleted(workload=WorkloadKey("ns/job.v1")),
    )


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain", "plain"),
        ("job.v1", "job%2Ev1"),
        ("a*b>c", "a%2Ab%3Ec"),
        ("50%.x", "50%25%2Ex"),
        ("", "%00"),
    ],
    ids=["plain", "dot", "wildcards", "percent-first", "empty"],
)
def test_token_escapes_subject_specials(raw: str, escaped: str) -> None:
    assert token(raw) == escaped


async def test_streams_are_created_idempotently(js: JetStreamContext, subjects: Subjects) -> None:
    await ensure_streams(js, subjects)  # the fixture already created them: an update
    info = await js.stream_info(subjects.stream_name)
    assert sorted(info.config.subjects or []) == sorted(subjects.log_subjects)
    dlq = await js.stream_info(subjects.dlq_stream_name)
    assert dlq.config.subjects == subjects.dlq_subjects


async def test_publish_is_deduplicated_by_event_id(
    js: JetStreamContext, subjects: Subjects
) -> None:
    subject = subjects.job(Zone("default"), "ns", "job.v1")
    first = await publish_envelope(js, subject, _envelope("ev-1"))
    again = await publish_envelope(js, subject, _envelope("ev-1"))
    other = await publish_envelope(js, subject, _envelope("ev-2"))
    assert again.duplicate and not first.duplicate
    assert again.seq == first.seq
    assert other.seq == first.seq + 1
    msg = await js.get_msg(subjects.stream_name, first.seq)
    assert decode_envelope(msg.data or b"") == _envelope("ev-1")
    headers = msg.headers or {}
    assert headers["ce-type"] == "io.usher.workload.deleted.v1"
    assert headers["ce-id"] == "ev-1"
    assert headers["Nats-Msg-Id"] == "ev-1"


async def test_dead_letters_are_parked_with_their_error(
    nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    letter = DeadLetter(
        service="ledger",
        subject=subjects.ledger_reserve,
        error="msgspec.ValidationError",
        detail="Expected `str`, got `int` - at `$.workload`",
        data=b'{"workload": 1}',
        stream_seq=7,
    )
    parked = await park(nc, subjects, letter)
    msg = await js.get_last_msg(subjects.dlq_stream_name, subjects.dlq("ledger"))
    assert decode(msg.data or b"", DeadLetter) == parked
    whole = msgspec.structs.replace(
        letter, size=15, sha256=hashlib.sha256(letter.data).hexdigest(), truncated=False
    )
    assert parked == whole


async def test_a_message_too_large_to_park_whole_is_parked_as_a_reference(
    nc: Client, js: JetStreamContext, subjects: Subjects
) -> None:
    # ~900 KB fits max_payload (1 MB) on its own, but not base64-encoded inside a letter.
    data = bytes(range(256)) * 3600
    assert len(data) < nc.max_payload < len(data) * 4 // 3
    seq = (await js.publish(subjects.job(Zone("default"), "ns", "big"), data)).seq
    letter = DeadLetter(
        service="watcher",
        subject=subjects.job(Zone("default"), "ns", "big"),
        error="DecodeError",
        detail="JSON is malformed: invalid character (byte 0)",
        data=data,
        stream_seq=seq,
    )
    await park(nc, subjects, letter)
    msg = await js.get_last_msg(subjects.dlq_stream_name, subjects.dlq("watcher"))
    parked = decode(msg.data or b"", DeadLetter)
    assert parked.truncated
    assert (parked.size, parked.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert parked.data == data[:PARK_HEAD_BYTES] and 1024 <= PARK_HEAD_BYTES <= 16384
    assert (parked.subject, parked.stream_seq, parked.error, parked.detail) == (
        letter.subject,
        seq,
        "DecodeError",
        letter.detail,
    )
    # The reference leads to the whole message, kept on the log.
    kept = await js.get_msg(subjects.stream_name, seq)
    assert hashlib.sha256(kept.data or b"").hexdigest() == parked.sha256


@pytest.mark.parametrize(
    ("zone", "namespace", "name"),
    [("z" * 100_000, "ns", "j"), ("default", "n" * 100_000, "j" * 100_000), ("a\r\nb", "ns", "j")],
    ids=["100KB-zone", "100KB-names", "control-characters"],
)
async def test_a_workload_with_a_huge_or_odd_name_is_published_and_the_connection_stays(
    nc: Client, js: JetStreamContext, subjects: Subjects, zone: str, namespace: str, name: str
) -> None:
    """nats-server drops a connection whose control line passes 4 KB ("maximum control line
    exceeded"): one job with a 100 KB zone used to wedge the watcher. Its subject is bounded
    (a hash token), so it is stored like any other and the connection stays up."""
    event = WorkloadDeleted(workload=WorkloadKey(f"{namespace}/{name}"))
    subject = subjects.job(Zone(zone), namespace, name)
    envelope = msgspec.structs.replace(_envelope("huge"), event=event)
    ack = await publish_envelope(js, subject, envelope)
    stored = await js.get_msg(subjects.stream_name, ack.seq)
    assert stored.subject == subject and decode_envelope(stored.data or b"").event == event
    assert nc.is_connected
    after = await publish_envelope(js, subjects.job(Zone("default"), "ns", "j"), _envelope("next"))
    assert after.seq == ack.seq + 1
