"""The envelope every log entry travels in, plus the codecs for it.

What it does: wraps a cluster event or a decision with its id, time and source (the CloudEvents
attributes), and offers the one place where bytes become typed messages and back.
What it must never do: swallow a decoding error (callers park bad messages explicitly) or
accept loose dicts.
"""

from __future__ import annotations

import functools
import hashlib
import re
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

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
    return _digest(value)


def _digest(value: str) -> str:
    """``digest:`` and a hash of ``value``: what stands for a value too long or odd for a header."""
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"digest:{digest}"


CLOUDEVENTS_BINDING: Final = "NATS Protocol Binding for CloudEvents 1.0.3-wip, binary content mode"
"""How every log entry is a CloudEvent (CloudEvents 1.0): the NATS binding's binary content mode,
as its working draft (version 1.0.3-wip) defines it -- the released 1.0.2 knows structured
mode only. The payload is the event data (the ``Envelope`` JSON, ``ce-datacontenttype:
application/json``); each attribute is a ``ce-<name>`` header, percent-encoded as the binding
says. ``Content-Type`` is ``application/json`` too (never ``application/cloudevents``, which
would mean structured mode), so an HTTP binary-mode reader parses the same headers."""

CE_TYPE_PREFIX: Final = "io.usher."
"""``ce-type`` is this and the event's ``type`` tag, e.g. ``io.usher.decision.admitted.v1``."""

CE_SOURCE_SCHEME: Final = "urn:usher:"
"""``ce-source`` is ``urn:usher:<installation>:<envelope source>``, e.g.
``urn:usher:usher:usher/ledger``: an absolute URI naming the installation (its subject prefix,
unique per NATS deployment), so ``(source, id)`` is unique across installations."""

_CE_UNSAFE: Final = re.compile(r"[^\x21\x23\x24\x26-\x7e]")
"""What a ``ce-`` header value cannot keep as is: all but printable ASCII, and space, double
quote and percent."""


def ce_source(installation: str, source: str) -> str:
    """The ``ce-source`` of an entry ``source`` wrote in ``installation`` (its prefix)."""
    return f"{CE_SOURCE_SCHEME}{installation}:{source}"


def ce_time(time: datetime) -> str:
    """``ce-time`` in the one format of the log: the envelope's own (RFC 3339, UTC as ``Z``;
    producers stamp UTC, and any other offset is written as the same instant in UTC)."""
    return _encoder.encode(time.astimezone(UTC))[1:-1].decode("ascii")


def ce_header_value(value: str) -> str:
    """``value`` percent-encoded as the binding says (UTF-8 bytes as ``%XY``); one too long
    for a header (``MAX_HEADER_VALUE``) is written as a digest of itself (encoding never makes
    a value shorter, so one longer than that before is a digest without being encoded)."""
    if len(value) > MAX_HEADER_VALUE:
        return _digest(value)
    if _CE_UNSAFE.search(value) is None:
        return value
    encoded = _CE_UNSAFE.sub(_percent, value)
    return encoded if len(encoded) <= MAX_HEADER_VALUE else _digest(value)


def _percent(unsafe: re.Match[str]) -> str:
    """The character ``unsafe`` matched as ``%XY`` per byte of its UTF-8 encoding."""
    return "".join(f"%{byte:02X}" for byte in unsafe[0].encode("utf-8", "surrogatepass"))


@functools.lru_cache(maxsize=1024)
def _ce_source_header(installation: str, source: str) -> str:
    """``ce-source``'s header value: the same few installations and sources write every entry."""
    return ce_header_value(ce_source(installation, source))


@functools.lru_cache(maxsize=256)
def _ce_type_header(event_type: type[msgspec.Struct]) -> str:
    """``ce-type``'s header value for entries about an event of ``event_type``."""
    tag: Any = event_type.__struct_config__.tag
    return ce_header_value(f"{CE_TYPE_PREFIX}{tag}")


def _id_headers(event_id: str) -> tuple[str, str]:
    """``Nats-Msg-Id`` and ``ce-id`` for ``event_id``: the id itself in both, when it is short
    and needs no escape (most do)."""
    if len(event_id) <= MAX_HEADER_VALUE and _CE_UNSAFE.search(event_id) is None:
        return event_id, event_id
    return header_value(event_id), ce_header_value(event_id)


def cloudevent_headers(envelope: Envelope, installation: str) -> dict[str, str]:
    """CloudEvents headers (``CLOUDEVENTS_BINDING``) for an envelope published by
    ``installation`` (its subject prefix), plus ``Nats-Msg-Id``; in this order, which is the
    order of the header block on the wire."""
    msg_id, ce_id = _id_headers(envelope.id)
    return {
        "Nats-Msg-Id": msg_id,
        "ce-specversion": "1.0",
        "ce-id": ce_id,
        "ce-type": _ce_type_header(type(envelope.event)),
        "ce-source": _ce_source_header(installation, envelope.source),
        "ce-time": ce_time(envelope.time),
        "ce-datacontenttype": "application/json",
        "content-type": "application/json",
    }
