"""The envelope every log entry travels in, plus the codecs for it.

What it does: wraps a cluster event or a decision with its id, time and source (the CloudEvents
attributes), and offers the one place where bytes become typed messages and back.
What it must never do: swallow a decoding error (callers park bad messages explicitly) or
accept loose dicts.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from schemas.decisions import Decision
from schemas.events import ClusterEvent
from schemas.holds import HoldEvent
from schemas.ids import EventId
from schemas.passes import PassRan

SCHEMA_VERSION = 1

LogEvent = ClusterEvent | Decision | HoldEvent | PassRan


class Envelope(msgspec.Struct, frozen=True, kw_only=True, tag="envelope.v1"):
    """One entry of the Usher log."""

    id: EventId
    """Deterministic id, also sent as ``Nats-Msg-Id`` and ``ce-id``."""
    time: datetime
    """When the source produced it (UTC), ``ce-time``."""
    source: str
    """Who produced it, e.g. ``usher/watcher`` or ``usher/dequeuer/zone-a``, ``ce-source``."""
    v: int = SCHEMA_VERSION
    """The envelope's schema version (an integer, 1)."""
    event: LogEvent


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True, tag="dlq.v1"):
    """A message a service could not process, parked on ``<prefix>.dlq.<service>``."""

    service: str
    subject: str
    error: str
    """Exception type, e.g. ``msgspec.ValidationError``."""
    detail: str
    """Its message, naming what is wrong (field path from msgspec)."""
    data: bytes
    """The message as received; only its first bytes when ``truncated``."""
    stream_seq: int | None = None
    """Its sequence on the log stream, when it came from there (the log keeps it whole)."""
    size: int | None = None
    """Bytes of the whole message (``data`` may hold only its head)."""
    sha256: str | None = None
    """Hex SHA-256 of the whole message, to recognise it on the log or among other letters."""
    truncated: bool = False
    """The whole letter would exceed the server's max_payload: ``data`` is the message's head
    (and ``detail`` cut short), a reference rather than a copy (``size``, ``sha256``)."""


T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)


def encode(message: msgspec.Struct) -> bytes:
    """Serialise any wire struct to JSON bytes."""
    return _encoder.encode(message)


def decode_envelope(data: bytes) -> Envelope:
    """Decode log bytes; raises ``msgspec.DecodeError``/``ValidationError`` naming the field."""
    try:
        return _envelope_decoder.decode(data)
    except UnicodeDecodeError as exc:
        raise _not_utf8(exc) from exc


def decode(data: bytes, type_: type[T]) -> T:
    """Decode bytes into ``type_``; raises only msgspec's errors."""
    try:
        return msgspec.json.decode(data, type=type_)
    except UnicodeDecodeError as exc:
        raise _not_utf8(exc) from exc


def _not_utf8(exc: UnicodeDecodeError) -> msgspec.DecodeError:
    """msgspec lets a bad byte in a tag value escape as ``UnicodeDecodeError``; callers (which
    park what does not decode) catch msgspec's errors only, so it becomes one of them."""
    return msgspec.DecodeError(f"invalid UTF-8 at byte {exc.start}: {exc.reason}")


MAX_HEADER_VALUE = 255
"""The longest id or source written as is into a header: ids embed workload names, and a
hostile one (100 KB, control characters) must neither be refused by the server nor break the
header block; a longer or odd one is written as a digest of itself (the same id gives the
same header, so deduplication by ``Nats-Msg-Id`` still holds)."""


def header_value(value: str) -> str:
    """``value`` as a header may carry it (see ``MAX_HEADER_VALUE``)."""
    if len(value) <= MAX_HEADER_VALUE and value.isascii() and value.isprintable():
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"digest:{digest}"


def cloudevent_headers(envelope: Envelope) -> dict[str, str]:
    """CloudEvents binary-mode headers for a published envelope (plus ``Nats-Msg-Id``)."""
    tag: Any = type(envelope.event).__struct_config__.tag
    return {
        "Nats-Msg-Id": header_value(envelope.id),
        "ce-specversion": "1.0",
        "ce-id": header_value(envelope.id),
        "ce-type": f"io.usher.{tag}",
        "ce-source": header_value(envelope.source),
        "ce-time": envelope.time.isoformat(),
        "content-type": "application/json",
    }
