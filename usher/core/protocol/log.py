"""One entry of the log as every reader sees it: stream sequence, subject, envelope, times.

What it does: ``LogEntry`` is the decoded entry, ``BadEntry`` the one that does not decode,
that the services' follower (usher/adapters/nats/follower.py), the client, the history
commands and the auditor all hand around; ``envelope_ms`` (``datetime_ms``) is the one rule for
an envelope's (a stamp's) time in milliseconds.
What it must never do: read the log, decide anything, or change what an entry says.
"""

from __future__ import annotations

from datetime import datetime

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


class BadEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An entry whose payload is not a valid envelope: services park it, the auditor reports it."""

    seq: int
    subject: str
    error: str
    detail: str
    data: bytes = b""
    """The payload as stored, for parking it; left empty by readers that only report it."""


def envelope_ms(envelope: Envelope) -> Millis:
    """An envelope's time in integer milliseconds since the epoch."""
    return datetime_ms(envelope.time)


def datetime_ms(when: datetime) -> Millis:
    """An aware datetime in integer milliseconds since the epoch: the one rule, so that the
    ledger's stamps and the envelopes that carry them give the same numbers (U1)."""
    return Millis(int(when.timestamp() * 1000))


def log_entry(seq: int, subject: str, envelope: Envelope) -> LogEntry:
    """The entry at ``seq``, timed by its envelope (the log's storing time not recorded)."""
    return LogEntry(seq=seq, subject=subject, envelope=envelope, time_ms=envelope_ms(envelope))


__all__ = ["BadEntry", "LogEntry", "datetime_ms", "envelope_ms", "log_entry"]
