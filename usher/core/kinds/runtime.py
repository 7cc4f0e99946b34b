"""A declared maximum runtime (docs/admission-rules.md RT1): the one place that reads it.

What it does: reads what a job of any kind says about how long it runs at most -- the
annotation ``usher.io/max-runtime-seconds`` (every kind), and the kind's own deadline where its
family names one (``KindFamily.deadline_path``: a batch Job's ``spec.activeDeadlineSeconds``,
which Kubernetes enforces) -- and gives the smaller of the two in seconds, or None when the job
declares neither. A malformed value is reported with its field path (T1-style), never guessed.
What it must never do: do I/O, read a clock, enforce anything (the annotation is a declaration
used for planning: backfill N2, the budget overrun hold B2, estimates), or hold knowledge of a
kind (where its deadline lives is its family module's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from usher.core.kinds.family import KindFamily
from usher.core.kinds.fields import Errors, Raw, annotation, dig, error
from usher.core.values.registry import MAX_RUNTIME

MAX_RUNTIME_ANNOTATION: Final = MAX_RUNTIME.key
MAX_RUNTIME_PATH: Final = f"metadata.annotations.{MAX_RUNTIME_ANNOTATION}"
MOST_SECONDS: Final = 2**31 - 1
"""The largest deadline of a kind accepted (about 68 years); the annotation's bound is the
registry's (``MAX_RUNTIME_SECONDS``, a year)."""


def declared_seconds(manifest: Raw, family: KindFamily, errors: Errors) -> int | None:
    """The job's declared maximum runtime in seconds: the smaller of the annotation and the
    kind's deadline when both are given; None when neither is. Problems go to ``errors``."""
    found = [
        seconds
        for seconds in (_annotation(manifest, errors), _deadline(manifest, family, errors))
        if seconds is not None
    ]
    return min(found) if found else None


def _annotation(manifest: Raw, errors: Errors) -> int | None:
    return annotation(MAX_RUNTIME, manifest, errors)


def _deadline(manifest: Raw, family: KindFamily, errors: Errors) -> int | None:
    if family.deadline_path is None:
        return None
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        return None  # the missing spec is reported where the pod sets are read
    raw = dig(spec, family.deadline_path, errors)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MOST_SECONDS:
        path = ".".join(("spec", *family.deadline_path))
        message = f"{path} must be a whole number of seconds from 1 to {MOST_SECONDS}, got {raw!r}"
        errors.append(error(path, "invalid-deadline", message))
        return None
    return raw
