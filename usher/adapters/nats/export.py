"""Read the whole log fast, and export/import it as a file (``usher log export|import``).

What it does: ``read_log`` reads every entry of an installation's log stream with an ordered
consumer (push delivery with flow control: the fastest way nats-py reads a stream; no acks,
no durable state left behind) up to the last sequence the stream had when reading started,
keeping each payload byte for byte and the time the stream stored it. ``export_log`` writes
it to a file in the format of ``usher.core.history.replay`` (JSON Lines: a header, then seq,
subject,
stored time and the raw envelope per entry); ``import_log`` publishes a file's entries, in
order, into an installation's log stream, rewriting the subject prefix to its own and
preserving each envelope's id as ``Nats-Msg-Id`` (so the server drops what it already has
within its duplicate window; the importing stream stores them at import time, so their log
times are the import's). It refuses a stream that already holds entries unless ``force`` is given.
What it must never do: change a payload, publish out of order, create consumers that outlive
the call, or leak a NATS exception past its typed errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo, DeliverPolicy

from schemas import cloudevent_headers, decode_envelope
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.subjects import Subjects
from usher.core.history.replay import (
    ExportedEntry,
    ExportFormatError,
    ExportHeader,
    decode_export,
    encode_export,
    exported_entry,
    payload,
)

CONNECT_TIMEOUT_S = 3.0
IDLE_TIMEOUT_S = 15.0
"""Reading gives up when no entry arrived for this long (the server stopped answering)."""


class LogError(Exception):
    """Base of this module's typed errors."""


class LogUnavailable(LogError):
    """NATS could not be reached (or stopped answering) at ``url``."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"cannot reach NATS at {url}: {detail}")
        self.url = url
        self.detail = detail


class LogStreamMissing(LogError):
    """The installation has no log stream (wrong prefix, or nothing ever ran)."""

    def __init__(self, stream: str) -> None:
        super().__init__(f"no log stream {stream}")
        self.stream = stream


class StreamNotEmpty(LogError):
    """``import`` into a stream that already holds entries, without ``force``."""

    def __init__(self, stream: str, messages: int) -> None:
        super().__init__(f"log stream {stream} already holds {messages} entries")
        self.stream = stream
        self.messages = messages


class ExportFileError(LogError):
    """An export file is missing, unreadable or malformed; ``line`` is 0 when not a line."""

    def __init__(self, path: Path, detail: str, line: int = 0) -> None:
        where = f":{line}" if line else ""
        super().__init__(f"{path}{where}: {detail}")
        self.path = path
        self.detail = detail
        self.line = line


@dataclass(frozen=True)
class ImportResult:
    """What ``import_log`` did: entries published, and those the server already had."""

    published: int
    duplicates: int
    stream: str


async def _quiet(_error: Exception) -> None:
    """Connection errors are raised as ``LogUnavailable``; nothing is printed meanwhile."""


async def connect(url: str) -> Client:
    """A NATS connection that fails fast (one attempt) with ``LogUnavailable``."""
    try:
        # nats-py hangs on an unreachable server with allow_reconnect=False; one short
        # attempt with reconnects allowed fails at once with NoServersError instead.
        return await asyncio.wait_for(
            nats.connect(
                url,
                connect_timeout=CONNECT_TIMEOUT_S,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.1,
                error_cb=_quiet,
            ),
            timeout=CONNECT_TIMEOUT_S * 3,
        )
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        detail = str(exc).removeprefix("nats: ") or type(exc).__name__
        raise LogUnavailable(url, detail) from exc


async def read_entries(
    js: JetStreamContext, subjects: Subjects, *, url: str = "the server"
) -> list[ExportedEntry]:
    """Every entry of the log stream, in order, as stored (up to its last seq at start)."""
    return await read_matching(js, subjects, [f"{subjects.prefix}.>"], url=url)


async def read_matching(
    js: JetStreamContext,
    subjects: Subjects,
    filters: Sequence[str],
    *,
    url: str = "the server",
    until_seq: int | None = None,
) -> list[ExportedEntry]:
    """The entries of the log stream on subjects matching ``filters`` (none overlapping), in
    order, as stored, up to the stream's last seq at start (or ``until_seq``, if earlier): the
    server filters, so only they are sent (``usher explain``'s one job among months of
    history)."""
    try:
        info = await js.stream_info(subjects.stream_name)
    except nats.js.errors.NotFoundError as exc:
        raise LogStreamMissing(subjects.stream_name) from exc
    last = int(info.state.last_seq)
    if until_seq is not None:
        last = min(last, until_seq)
    if int(info.state.messages) == 0:
        return []
    entries: list[ExportedEntry] = []
    progress = asyncio.Event()
    done = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        meta = msg.metadata
        seq = int(meta.sequence.stream)
        if (not entries or seq > entries[-1].seq) and seq <= last:
            # The stream's timestamp, not the envelope's: the log's own time for windows.
            entries.append(exported_entry(seq, msg.subject, msg.data, meta.timestamp))
        progress.set()
        if seq >= last or not meta.num_pending:
            done.set()

    one = len(filters) == 1
    sub = await js.subscribe(
        filters[0],
        stream=subjects.stream_name,
        cb=on_message,
        ordered_consumer=True,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.ALL, filter_subjects=None if one else list(filters)
        ),
        pending_msgs_limit=-1,
        pending_bytes_limit=-1,
    )
    try:
        if _nothing_matches(await sub.consumer_info()):
            done.set()  # no message will ever say so
        while not done.is_set():
            progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), timeout=IDLE_TIMEOUT_S)
            if not progress.is_set() and not done.is_set():
                got = entries[-1].seq if entries else 0
                raise LogUnavailable(url, f"reading stopped at seq {got} of {last}")
    finally:
        with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
            await sub.unsubscribe()
    return entries


async def fetch_log(url: str, subjects: Subjects) -> tuple[ExportHeader, list[ExportedEntry]]:
    """Connect, read the whole log, disconnect; the header describes what was read."""
    nc = await connect(url)
    try:
        entries = await read_entries(nc.jetstream(), subjects, url=url)
    except (OSError, nats.errors.Error) as exc:
        raise LogUnavailable(url, f"{type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
    header = ExportHeader(
        prefix=subjects.prefix,
        stream=subjects.stream_name,
        entries=len(entries),
        first_seq=entries[0].seq if entries else 0,
        last_seq=entries[-1].seq if entries else 0,
    )
    return header, entries


async def export_log(url: str, subjects: Subjects, path: Path) -> ExportHeader:
    """Write the whole log to ``path``; returns the header written."""
    header, entries = await fetch_log(url, subjects)
    write_export_file(path, header, entries)
    return header


def write_export_file(path: Path, header: ExportHeader, entries: Sequence[ExportedEntry]) -> None:
    """Write an export file (``ExportFileError`` when it cannot be written)."""
    try:
        path.write_bytes(encode_export(header, entries))
    except OSError as exc:
        raise ExportFileError(path, f"cannot write ({exc.strerror or type(exc).__name__})") from exc


def read_export_file(path: Path) -> tuple[ExportHeader, list[ExportedEntry]]:
    """Read and parse an export file; every failure is an ``ExportFileError``."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError as exc:
        raise ExportFileError(path, "no such file") from exc
    except OSError as exc:
        raise ExportFileError(path, f"cannot read ({exc.strerror or type(exc).__name__})") from exc
    try:
        return decode_export(blob)
    except ExportFormatError as exc:
        raise ExportFileError(path, exc.detail, exc.line) from exc


