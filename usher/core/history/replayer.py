"""The one replayer of the history tools: fold the log once, and let every reader look.

What it does: ``replay_once(history, engine, observers)`` folds the decoded log into
``engine`` entry by entry through the fold every service uses (``usher.core.history.fold``:
``refusal`` then ``apply_entry``), in *groups*: one entry, or the ``Preempted`` of one
preemptor that follow each other among the ledger's entries (the ledger writes a reclaim's
victims in one transaction, so they are one decision; another service's entry published
between two of them comes after the group: ``log_groups``). Each observer is shown a group
*before* it is folded (``before``: the engine holds the log up to it, what a check of the group
must read), and each entry once it is folded (``folded``) or refused while folding
(``refused``: the engine raised on it, so it was never believed). Entries refused without
folding (forged, input the engine refuses whatever its state) are shown to no observer. It
returns the log without the refused entries (they join ``bad`` with their reason): what the
services' projections believe.

The audit's per-decision checks, the invariant checker and the usage fold are observers of
one replay (``usher audit`` folds the log once); ``screened`` is a replay with no observer.
What it must never do: perform I/O, read a clock, let an observer fold or change the engine
(observers only read it), or stop at an entry it cannot fold.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from schemas import LEDGER_SOURCE, Preempted, WorkloadKey
from usher.core.engine.facade import Engine
from usher.core.history.fold import apply_entry, refusal, refused_entry
from usher.core.history.replay import History
from usher.core.model.config import EngineConfig
from usher.core.protocol.log import BadEntry, LogEntry


class Observer:
    """A reader of one replay; every hook does nothing unless a reader overrides it."""

    def before(self, engine: Engine, group: Sequence[LogEntry]) -> None:
        """``group`` is about to be folded; ``engine`` holds the log before it."""

    def folded(self, engine: Engine, item: LogEntry) -> None:
        """``item`` was folded into ``engine``."""

    def refused(self, item: LogEntry) -> None:
        """The engine raised on ``item`` (shown to ``before``): it was never believed."""


def replay_once(history: History, engine: Engine, observers: Sequence[Observer] = ()) -> History:
    """Fold ``history`` into ``engine`` once, showing every group to ``observers``; the
    log without the entries the fold refused (module docstring)."""
    refused: list[BadEntry] = []
    believed: list[LogEntry] = []
    for item in history.items:
        outcome = refusal(engine, item)
        if outcome is None:
            believed.append(item)
        else:
            refused.append(refused_entry(item, outcome))
    kept: list[LogEntry] = []
    for group in log_groups(believed):
        for observer in observers:
            observer.before(engine, group)
        for item in group:
            outcome = apply_entry(engine, item)
            if outcome.folded:
                kept.append(item)
                for observer in observers:
                    observer.folded(engine, item)
            else:
                refused.append(refused_entry(item, outcome))
                for observer in observers:
                    observer.refused(item)
    if not refused:
        return history
    kept.sort(key=lambda item: item.seq)  # log order (an entry between victims came after)
    return History(items=kept, bad=sorted([*history.bad, *refused], key=lambda bad: bad.seq))


def screened(history: History, config: EngineConfig) -> History:
    """``history`` without the entries the fold refuses (forged, unfoldable), which join
    ``bad`` with their reason: what readers that fold the log their own way (what-if) read, so
    that they believe and fold exactly what the services' projections do."""
    return replay_once(history, Engine(config))


def log_groups(items: Sequence[LogEntry]) -> Iterator[list[LogEntry]]:
    """Entries one by one, except the ``Preempted`` of one preemptor that follow each other
    among the ledger's entries.

    The ledger writes a reclaim's victims in one transaction, so they are one decision. Its
    relay publishes them one message each, in a row, but another service's entry (an
    observation, a pass) may land between two of them on the log: such entries do not cut
    the reclaim in two, they come right after it, each on its own, in log order. Any entry of
    the ledger in between ends the group (a preemptor preempts again only after a
    ``Released`` of its own).
    """
    index = 0
    while index < len(items):
        event = items[index].event
        if not isinstance(event, Preempted):
            yield [items[index]]
            index += 1
            continue
        group, last = [items[index]], index
        scan = index + 1
        while scan < len(items):
            item = items[scan]
            if _same_preemptor(item, event.preemptor):
                group.append(item)
                last = scan
            elif _ledger_entry(item):
                break
            scan += 1
        yield group
        for item in items[index + 1 : last]:
            if not _same_preemptor(item, event.preemptor):
                yield [item]  # another service's entry that landed between two victims
        index = last + 1


def _ledger_entry(item: LogEntry) -> bool:
    return item.envelope.source == LEDGER_SOURCE


def _same_preemptor(item: LogEntry, preemptor: WorkloadKey) -> bool:
    event = item.event
    return isinstance(event, Preempted) and event.preemptor == preemptor


__all__ = ["Observer", "log_groups", "replay_once", "screened"]
