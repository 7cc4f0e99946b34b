"""The log as history: its export format, decoding, points in time, and replay.

What it does: defines the export file (``usher log export``: JSON Lines, a header then one
``ExportedEntry`` per log entry with its stream sequence, subject, the time the stream stored
it and the envelope exactly as stored), decodes entries into ``LogEntry`` values (or ``BadEntry``
for what does not decode), parses the ``TIME`` arguments of the history commands, and rebuilds
the queue state at any point of the log (``usher replay``): the same ``Engine`` the services
use folds every entry, cluster events and recorded decisions alike, up to that point; no
decision pass runs, so reasons come from ``Engine.reason_now``; ``budgets_at`` says what the
budgets of the tree in force have spent (B1, ``usher budget``).
What it must never do: read files, sockets or a clock (the caller passes bytes and ``now``),
or change what an entry says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import msgspec

from schemas import (
    Envelope,
    Millis,
    QueueName,
    QuotaPath,
    decode_envelope,
)
from usher.core.engine.facade import Engine, JobView, QueueEntry
from usher.core.history.fold import fold_entry, refused_entry
from usher.core.model.config import EngineConfig
from usher.core.model.quantity import format_quantity
from usher.core.protocol.log import BadEntry, LogEntry, envelope_ms
from usher.core.rules.budgets import BudgetReport, budget_report

EXPORT_FORMAT: Literal["usher-log"] = "usher-log"
EXPORT_VERSION = 1

# ---------------------------------------------------------------------------- export format


class ExportHeader(msgspec.Struct, frozen=True, kw_only=True):
    """First line of an export file: where the entries came from."""

    format: Literal["usher-log"] = EXPORT_FORMAT
    version: int = EXPORT_VERSION
    prefix: str
    """Subject prefix of the installation; ``usher log import`` rewrites it to its own."""
    stream: str
    entries: int
    first_seq: int = 0
    last_seq: int = 0


class ExportedEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One log entry as exported: the envelope is kept byte for byte (``msgspec.Raw``)."""

    seq: int
    subject: str
    envelope: msgspec.Raw
    """The stored envelope JSON; ``null`` when the payload was not JSON (see ``data``)."""
    data: bytes | None = None
    """A payload that is not one line of JSON, base64 in the file (kept so nothing is lost)."""
    stored: datetime | None = None
    """When the log stream stored it (the JetStream message timestamp): the log's own time,
    which no publisher can set. ``None`` in exports written before it was recorded."""


class ExportFormatError(Exception):
    """An export file is not what ``usher log export`` writes; ``line`` says where (1-based)."""

    def __init__(self, line: int, detail: str) -> None:
        super().__init__(f"line {line}: {detail}")
        self.line = line
        self.detail = detail


_NULL = msgspec.Raw(b"null")
_header_decoder = msgspec.json.Decoder(ExportHeader)
_entry_decoder = msgspec.json.Decoder(ExportedEntry)
_encoder = msgspec.json.Encoder()


def exported_entry(
    seq: int, subject: str, data: bytes, stored: datetime | None = None
) -> ExportedEntry:
    """Wrap one stored message; a payload that is not one line of JSON goes to ``data``."""
    if b"\n" not in data and b"\r" not in data:
        try:
            msgspec.json.decode(data)
        except msgspec.DecodeError:
            pass
        else:
            return ExportedEntry(
                seq=seq, subject=subject, envelope=msgspec.Raw(data), stored=stored
            )
    return ExportedEntry(seq=seq, subject=subject, envelope=_NULL, data=data, stored=stored)


def payload(entry: ExportedEntry) -> bytes:
    """The message bytes as they were stored on the log."""
    return entry.data if entry.data is not None else bytes(entry.envelope)


def encode_export(header: ExportHeader, entries: Iterable[ExportedEntry]) -> bytes:
    """The export file: the header line, then one line per entry."""
    lines = [_encoder.encode(header)]
    lines.extend(_encoder.encode(entry) for entry in entries)
    return b"\n".join(lines) + b"\n"


