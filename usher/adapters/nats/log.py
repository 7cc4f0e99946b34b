"""The Usher log on NATS JetStream: streams, publishing envelopes, parking dead letters.

What it does: creates (or updates) the log and DLQ streams of an installation (the admin's
job: ``ensure_streams``, with the configured replicas), lets a service check they exist
(``require_streams``: a service never reconfigures the log), publishes
envelopes with deterministic ``Nats-Msg-Id`` and CloudEvents headers, and parks messages that
could not be processed on ``<prefix>.dlq.<service>`` with the error: whole when the letter fits
the server's ``max_payload``, else as a reference (size, SHA-256 and the first
``PARK_HEAD_BYTES`` bytes; a message of the log stays whole there, at ``stream_seq``).
What it must never do: decide anything, or drop a message silently.
"""

from __future__ import annotations

import contextlib
import hashlib

import msgspec
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, PubAck, RetentionPolicy, StorageType, StreamConfig

from schemas import DeadLetter, Envelope, cloudevent_headers, encode
from usher.adapters.nats.subjects import Subjects, installation_of

DUPLICATE_WINDOW_S = 120.0
DLQ_MAX_AGE_S = 14 * 24 * 3600.0
PARK_HEAD_BYTES = 4096
"""How much of a message too large to park whole is kept in its dead letter."""


class StreamMissing(Exception):
    """A service found no ``stream`` and may not (or could not) create it: the admin must."""

    def __init__(self, stream: str, detail: str) -> None:
        super().__init__(f"stream {stream} does not exist and was not created: {detail}")
        self.stream = stream
        self.detail = detail


def log_stream_config(subjects: Subjects, replicas: int = 1) -> StreamConfig:
    """The log keeps everything (it is the source of truth); dedup by ``Nats-Msg-Id``."""
    return StreamConfig(
        name=subjects.stream_name,
        subjects=subjects.log_subjects,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        duplicate_window=DUPLICATE_WINDOW_S,
        allow_direct=True,
        num_replicas=replicas,
    )


def dlq_stream_config(subjects: Subjects, replicas: int = 1) -> StreamConfig:
    """Dead letters are kept two weeks for an operator to inspect and replay."""
    return StreamConfig(
        name=subjects.dlq_stream_name,
        subjects=subjects.dlq_subjects,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=DLQ_MAX_AGE_S,
        num_replicas=replicas,
    )


def stream_configs(subjects: Subjects, replicas: int = 1) -> tuple[StreamConfig, StreamConfig]:
    return log_stream_config(subjects, replicas), dlq_stream_config(subjects, replicas)


async def ensure_streams(js: JetStreamContext, subjects: Subjects, replicas: int = 1) -> None:
    """Create the streams, or bring an existing stream's config up to date (idempotent).

    The admin's call (``usher up``, ``usher streams``): it needs STREAM.CREATE/UPDATE, which
    no service identity has (usher/adapters/nats/permissions.py).
    """
    for config in stream_configs(subjects, replicas):
        try:
            await js.stream_info(config.name or "")
        except nats.js.errors.NotFoundError:
            await js.add_stream(config)
        else:
            await js.update_stream(config)


async def require_streams(js: JetStreamContext, subjects: Subjects, replicas: int = 1) -> None:
    """A service's start: the streams must exist; it never updates them.

    A missing stream is created where the identity may (an open test server); under the
    deploy's or ``usher up``'s permissions the admin created it first, and a refusal (the
    server drops the request: no answer) raises ``StreamMissing``.
    """
    for config in stream_configs(subjects, replicas):
        try:
            await js.stream_info(config.name or "")
        except nats.js.errors.NotFoundError:
            try:
                await js.add_stream(config)
            except nats.js.errors.BadRequestError:
                pass  # created by another service meanwhile
            except (TimeoutError, nats.errors.Error) as exc:
                raise StreamMissing(config.name or "", type(exc).__name__) from exc


async def delete_streams(js: JetStreamContext, subjects: Subjects) -> None:
    """Remove an installation's streams and its snapshot bucket (tests clean up with this)."""
    # Object Store and KV buckets are the streams OBJ_<bucket> and KV_<bucket>; named here to
    # avoid importing their owners (they name them the same way).
    stem = subjects.prefix.upper().replace("-", "_")
    # The leader bucket keeps the prefix's case (services.common.leader.bucket_name).
    buckets = (f"OBJ_{stem}_SNAPSHOTS", f"KV_{subjects.prefix}_LEADERS")
    for name in (subjects.stream_name, subjects.dlq_stream_name, *buckets):
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(name)


async def publish_envelope(js: JetStreamContext, subject: str, envelope: Envelope) -> PubAck:
    """Publish one envelope; a redelivered duplicate (same id) is dropped by the server."""
    headers = cloudevent_headers(envelope, installation_of(subject))
    return await js.publish(subject, encode(envelope), headers=headers)


def with_digest(letter: DeadLetter) -> DeadLetter:
    """The letter with the size and SHA-256 of its message (computed once, on the whole)."""
    if letter.sha256 is not None:
        return letter
    digest = hashlib.sha256(letter.data).hexdigest()
    return msgspec.structs.replace(letter, size=len(letter.data), sha256=digest)


def as_reference(letter: DeadLetter) -> DeadLetter:
    """A letter that points at its message instead of carrying it: size, digest and head."""
    whole = with_digest(letter)
    return msgspec.structs.replace(
        whole,
        data=whole.data[:PARK_HEAD_BYTES],
        detail=whole.detail[:PARK_HEAD_BYTES],
        truncated=True,
    )


async def park(nc: Client, subjects: Subjects, letter: DeadLetter) -> DeadLetter:
    """Park an unprocessable message with its error on the service's DLQ subject.

    A message that fills most of ``max_payload`` cannot travel inside a letter (its bytes
    are base64 there): it is parked as a reference instead. Returns the letter parked.
    """
    js = nc.jetstream()
    parked = with_digest(letter)
    body = encode(parked)
    if len(body) > nc.max_payload:
        parked = as_reference(parked)
        body = encode(parked)
    await js.publish(subjects.dlq(letter.service), body)
    return parked
