"""How a refused value is quoted in a message: its repr, cut short.

What it does: ``shown`` quotes a value for a person, at most ``SHOWN_CHARS`` characters of it, so
that a 100 KB value never ends up whole in an error, an Event or a log line.
What it must never do: do I/O, or quote a value unbounded.
"""

from __future__ import annotations

from typing import Final

SHOWN_CHARS: Final = 40
"""The most characters of a refused value an error message quotes."""


def shown(raw: object) -> str:
    """``repr(raw)``, cut to ``SHOWN_CHARS`` characters with ``...`` and its length when longer."""
    if isinstance(raw, str) and len(raw) > SHOWN_CHARS:
        return f"{raw[:SHOWN_CHARS]!r}... ({len(raw)} characters)"
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 64:
        return f"an integer of {raw.bit_length()} bits"  # repr of a huge int may even raise
    text = type(raw).__name__ if isinstance(raw, (list, dict, tuple, set)) else repr(raw)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}..."
