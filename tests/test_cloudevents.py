"""Every log entry is a CloudEvent by the NATS binding's binary content mode
(``CLOUDEVENTS_BINDING``): the CloudEvents Python SDK parses our headers and payload into the
event we meant, with every attribute round-tripping through the binding's percent-encoding.

The SDK has no NATS binding; the NATS binary mode's ``ce-`` headers and percent-encoding are
the HTTP binding's, so its HTTP binary-mode reader is the conformance check (once with our
``Content-Type`` as HTTP reads it, once without it, as the NATS binding reads
``ce-datacontenttype``). Real published messages: tests/e2e/test_subscribe_e2e.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from hashlib import blake2b
from urllib.parse import urlparse

import pytest
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings.http import HTTPMessage, from_binary_event
from hypothesis import given
from hypothesis import strategies as st

from schemas import Envelope, EventId, WorkloadDeleted, WorkloadKey, encode
from schemas.envelope import MAX_HEADER_VALUE, ce_header_value, cloudevent_headers

WHEN = datetime(2026, 1, 31, 12, 0, 0, 123000, tzinfo=UTC)


def entry(event_id: str, source: str = "usher/ledger", time: datetime = WHEN) -> Envelope:
    event = WorkloadDeleted(workload=WorkloadKey("user-a/job"))
    return Envelope(id=EventId(event_id), time=time, source=source, event=event)


def parse(envelope: Envelope, installation: str, *, http: bool) -> BaseCloudEvent:
    headers = cloudevent_headers(envelope, installation)
    if not http:
        del headers["content-type"]
    return from_binary_event(HTTPMessage(headers=headers, body=encode(envelope)))


@pytest.mark.parametrize("http", [True, False], ids=["as-http", "as-nats"])
@pytest.mark.parametrize(
    ("event_id", "source"),
    [
        ("watcher:Job:user-a/j:uid:7:deleted", "usher/watcher"),
        ("ledger:admitted:user-a/ä job", "usher/dequeuer/zone a"),
        ('id with "quotes" and 100%', "usher/ledger"),
    ],
)
def test_the_sdk_reads_the_event_we_published(event_id: str, source: str, http: bool) -> None:
    envelope = entry(event_id, source)
    event = parse(envelope, "prod-eu", http=http)
    assert event.get_specversion() == "1.0"
    assert event.get_id() == event_id
    assert event.get_type() == "io.usher.workload.deleted.v1"
    assert event.get_source() == f"urn:usher:prod-eu:{source}"
    assert event.get_time() == WHEN
    assert event.get_datacontenttype() == "application/json"
    assert event.get_data() == json.loads(encode(envelope))


def test_source_is_an_absolute_uri_naming_the_installation() -> None:
    one = parse(entry("x"), "prod-eu", http=False).get_source()
    other = parse(entry("x"), "prod-us", http=False).get_source()
    assert urlparse(one).scheme == "urn" and one != other


def test_time_is_written_as_the_envelope_writes_it_in_utc() -> None:
    headers = cloudevent_headers(entry("x"), "usher")
    written = json.loads(encode(entry("x")))["time"]
    assert headers["ce-time"] == written == "2026-01-31T12:00:00.123000Z"
    elsewhere = entry(
        "x", time=datetime(2026, 1, 31, 13, 0, 0, 123000, tzinfo=timezone(timedelta(hours=1)))
    )
    assert cloudevent_headers(elsewhere, "usher")["ce-time"] == "2026-01-31T12:00:00.123000Z"


def test_it_is_binary_mode_by_the_nats_binding() -> None:
    headers = cloudevent_headers(entry("x"), "usher")
    assert not headers["content-type"].startswith("application/cloudevents")
    assert headers["ce-datacontenttype"] == "application/json"
    assert all(value.isascii() and value.isprintable() for value in headers.values())


@given(event_id=st.text(min_size=1, max_size=400), source=st.text(min_size=1, max_size=40))
def test_every_header_value_is_printable_ascii_and_an_id_reads_back_or_is_a_digest(
    event_id: str, source: str
) -> None:
    headers = cloudevent_headers(entry(event_id, source), "usher")
    assert all(
        v.isascii() and v.isprintable() and " " not in v
        for k, v in headers.items()
        if k.startswith("ce-")
    )
    assert all(len(value) <= MAX_HEADER_VALUE for value in headers.values())
    event = from_binary_event(HTTPMessage(headers=headers, body=b"{}"))
    assert event.get_id() == event_id or event.get_id() == headers["Nats-Msg-Id"]


# --------------------------------------------------------------------------- the exact bytes

HOSTILE = [
    # (id, source, installation) -> the header block, in wire order, as it was first written
    (
        "ledger:admitted:user-a/ä job 😀",
        "usher/dequeuer/zone a",
        "prod-eu",
        "digest:f877c8a38445a63e75cc8d685fa97719",
        "ledger:admitted:user-a/%C3%A4%20job%20%F0%9F%98%80",
        "urn:usher:prod-eu:usher/dequeuer/zone%20a",
    ),
    (
        '100% "quoted"\ttab\x00nul\x7fdel\u2028',
        "usher/ledger",
        "usher",
        "digest:03483d012692d61ba7a69ac5ebcc502c",
        "100%25%20%22quoted%22%09tab%00nul%7Fdel%E2%80%A8",
        "urn:usher:usher:usher/ledger",
    ),
    (
        "lone\ud800surrogate",
        "src\udfff",
        "usher",
        "digest:b80fa62f6ffcdc72820a2031c2e64ad1",
        "lone%ED%A0%80surrogate",
        "urn:usher:usher:src%ED%BF%BF",
    ),
    ("x" * 255, "usher/ledger", "usher", "x" * 255, "x" * 255, "urn:usher:usher:usher/ledger"),
    (
        "x" * 256,
        "s" * 300,
        "usher",
        "digest:0b2c2b0de02938ad7a728b51e8da3357",
        "digest:0b2c2b0de02938ad7a728b51e8da3357",
        "digest:fa61418dbdfc954edeb617c98a80449e",
    ),
    (
        "é" * 42,
        "usher/ledger",
        "usher",
        "digest:f2b0bdd8907c3d7c55b0382427118db0",
        "%C3%A9" * 42,
        "urn:usher:usher:usher/ledger",
    ),
    (
        "é" * 43,
        "usher/ledger",
        "usher",
        "digest:01a500eb754e1088161fa8b6c0480aef",
        "digest:01a500eb754e1088161fa8b6c0480aef",
        "urn:usher:usher:usher/ledger",
    ),
]


def header_block(headers: dict[str, str]) -> bytes:
    """The header block nats-py writes for ``headers`` (``HPUB``): one line each, in order."""
    lines = b"".join(f"{key}: {value}\r\n".encode() for key, value in headers.items())
    return b"NATS/1.0\r\n" + lines + b"\r\n"


@pytest.mark.parametrize(("event_id", "source", "installation", "msg_id", "ce_id", "ce_source"),
                         HOSTILE, ids=range(len(HOSTILE)))  # fmt: skip
def test_the_header_block_of_a_hostile_entry_is_pinned_byte_for_byte(
    event_id: str, source: str, installation: str, msg_id: str, ce_id: str, ce_source: str
) -> None:
    headers = cloudevent_headers(entry(event_id, source), installation)
    assert header_block(headers) == (
        b"NATS/1.0\r\n"
        + f"Nats-Msg-Id: {msg_id}\r\n".encode()
        + b"ce-specversion: 1.0\r\n"
        + f"ce-id: {ce_id}\r\n".encode()
        + b"ce-type: io.usher.workload.deleted.v1\r\n"
        + f"ce-source: {ce_source}\r\n".encode()
        + b"ce-time: 2026-01-31T12:00:00.123000Z\r\n"
        + b"ce-datacontenttype: application/json\r\n"
        + b"content-type: application/json\r\n"
        + b"\r\n"
    )
    # Asked again (the values that repeat are remembered): the same bytes.
    assert cloudevent_headers(entry(event_id, source), installation) == headers


def percent_encoded(value: str) -> str:
    """The binding's percent-encoding, character by character, as the binding words it:
    printable ASCII but space, double quote and percent as is, every other character as
    ``%XY`` per byte of its UTF-8 encoding; longer than ``MAX_HEADER_VALUE``: a digest."""
    kept = {chr(c) for c in range(0x21, 0x7F)} - {"%", '"'}
    encoded = "".join(
        char
        if char in kept
        else "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))
        for char in value
    )
    if len(encoded) <= MAX_HEADER_VALUE:
        return encoded
    return "digest:" + blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@given(value=st.text(max_size=300) | st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_a_value_is_percent_encoded_exactly_as_the_binding_says(value: str) -> None:
    assert ce_header_value(value) == percent_encoded(value)
    assert cloudevent_headers(entry(value or "x"), "usher")["ce-id"] == percent_encoded(
        value or "x"
    )