def _target_subject(subject: str, header: ExportHeader, subjects: Subjects) -> str:
    old = f"{header.prefix}."
    if not subject.startswith(old):
        raise ValueError(f"subject {subject} is not under the file's prefix {header.prefix}")
    return f"{subjects.prefix}.{subject[len(old) :]}"


async def import_log(
    url: str, subjects: Subjects, path: Path, *, force: bool = False
) -> ImportResult:
    """Publish a file's entries into the log stream, in order, ids kept as ``Nats-Msg-Id``."""
    header, entries = read_export_file(path)
    for number, entry in enumerate(entries, start=2):
        try:
            _target_subject(entry.subject, header, subjects)
        except ValueError as exc:
            raise ExportFileError(path, str(exc), number) from exc
    nc = await connect(url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, subjects)
        info = await js.stream_info(subjects.stream_name)
        if int(info.state.messages) > 0 and not force:
            raise StreamNotEmpty(subjects.stream_name, int(info.state.messages))
        published = duplicates = 0
        for entry in entries:
            ack = await js.publish(
                _target_subject(entry.subject, header, subjects),
                payload(entry),
                headers=_headers(entry, subjects),
            )
            published += 1
            duplicates += bool(ack.duplicate)
        return ImportResult(published=published, duplicates=duplicates, stream=subjects.stream_name)
    except (OSError, nats.errors.Error) as exc:
        raise LogUnavailable(url, f"{type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def _headers(entry: ExportedEntry, subjects: Subjects) -> dict[str, str] | None:
    """CloudEvents headers with ``Nats-Msg-Id`` for an envelope (now of the installation it is
    imported into); none for other payloads."""
    try:
        return cloudevent_headers(decode_envelope(payload(entry)), subjects.prefix)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


__all__ = [
    "ExportFileError",
    "ImportResult",
    "LogError",
    "LogStreamMissing",
    "LogUnavailable",
    "StreamNotEmpty",
    "connect",
    "export_log",
    "fetch_log",
    "import_log",
    "read_entries",
    "read_export_file",
    "write_export_file",
]


def _nothing_matches(info: ConsumerInfo) -> bool:
    """Whether a fresh consumer's filters match nothing: none waits and none was sent. Sent
    but not yet seen by the callback counts as matching (its last message ends the read); an
    empty ``entries`` says nothing, as the client's tasks may not have run yet."""
    delivered = info.delivered.consumer_seq if info.delivered is not None else 0
    return not info.num_pending and not delivered
