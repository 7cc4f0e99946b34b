"""Words and text at Usher's boundaries: booleans, enums and bounded free text.

What it does: ``boolean`` reads exactly ``"true"``/``"false"``, ``choice`` exactly one of the
values a field allows, ``free_text`` a string of printable characters of bounded length (a
hold's reason), ``bounded_text`` the text of a small language another rule module reads (the
budgets, zone caps or tolerations of a node) before that module does. Each raises
``ValueRefused`` naming the field.
What it must never do: trim, fold case or guess (``"True"``, ``" true"`` are refused), accept a
control character, or do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from usher.core.model.errors import ValueRefused
from usher.core.values.shown import shown

MAX_FREE_TEXT: Final = 1024
"""The longest free text (a hold's reason) a field takes."""
MAX_RULE_TEXT: Final = 4096
"""The longest text of a small language (budgets, zone caps, tolerations) a field takes."""


def choice(raw: object, path: str, allowed: Sequence[str], *, name: str | None = None) -> str:
    """Exactly one of ``allowed`` (case and spaces count)."""
    if isinstance(raw, str) and raw in allowed:
        return raw
    label = name or path
    listed = ", ".join(allowed)
    code = "invalid-type" if not isinstance(raw, str) else "invalid-value"
    raise ValueRefused(path, code, f"{label} must be one of {listed}, got {shown(raw)}")


def boolean(raw: object, path: str, *, name: str | None = None) -> bool:
    """``"true"`` or ``"false"``, exactly."""
    if raw == "true" or raw == "false":
        return raw == "true"
    label = name or path
    code = "invalid-type" if not isinstance(raw, str) else "invalid-value"
    raise ValueRefused(path, code, f'{label} must be "true" or "false", got {shown(raw)}')


def free_text(raw: object, path: str, *, most: int = MAX_FREE_TEXT, name: str | None = None) -> str:
    """A string of at most ``most`` printable characters (no control characters)."""
    return _printable(raw, path, most, name or path, "text")


def bounded_text(
    raw: object, path: str, *, most: int = MAX_RULE_TEXT, name: str | None = None
) -> str:
    """The text of a small language a rule module parses next (its grammar, emptiness
    included, is that module's): at most ``most`` printable characters."""
    return _printable(raw, path, most, name or path, "text")


def _printable(raw: object, path: str, most: int, label: str, what: str) -> str:
    if not isinstance(raw, str):
        raise ValueRefused(
            path, "invalid-type", f"{label} must be {what} (a string), got {shown(raw)}"
        )
    if len(raw) > most:
        message = f"{label} must be at most {most} characters, got {shown(raw)}"
        raise ValueRefused(path, "too-long", message)
    if not raw.isprintable():
        message = f"{label} must not contain control characters, got {shown(raw)}"
        raise ValueRefused(path, "invalid-value", message)
    return raw