def decode_export(blob: bytes) -> tuple[ExportHeader, list[ExportedEntry]]:
    """Parse an export file; ``ExportFormatError`` names the first bad line."""
    lines = blob.split(b"\n")
    if not lines or not lines[0].strip():
        raise ExportFormatError(1, "empty file: expected the usher-log header line")
    try:
        header = _header_decoder.decode(lines[0])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ExportFormatError(1, f"not an usher-log export header ({exc})") from exc
    if header.version != EXPORT_VERSION:
        raise ExportFormatError(1, f"export version {header.version} is not {EXPORT_VERSION}")
    entries: list[ExportedEntry] = []
    last = 0
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            entry = _entry_decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ExportFormatError(number, f"not a log entry ({exc})") from exc
        if entry.seq <= last:
            raise ExportFormatError(number, f"seq {entry.seq} does not follow seq {last}")
        last = entry.seq
        entries.append(entry)
    return header, entries


# ---------------------------------------------------------------------------- decoded log


@dataclass(frozen=True)
class History:
    """The log in stream order: decoded items and the entries that did not decode."""

    items: list[LogEntry]
    bad: list[BadEntry]

    @property
    def last_seq(self) -> int:
        seqs = [self.items[-1].seq] if self.items else []
        seqs += [self.bad[-1].seq] if self.bad else []
        return max(seqs, default=0)

    @property
    def end_ms(self) -> Millis | None:
        """Time of the last decoded entry (the log's "now" when read offline)."""
        return self.items[-1].time_ms if self.items else None

    @property
    def log_end_ms(self) -> Millis | None:
        """The log's own time of its last entry (what a relative audit window counts from)."""
        return max((i.log_ms for i in self.items if i.log_ms is not None), default=None)

    @property
    def log_times_known(self) -> bool:
        """Whether every decoded entry carries the time the log stored it."""
        return all(item.log_ms is not None for item in self.items)


def decode_history(entries: Iterable[ExportedEntry]) -> History:
    """Decode every entry; the ones that do not decode are kept aside with the error."""
    items: list[LogEntry] = []
    bad: list[BadEntry] = []
    for entry in entries:
        try:
            envelope = decode_envelope(payload(entry))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            bad.append(
                BadEntry(
                    seq=entry.seq, subject=entry.subject, error=type(exc).__name__, detail=str(exc)
                )
            )
            continue
        stored = Millis(int(entry.stored.timestamp() * 1000)) if entry.stored else None
        items.append(
            LogEntry(
                seq=entry.seq,
                subject=entry.subject,
                envelope=envelope,
                time_ms=envelope_ms(envelope),
                log_ms=stored,
            )
        )
    return History(items=items, bad=bad)


def history_of(envelopes: Sequence[tuple[str, Envelope]]) -> History:
    """A history from envelopes in order (seq 1, 2, ...): for logs built in memory, which
    have no server, so each entry is taken as stored at its own time."""
    items: list[LogEntry] = []
    for i, (subject, envelope) in enumerate(envelopes, start=1):
        at = envelope_ms(envelope)
        items.append(LogEntry(seq=i, subject=subject, envelope=envelope, time_ms=at, log_ms=at))
    return History(items=items, bad=[])


# ---------------------------------------------------------------------------- time


class TimeError(ValueError):
    """A ``TIME`` argument is neither ISO-8601 nor a relative time like ``-10m``."""

    def __init__(self, text: str, detail: str) -> None:
        super().__init__(f"{text!r}: {detail}")
        self.text = text
        self.detail = detail


