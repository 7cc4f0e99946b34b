"""Ordered zone fallback (docs/admission-rules.md Z2): the zones a workload accepts, and which
one it is admitted into.

What it does: ``parse_accepted_zones`` reads a job's ``usher.io/zones`` annotation
(``"a100,h100"``: preference order) against its ``usher.io/zone`` label (when both are set,
the label must be the first zone listed, so the zone that owns the job is never ambiguous);
``zone_choice`` walks the accepted zones in order and answers the first one the workload fits
now, with a reason naming each preferred zone passed over and why (``zone a100: root/gpu-team
nvidia.com/gpu in zone a100: 6 used + 4 requested > max 8``).

How the per-zone dequeuers share such a job: every dequeuer of an accepted zone offers it, and
each admits it only into its own zone, and only when no zone before its own fits now (as the
log shows it). A zone's usage is therefore still decided by that zone's dequeuer alone (the
per-zone caps of Z1 keep a single writer); two dequeuers that both believe theirs is the first
fitting zone race at the ledger, whose one-live-allocation rule grants one and refuses the
other (``AlreadyAdmitted``). When no accepted zone fits, only the first zone's dequeuer may
reclaim for it (R5): a fallback never preempts.

What it must never do: perform I/O, admit anything itself (the pass does), or reorder the
zones a job listed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from schemas import FieldError, Reason, Zone
from usher.core.kinds.family import ZONE_LABEL
from usher.core.model.errors import ValueRefused
from usher.core.model.reason_text import reworded
from usher.core.tree.zone_names import ZONES_KEY
from usher.core.values.names import is_zone_name
from usher.core.values.registry import ZONES

ZONES_ANNOTATION: Final = ZONES_KEY
"""A job's accepted zones, comma separated, most preferred first (Z2)."""


def parse_accepted_zones(
    annotations: Mapping[str, object], label_zone: str | None, field_prefix: str
) -> tuple[list[Zone], list[FieldError]]:
    """The zones a job accepts in order (empty: only its own zone), or the errors refusing
    them at the annotation's path under ``field_prefix``."""
    raw = annotations.get(ZONES_ANNOTATION)
    if raw is None:
        return [], []
    field = f"{field_prefix}{ZONES_ANNOTATION}"
    try:
        zones = ZONES.check(raw, field_prefix.rstrip("."))
    except ValueRefused as refused:
        return [], [_invalid(field, refused.message)]
    if label_zone and zones[0] != label_zone:
        message = f"the first accepted zone must be the job's usher.io/zone label {label_zone!r}"
        return [], [_invalid(field, f"{raw!r}: {message}")]
    return zones, []


def owner_zone(labels: Mapping[str, object], annotations: Mapping[str, object]) -> str | None:
    """The zone that owns a job, as its metadata says: its ``usher.io/zone`` label, else the
    first zone its ``usher.io/zones`` lists (None: neither, or not a zone name -- the default
    zone owns it, and the job is rejected there naming the field: a subject never carries
    more than a valid zone name)."""
    label = labels.get(ZONE_LABEL)
    if isinstance(label, str) and label:
        return label if is_zone_name(label) else None
    zones = ZONES.read(annotations)
    return zones[0] if zones else None


def zone_choice(
    zones: Sequence[Zone], shortfall_in: Callable[[Zone], Reason | None]
) -> tuple[Zone | None, list[tuple[Zone, Reason]]]:
    """The first of ``zones`` where ``shortfall_in`` finds nothing short, and every zone passed
    over before it with its reason; ``None`` and every zone's reason when none fits."""
    passed: list[tuple[Zone, Reason]] = []
    for zone in zones:
        short = shortfall_in(zone)
        if short is None:
            return zone, passed
        passed.append((zone, short))
    return None, passed


def passed_over(chosen: Zone | None, passed: Sequence[tuple[Zone, Reason]]) -> Reason:
    """Why each preferred zone was passed over: ``ZoneFallback`` when admitted into
    ``chosen``, else the first zone's code (what the owner zone waits for) with every zone's
    message."""
    parts = "; ".join(f"zone {zone}: {reason.message}" for zone, reason in passed)
    if chosen is not None:
        message = f"admitted in zone {chosen}, passed over {parts}"
        return Reason(code="ZoneFallback", message=message)
    return reworded(passed[0][1], f"no accepted zone fits now: {parts}")


def _invalid(field: str, message: str) -> FieldError:
    return FieldError(path=field, code="invalid-annotation", message=message)
