"""Engine snapshots in a JetStream Object Store bucket, one object per consumer of the log.

What it does: keeps the latest snapshot of each service's engine (objects ``dequeuer-<zone>``,
``preemptor``) in the bucket ``<PREFIX>_SNAPSHOTS`` of the installation (and the people read
models the preemptor keeps, ``people-<digest>``, in ``<PREFIX>_VIEWS``), with the log sequence
it covers and string labels (the engine config's fingerprint, the log's identity) in the
object's headers, so a reader can judge a snapshot before downloading it. The client checks
the SHA-256 digest of what it reads back. Writing an object under the same name replaces it
atomically (a new meta message rolls up the old one; old chunks are purged).
``labels``/``unusable`` are the one judgment of whether a stored snapshot may be restored (same
format, same engine configuration, same log, no further than the log's end), for the services'
engines and the client's read model alike.
What it must never do: interpret the snapshot bytes (that is ``usher.core.engine.snapshot``), or
raise for a missing bucket or object: that only means "no snapshot", and the caller replays.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from dataclasses import dataclass, field

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import (
    ObjectInfo,
    ObjectMeta,
    ObjectMetaOptions,
    ObjectStoreConfig,
    StorageType,
    StreamInfo,
)
from nats.js.object_store import OBJ_CHUNKS_PRE_TEMPLATE, OBJ_STREAM_TEMPLATE, ObjectStore

from usher.adapters.nats.subjects import Subjects
from usher.core.engine.snapshot import FORMAT, fingerprint
from usher.core.model.config import EngineConfig

LABEL_CONFIG = "Config"
LABEL_LOG = "Log-Created"
LABEL_FORMAT = "Format"


def labels(config: EngineConfig, log_created: str, *, form: str = str(FORMAT)) -> dict[str, str]:
    """What a snapshot is stored with, and checked against before it is restored: ``form``
    names the encoding (the engine's ``FORMAT``, or a reader's own format of a record that
    holds an engine snapshot)."""
    return {LABEL_FORMAT: form, LABEL_CONFIG: fingerprint(config), LABEL_LOG: log_created}


def log_created(stream: StreamInfo) -> str:
    """The log's identity (``LABEL_LOG``): its creation time, since a re-created stream reuses
    sequences for other entries."""
    return stream.created.isoformat() if stream.created else ""


def unusable(seq: int, found: dict[str, str], wanted: dict[str, str], last_seq: int) -> str:
    """Why a snapshot stored with ``found`` labels, covering the log up to ``seq``, must not be
    restored by a reader that wants ``wanted`` (``labels``) on a log ending at ``last_seq``;
    empty when it may."""
    if found.get(LABEL_FORMAT) != wanted.get(LABEL_FORMAT):
        return f"format {found.get(LABEL_FORMAT)} (this version reads {wanted.get(LABEL_FORMAT)})"
    if found.get(LABEL_CONFIG) != wanted.get(LABEL_CONFIG):
        return f"made under another engine configuration: {found.get(LABEL_CONFIG)}"
    if found.get(LABEL_LOG) != wanted.get(LABEL_LOG):
        # The stream was deleted and created again: its sequences mean other entries.
        return f"of another log (created {found.get(LABEL_LOG)})"
    if seq > last_seq:
        return f"covers up to {seq}, past the log's end {last_seq}"
    return ""


SEQ_HEADER = "Usher-Log-Seq"
"""Header holding the last log sequence the snapshot covers."""
LABEL_PREFIX = "Usher-"
CHUNK_BYTES = 512 * 1024
"""Chunks well under NATS's default 1 MiB payload limit; 4x the client's default, so a 10 MB
snapshot is 20 acknowledged publishes instead of 80."""


def bucket_name(subjects: Subjects) -> str:
    """``<PREFIX>_SNAPSHOTS``, spelled like the installation's stream names."""
    return f"{subjects.prefix.upper().replace('-', '_')}_SNAPSHOTS"


