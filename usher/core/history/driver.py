"""The one driver of a played run: apply inputs, decide, wake up at the engine's next instant.

What it does: ``Driver`` runs an ``Engine`` through time the way the services do between
them, with the scenario's time instead of a clock: ``feed`` applies one input at its instant
(what the engine returns at once, the ``Released`` of a finish, goes to ``released``);
``decide`` runs a pass and hands what it decided to ``decided``; ``wake_until`` runs the
passes the engine asks for (``next_wakeup``: min-runtime ends, ready deadlines, backoffs,
budget resets) and the inputs the run makes itself (``upcoming``/``due``: a run's end, S2)
before a limit; ``group`` plays one group of inputs: wake up to it, feed it, decide. The
simulator (``usher sim``) and what-if both play through it.
What it must never do: read a clock, perform I/O or draw random numbers; decide anything
itself (every decision is the engine's), or run more than ``MAX_WAKEUP_PASSES`` wakeup passes
in one ``wake_until``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from schemas import Decision, LogEvent, Millis
from usher.core.engine.facade import Engine

MAX_WAKEUP_PASSES = 10_000
"""Bound on the passes run at wakeups after the last input (a safety net)."""

Record = Callable[[Millis, list[Decision]], None]


def _nothing(at_ms: Millis, decisions: list[Decision]) -> None:
    """Keep nothing."""


def _none() -> Millis | None:
    return None


def _no_input(at_ms: Millis) -> None:
    """No input of the run's own is due."""


@dataclass
class Driver:
    """One engine played through time (module docstring)."""

    engine: Engine
    decided: Record = _nothing
    """What each pass decided, at its instant."""
    released: Record = _nothing
    """What the engine returned at once as it applied an input (a finish's ``Released``)."""
    upcoming: Callable[[], Millis | None] = _none
    """When the run's next input of its own is due (a run's end, S2); None: none."""
    due: Callable[[Millis], None] = _no_input
    """Feed the run's own inputs due at an instant (called before every pass it wakes up)."""

    def feed(self, event: LogEvent, at_ms: Millis) -> None:
        self.released(at_ms, self.engine.apply(event, at_ms))

    def decide(self, at_ms: Millis) -> None:
        self.decided(at_ms, self.engine.decide(at_ms))

    def wake_until(self, limit: int | None) -> None:
        """Passes at wakeups and at the run's own inputs before ``limit`` (a wakeup-only pass
        counts against the safety net; an input of the run's is an input, as a timeline
        entry is)."""
        passes = 0
        while passes < MAX_WAKEUP_PASSES:
            wakeup, own = self.engine.next_wakeup(), self.upcoming()
            upcoming = min((t for t in (wakeup, own) if t is not None), default=None)
            if upcoming is None or (limit is not None and upcoming >= limit):
                return
            passes += upcoming != own
            self.due(upcoming)
            self.decide(upcoming)

    def group(
        self, start_ms: Millis, inputs: Iterable[tuple[LogEvent, Millis]], end_ms: Millis
    ) -> None:
        """Play one group of inputs: wake up to its start, feed each at its instant, then
        one pass at its end."""
        self.wake_until(start_ms)
        self.due(start_ms)
        for event, at_ms in inputs:
            self.feed(event, at_ms)
        self.decide(end_ms)


__all__ = ["MAX_WAKEUP_PASSES", "Driver"]
