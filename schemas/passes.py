"""The record of one decision pass on the log, so that ``usher audit`` can re-run it exactly.

What it does: ``PassRan`` says that the dequeuer of ``zone`` ran a pass at ``now_ms`` on the
log up to ``seq`` (the last entry its engine had applied) and proposed something (D4,
docs/admission-rules.md). It is published by that dequeuer alone, on
``<prefix>.pass.<zone>.ran``, before the pass's requests go out, so every decision
that reaches the log from the pass comes after it.
What it must never do: hold logic, carry a decision (replay and every consumer ignore it), or
change its tag once published.
"""

from __future__ import annotations

from typing import Final

import msgspec

from schemas.ids import Millis, Zone


class PassRan(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="pass.ran.v1"):
    """The dequeuer of ``zone`` ran a pass at ``now_ms`` over the log up to ``seq`` (D4).

    Only a pass that proposed something is recorded (an admission, a reclaim, a requeue, a
    drain or a retry): an idle pass changes nothing and costs the log nothing.
    """

    zone: Zone
    seq: int
    """The last log sequence the dequeuer's engine had applied when it decided."""
    now_ms: Millis
    """The pass's ``now`` (the dequeuer's clock), as the engine was given it."""
    replica: str = ""
    """Which process decided (a new one starts from the log alone, without its predecessor's
    passes in flight)."""


PASS_EVENT_TYPES: Final[tuple[type[msgspec.Struct], ...]] = (PassRan,)