def views_bucket_name(subjects: Subjects) -> str:
    """``<PREFIX>_VIEWS``: the read models the preemptor keeps for people (``people-<digest>``),
    a bucket of their own so that readers may be allowed into it and nowhere else."""
    return f"{subjects.prefix.upper().replace('-', '_')}_VIEWS"


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What the store says about one snapshot without downloading it."""

    name: str
    seq: int
    size: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """A snapshot read back: the log sequence it covers, its bytes and its labels."""

    seq: int
    data: bytes
    labels: dict[str, str] = field(default_factory=dict)


class SnapshotStore:
    """The snapshots of one installation (prefix); the bucket is created on first save."""

    def __init__(
        self, js: JetStreamContext, subjects: Subjects, *, bucket: str | None = None
    ) -> None:
        self._js = js
        self.bucket = bucket or bucket_name(subjects)
        self._store: ObjectStore | None = None

    async def _open(self, *, create: bool) -> ObjectStore | None:
        if self._store is not None:
            return self._store
        try:
            self._store = await self._js.object_store(self.bucket)
        except nats.js.errors.BucketNotFoundError:
            if not create:
                return None
            try:
                self._store = await self._js.create_object_store(
                    self.bucket,
                    config=ObjectStoreConfig(
                        description=f"Usher: latest snapshot per reader of the log ({self.bucket})",
                        storage=StorageType.FILE,
                    ),
                )
            except nats.js.errors.BadRequestError:
                # Another service created it at the same moment: use theirs.
                self._store = await self._js.object_store(self.bucket)
        return self._store

    async def save(
        self, name: str, seq: int, data: bytes, labels: dict[str, str] | None = None
    ) -> SnapshotInfo:
        """Store ``data`` as the snapshot ``name`` covering the log up to ``seq``."""
        store = await self._open(create=True)
        assert store is not None
        headers: dict[str, list[str]] = {SEQ_HEADER: [str(seq)]}
        for key, value in (labels or {}).items():
            headers[_label_header(key)] = [value]
        meta = ObjectMeta(
            name=name,
            description=f"engine snapshot of {name} at log sequence {seq}",
            # Header values as lists: the Go clients' nats.Header shape, readable by any client.
            headers=headers,
            options=ObjectMetaOptions(max_chunk_size=CHUNK_BYTES),
        )
        await store.put(name, data, meta=meta)
        return SnapshotInfo(name=name, seq=seq, size=len(data), labels=dict(labels or {}))

    async def info(self, name: str) -> SnapshotInfo | None:
        """The latest snapshot's sequence, size and labels; None when there is none (or it
        carries no readable sequence)."""
        store = await self._open(create=False)
        if store is None:
            return None
        try:
            info = await store.get_info(name)
        except nats.js.errors.ObjectNotFoundError:
            return None
        seq, labels = _read_headers(info.headers)
        if seq is None:
            return None
        return SnapshotInfo(name=name, seq=seq, size=int(info.size or 0), labels=labels)

    async def load(self, name: str) -> StoredSnapshot | None:
        """The latest snapshot ``name`` (size and digest checked), or None when there is none.

        Raises ``nats.js.errors.DigestMismatchError`` (a ``nats.errors.Error``) when the
        bytes read back are not the ones stored.
        """
        store = await self._open(create=False)
        if store is None:
            return None
        try:
            info = await store.get_info(name)
        except nats.js.errors.ObjectNotFoundError:
            return None
        seq, labels = _read_headers(info.headers)
        if seq is None or info.is_link():
            return None
        return StoredSnapshot(seq=seq, data=await self._read_chunks(info), labels=labels)

    async def _read_chunks(self, info: ObjectInfo) -> bytes:
        """The object's chunks, in order, each fetched by ``next_by_subj`` from the stream.

        No consumer at all: the client's ``ObjectStore.get`` creates an ordered push consumer
        (and answers its flow control from a timer that stalls big reads), a pull consumer
        needs a consumer name the server's permissions cannot tie to one service. A direct
        ``STREAM.MSG.GET`` needs only what ``info`` already uses, one request per chunk
        (512 KiB). Chunks live on ``$O.<bucket>.C.<nuid>`` (ADR-20).
        """
        chunks = int(info.chunks or 0)
        subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=self.bucket, obj=info.nuid)
        stream = OBJ_STREAM_TEMPLATE.format(bucket=self.bucket)
        parts: list[bytes] = []
        digest = hashlib.sha256()
        seq = 1
        while len(parts) < chunks:
            msg = await self._js.get_msg(stream, seq=seq, subject=subject, next=True)
            parts.append(msg.data or b"")
            digest.update(parts[-1])
            seq = int(msg.seq or 0) + 1
        data = b"".join(parts)
        expected = (info.digest or "").split("=", 1)[-1]
        actual = base64.urlsafe_b64encode(digest.digest()).decode()
        if len(data) != (info.size or 0) or actual.rstrip("=") != expected.rstrip("="):
            raise nats.js.errors.DigestMismatchError()
        return data

    async def delete(self, name: str) -> bool:
        """Remove the snapshot ``name``; False when there was none."""
        store = await self._open(create=False)
        if store is None:
            return False
        try:
            await store.delete(name)
        except nats.js.errors.NotFoundError:
            return False
        return True

    async def drop_bucket(self) -> None:
        """Remove every snapshot of the installation (tests and ``reset`` clean up with it)."""
        self._store = None
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self._js.delete_object_store(self.bucket)


def _label_header(key: str) -> str:
    return f"{LABEL_PREFIX}{key}"


def _read_headers(headers: dict[str, object] | None) -> tuple[int | None, dict[str, str]]:
    """The covered sequence (None if absent or malformed: such an object is not usable,
    restoring it without knowing where the log resumes would apply entries twice) and labels.
    """
    seq: int | None = None
    labels: dict[str, str] = {}
    for key, raw in (headers or {}).items():
        # Another client may have written a plain string instead of a list of them.
        value = raw[0] if isinstance(raw, list) and raw else raw
        if not isinstance(value, str):
            continue
        if key == SEQ_HEADER:
            seq = int(value) if value.isdigit() else None
        elif key.startswith(LABEL_PREFIX):
            labels[key[len(LABEL_PREFIX) :]] = value
    return seq, labels