_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time(text: str, end_ms: Millis | None) -> Millis:
    """``TIME``: ISO-8601 (naive means UTC) or ``-90s``/``-10m``/``-2h``/``-1d``/``-500ms``.

    A relative time counts back from ``end_ms``, the time of the log's last entry (so an
    exported file means the same thing whenever it is read).
    """
    stripped = text.strip()
    relative = _RELATIVE.match(stripped)
    if relative is not None:
        if end_ms is None:
            raise TimeError(text, "a relative time needs a log with at least one entry")
        amount = float(relative.group(1)) * _UNIT_MS[relative.group(2)]
        return Millis(end_ms - int(amount))
    try:
        when = datetime.fromisoformat(stripped)
    except ValueError as exc:
        raise TimeError(
            text, "expected ISO-8601 (2024-05-01T12:00:00Z) or a relative time (-10m, -2h)"
        ) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return Millis(int(when.timestamp() * 1000))


def to_datetime(ms: int) -> datetime:
    """Milliseconds since the epoch as an aware UTC datetime."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def format_time(ms: int) -> str:
    """``2024-05-01T12:00:00.123Z``."""
    return format_datetime(to_datetime(ms))


def format_datetime(when: datetime) -> str:
    """An aware datetime as ``2024-05-01T12:00:00.123Z``."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_resources(resources: dict[str, int]) -> str:
    """``cpu 60, memory 60Gi`` in Kubernetes notation, resources sorted."""
    return ", ".join(f"{r} {format_quantity(r, a)}" for r, a in sorted(resources.items())) or "-"


def quantities(resources: dict[str, int]) -> dict[str, str]:
    """Resource -> quantity in Kubernetes notation (as ``usher sim --json`` prints them)."""
    return {r: format_quantity(r, a) for r, a in sorted(resources.items())}


def prefix(
    history: History, *, until_ms: Millis | None = None, until_seq: int | None = None
) -> list[LogEntry]:
    """The longest prefix of the log at or before ``until_seq`` and ``until_ms``."""
    out: list[LogEntry] = []
    for item in history.items:
        if until_seq is not None and item.seq > until_seq:
            break
        if until_ms is not None and item.time_ms > until_ms:
            break
        out.append(item)
    return out


def fold(engine: Engine, items: Iterable[LogEntry]) -> list[BadEntry]:
    """Apply entries in order at their own times through the fold every service's projection
    uses (``usher.core.history.fold``); the entries it refused (forged, unfoldable), in order."""
    refused: list[BadEntry] = []
    for item in items:
        outcome = fold_entry(engine, item)
        if not outcome.folded:
            refused.append(refused_entry(item, outcome))
    return refused


# ---------------------------------------------------------------------------- replay


class QueueRow(msgspec.Struct, frozen=True, kw_only=True):
    """One queue: its pending workloads in order."""

    queue: QueueName
    jobs: list[QueueEntry]


class QuotaRow(msgspec.Struct, frozen=True, kw_only=True):
    """One node of the tree in force: used, min and max as Kubernetes quantities."""

    path: QuotaPath
    used: dict[str, str]
    min: dict[str, str]
    max: dict[str, str]


class ReplayState(msgspec.Struct, frozen=True, kw_only=True):
    """The state the log implies at one point: what ``usher replay`` prints."""

    seq: int
    """Stream sequence of the last entry applied (0: none)."""
    time: datetime | None
    entries: int
    """How many decoded entries were applied."""
    undecodable: int
    jobs: list[JobView]
    queues: list[QueueRow]
    quota: list[QuotaRow]
    refused: int = 0
    """Decoded entries the fold refused (forged, unfoldable): they changed nothing."""


def replay(
    history: History,
    config: EngineConfig,
    *,
    until_ms: Millis | None = None,
    until_seq: int | None = None,
) -> ReplayState:
    """Rebuild the state at ``until_seq``/``until_ms`` (default: the end) from the log alone."""
    items = prefix(history, until_ms=until_ms, until_seq=until_seq)
    engine = Engine(config)
    refused = fold(engine, items)
    last = items[-1] if items else None
    state = state_of(
        engine,
        seq=last.seq if last else 0,
        time_ms=last.time_ms if last else None,
        entries=len(items),
        undecodable=sum(1 for b in history.bad if last is not None and b.seq <= last.seq),
    )
    return msgspec.structs.replace(state, refused=len(refused))


