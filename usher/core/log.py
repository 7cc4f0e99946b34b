"""One entry of the log as every reader sees it: stream sequence, subject, envelope, times.

What it does: ``LogEntry`` is the decoded entry that the services' follower
(usher/adapters/nats/follower.py), the client, the history commands and the auditor all hand
around; ``envelope_ms`` is the one rule for an envelope's time in milliseconds.
What it must never do: read the log, decide anything, or change what an entry says.
"""

from __future__ import annotations

import msgspec

from schemas import Envelope, LogEvent, Millis


class LogEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One decoded log entry: stream sequence, subject, envelope, its time in ms."""

    seq: int
    subject: str
    envelope: Envelope
    time_ms: Millis
    """The envelope's time: what its sender says (the engine folds it at this time)."""
    log_ms: Millis | None = None
    """When the log stored it (``ExportedEntry.stored``); ``None`` when not recorded. Windows
    that must not trust the sender (``usher audit --since``) use this one."""

    @property
    def event(self) -> LogEvent:
        return self.envelope.event


def envelope_ms(envelope: Envelope) -> Millis:
    """An envelope's time in integer milliseconds since the epoch."""
    return Millis(int(envelope.time.timestamp() * 1000))


def log_entry(seq: int, subject: str, envelope: Envelope) -> LogEntry:
    """The entry at ``seq``, timed by its envelope (the log's storing time not recorded)."""
    return LogEntry(seq=seq, subject=subject, envelope=envelope, time_ms=envelope_ms(envelope))


__all__ = ["LogEntry", "envelope_ms", "log_entry"]
