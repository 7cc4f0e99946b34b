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
from urllib.parse import urlparse

import pytest
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings.http import HTTPMessage, from_binary_event
from hypothesis import given
from hypothesis import strategies as st

from schemas import Envelope, EventId, WorkloadDeleted, WorkloadKey, encode
from schemas.envelope import MAX_HEADER_VALUE, cloudevent_headers

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
