"""Names at Usher's boundaries: zone names, lists of them, and Kubernetes object names.

What it does: ``zone_name`` reads a zone name -- a DNS-1123 label (lower-case ASCII letters,
digits and ``-``, starting and ending with a letter or digit, at most 63 characters), because a
zone name goes into NATS subjects and Kubernetes labels -- and ``zone_names`` a comma-separated
list of distinct ones (``"a100,h100"``, spaces around commas allowed, at most ``MAX_ZONES``);
``gate_names`` a list of admission gates' names the same way (G1, ``MAX_GATES``);
``dns_label`` and ``dns_subdomain`` read object names with Kubernetes' rules and lengths (63 and
253). Each raises ``ValueRefused`` naming the field.
What it must never do: accept an unbounded name, reorder or drop a listed zone, or do I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from schemas import Zone
from usher.core.model.errors import ValueRefused
from usher.core.values.shown import shown

MAX_LABEL: Final = 63
"""Kubernetes' DNS-1123 label length (namespaces, zone names, label values)."""
MAX_SUBDOMAIN: Final = 253
"""Kubernetes' DNS-1123 subdomain length (most object names)."""
MAX_ZONES: Final = 32
"""The most zones one list may name."""
MAX_GATES: Final = 16
"""The most admission gates one job may list (G1)."""
MAX_GATE_NAME: Final = MAX_SUBDOMAIN + 1 + MAX_LABEL
"""An admission gate's name: a subdomain, ``/`` and a label at most."""

_LABEL: Final = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)
_GATE: Final = re.compile(rf"(?:{_SUBDOMAIN.pattern}/)?{_LABEL.pattern}")
LABEL_RULE: Final = "lower-case letters, digits and '-', starting and ending with a letter or digit"


def dns_label(raw: object, path: str, *, name: str | None = None, what: str = "a name") -> str:
    """A DNS-1123 label: at most 63 of ``[a-z0-9-]``, alphanumeric at both ends."""
    return _named(raw, path, name or path, what, _LABEL, MAX_LABEL)


def dns_subdomain(raw: object, path: str, *, name: str | None = None, what: str = "a name") -> str:
    """A DNS-1123 subdomain: labels joined by ``.``, at most 253 characters in all."""
    return _named(raw, path, name or path, what, _SUBDOMAIN, MAX_SUBDOMAIN)


def zone_name(raw: object, path: str, *, name: str | None = None) -> Zone:
    """A zone name: a DNS-1123 label (it goes into NATS subjects and label values)."""
    return Zone(dns_label(raw, path, name=name, what="a zone name"))


def is_dns_label(raw: object) -> bool:
    """Whether ``raw`` is a DNS-1123 label (for readers that fall back instead of refusing)."""
    return isinstance(raw, str) and len(raw) <= MAX_LABEL and _LABEL.fullmatch(raw) is not None


def is_zone_name(raw: object) -> bool:
    """Whether ``raw`` is a valid zone name (for readers that fall back instead of refusing)."""
    return is_dns_label(raw)


def zone_names(raw: object, path: str, *, name: str | None = None) -> list[Zone]:
    """A comma-separated list of at most ``MAX_ZONES`` distinct zone names, in its order."""
    parts = _name_list(raw, path, name, _ZONE_LIST)
    return [Zone(part) for part in parts]


def is_gate_name(raw: object) -> bool:
    """Whether ``raw`` is an admission gate's name: a DNS-1123 label, optionally after a
    DNS-1123 subdomain and ``/`` (``quota-review``, ``example.com/security``), as Kueue's."""
    return isinstance(raw, str) and len(raw) <= MAX_GATE_NAME and _GATE.fullmatch(raw) is not None


def gate_names(raw: object, path: str, *, name: str | None = None) -> list[str]:
    """A comma-separated list of at most ``MAX_GATES`` distinct admission gate names, in its
    order; the empty string lists none (every gate was removed)."""
    if raw == "":
        return []
    return _name_list(raw, path, name, _GATE_LIST)


@dataclass(frozen=True, slots=True)
class _ListOf:
    """What a comma-separated list of names is a list of, for its parser's messages."""

    noun: str
    example: str
    rule: str
    most: int
    longest: int
    valid: Callable[[object], bool]


_ZONE_LIST: Final = _ListOf(
    "zone",
    "a100,h100",
    f"{LABEL_RULE}, at most {MAX_LABEL} characters",
    MAX_ZONES,
    MAX_LABEL,
    is_zone_name,
)
_GATE_LIST: Final = _ListOf(
    "gate",
    "quota-review,example.com/security",
    f"{LABEL_RULE}, at most {MAX_LABEL} characters, after an optional DNS subdomain and '/'",
    MAX_GATES,
    MAX_GATE_NAME,
    is_gate_name,
)


def _name_list(raw: object, path: str, name: str | None, of: _ListOf) -> list[str]:
    prefix = f"{name or path}: " if name != "" else ""
    wrong = (
        f"{prefix}{shown(raw)} is not a comma-separated list of {of.noun} names, "
        f"e.g. '{of.example}'"
    )
    if not isinstance(raw, str):
        raise ValueRefused(path, "invalid-type", f"{wrong} (a string)")
    if len(raw) > of.most * (of.longest + 2):
        raise ValueRefused(path, "too-long", f"{wrong} of at most {of.most} {of.noun}s")
    parts = [part.strip(" ") for part in raw.split(",")]
    if len(parts) > of.most:
        raise ValueRefused(path, "too-long", f"{wrong} of at most {of.most} {of.noun}s")
    for part in parts:
        if not of.valid(part):
            message = f"{wrong}: {shown(part)} is not a {of.noun} name ({of.rule})"
            raise ValueRefused(path, "invalid-value", message)
    if len(set(parts)) != len(parts):
        raise ValueRefused(path, "invalid-value", f"{prefix}{shown(raw)} names a {of.noun} twice")
    return parts


def _named(
    raw: object, path: str, label: str, what: str, pattern: re.Pattern[str], most: int
) -> str:
    if not isinstance(raw, str):
        raise ValueRefused(
            path, "invalid-type", f"{label} must be {what} (a string), got {shown(raw)}"
        )
    if len(raw) > most:
        message = f"{label} must be {what} of at most {most} characters, got {shown(raw)}"
        raise ValueRefused(path, "too-long", message)
    if pattern.fullmatch(raw) is None:
        message = f"{label} must be {what} ({LABEL_RULE}), got {shown(raw)}"
        raise ValueRefused(path, "invalid-value", message)
    return raw