def budgets_at(history: History, config: EngineConfig, now: Millis) -> BudgetReport:
    """Every budget of the tree in force at the log's end, as of ``now`` (B1): the running
    work accrues up to ``now``, as in the dequeuer's passes."""
    engine = Engine(config)
    fold(engine, prefix(history))
    at = Millis(max(now, engine.state.now))
    return budget_report(engine.budget_statuses(at), at)


def state_of(
    engine: Engine, *, seq: int, time_ms: Millis | None, entries: int, undecodable: int
) -> ReplayState:
    """What an engine holds, as rows: jobs with reasons, queues in order, quota per node."""
    # The reason a pass would give now, not the one the engine noted at its last pass.
    jobs = [
        msgspec.structs.replace(view, reason=engine.reason_now(key))
        for key, view in engine.jobs().items()
    ]
    used = engine.quota_used()
    quota = [
        QuotaRow(
            path=path,
            used=quantities(used.get(path, {})),
            min=quantities(minimum),
            max=quantities(maximum),
        )
        for path, (minimum, maximum) in engine.quota_nodes().items()
    ]
    queues = [QueueRow(queue=name, jobs=entries) for name, entries in engine.queues().items()]
    return ReplayState(
        seq=seq,
        time=to_datetime(time_ms) if time_ms is not None else None,
        entries=entries,
        undecodable=undecodable,
        jobs=jobs,
        queues=queues,
        quota=quota,
    )


def render_replay_json(state: ReplayState) -> str:
    """One JSON object (quantities in Kubernetes notation, reasons with their numbers)."""
    return msgspec.json.format(msgspec.json.encode(state).decode(), indent=2) + "\n"


def render_replay_table(state: ReplayState) -> str:
    """A plain-text report for people: jobs with reasons, queues, quota per node."""
    when = format_datetime(state.time) if state.time else "-"
    lines = [f"state at seq {state.seq} ({when}), {state.entries} entries applied"]
    if state.undecodable:
        lines[0] += f", {state.undecodable} undecodable skipped"
    if state.refused:
        lines[0] += f", {state.refused} refused (forged or unfoldable) skipped"
    lines += ["", "jobs:"]
    for row in state.jobs:
        position = f"#{row.position}" if row.position is not None else ""
        reason = f"  {row.reason.code}: {row.reason.message}" if row.reason else ""
        lines.append(
            f"  {row.job:<32} {row.state:<12} {row.queue or '-':<36} {position:<5}{reason}".rstrip()
        )
    if not state.jobs:
        lines.append("  (none)")
    lines += ["", "queues:"]
    for queue in state.queues:
        members = ", ".join(f"{e.position}. {e.job} (prio {e.priority})" for e in queue.jobs)
        lines.append(f"  {queue.queue}: {members or '(empty)'}")
    lines += ["", "quota (used / min / max):"]
    for node in state.quota:
        cells = [
            f"{r} {node.used.get(r, '0')}/{node.min.get(r, '0')}/{m}" for r, m in node.max.items()
        ]
        lines.append(f"  {node.path:<40} {'  '.join(cells)}".rstrip())
    return "\n".join(lines) + "\n"


__all__ = [
    "ExportFormatError",
    "ExportHeader",
    "ExportedEntry",
    "History",
    "QueueRow",
    "QuotaRow",
    "ReplayState",
    "TimeError",
    "decode_export",
    "decode_history",
    "encode_export",
    "exported_entry",
    "fold",
    "format_datetime",
    "format_resources",
    "format_time",
    "history_of",
    "parse_time",
    "payload",
    "prefix",
    "quantities",
    "render_replay_json",
    "render_replay_table",
    "replay",
    "state_of",
    "to_datetime",
]
