"""JSON merge patches (RFC 7386) computed from what is there and what should be there.

What it does: ``merge_diff(current, desired)`` gives the smallest merge patch that turns
``current`` into ``desired`` (``null`` for every key that must go; lists are replaced whole, as
merge patches do), or ``None`` when nothing differs, so a writer skips no-op writes.
What it must never do: touch keys that ``desired`` does not mention when told to leave them
(``prune=False``), or do I/O.
"""

from __future__ import annotations

from typing import Any

_SAME = object()


def merge_diff(current: Any, desired: Any, *, prune: bool = True) -> Any:
    """The merge patch from ``current`` to ``desired``; ``None`` when they are equal.

    With ``prune=False`` keys present in ``current`` but absent from ``desired`` are kept
    (useful for labels and annotations others own too).
    """
    patch = _diff(current, desired, prune)
    return None if patch is _SAME else patch


def _diff(current: Any, desired: Any, prune: bool) -> Any:
    if not isinstance(desired, dict) or not isinstance(current, dict):
        return _SAME if current == desired else desired
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        sub = _diff(current[key], value, prune) if key in current else value
        if sub is not _SAME:
            patch[key] = sub
    if prune:
        patch.update({key: None for key in current if key not in desired})
    return patch or _SAME
