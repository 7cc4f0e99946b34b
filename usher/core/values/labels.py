"""Node label keys and values of topology levels (TP1): what a level may be named, strictly.

What it does: ``topology_level`` reads one level -- a Kubernetes label key (an optional DNS
subdomain and ``/``, then a name of at most 63 of ``[A-Za-z0-9-_.]``, alphanumeric at both ends)
that is ``kubernetes.io/hostname`` or names ``topology`` (``topology.usher.io/rack``,
``cloud.example.com/topology-block``): the only node labels a watcher publishes, so a level no
node could ever carry is refused where it is written. ``topology_levels`` reads the ordered,
comma-separated list of a tree (widest first, at most ``MAX_LEVELS``). ``topology_labels`` keeps
of a node's labels the ones a level may name, bounded (``MAX_NODE_LABELS``, values as Kubernetes
allows them), for the watcher to publish and the engine to trust. ``level_noun`` is how people
read a level (``rack`` for ``topology.usher.io/rack``). Each parser raises ``ValueRefused``
naming the field.
What it must never do: accept an unbounded key or value, reorder or drop a listed level, or do
I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from usher.core.model.errors import ValueRefused
from usher.core.values.names import MAX_LABEL, MAX_SUBDOMAIN
from usher.core.values.shown import shown

MAX_LEVELS: Final = 8
"""The most topology levels a tree names (block, rack, host and a few more)."""
MAX_NODE_LABELS: Final = 16
"""The most topology labels one node's observation carries."""
MAX_LABEL_KEY: Final = MAX_SUBDOMAIN + 1 + MAX_LABEL
"""A label key: a subdomain, ``/`` and a name at most."""
HOSTNAME: Final = "kubernetes.io/hostname"
"""The one level that names no ``topology``: every node carries it (one node per domain)."""
TOPOLOGY_WORD: Final = "topology"

_NAME: Final = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_SUBDOMAIN: Final = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY: Final = re.compile(rf"(?:(?P<prefix>{_SUBDOMAIN})/)?(?P<name>{_NAME})")
_VALUE: Final = re.compile(_NAME)
_KEY_RULE: Final = (
    "a label key: an optional DNS subdomain and '/', then letters, digits, '-', '_' or '.' "
    f"(at most {MAX_LABEL}, alphanumeric at both ends), naming '{TOPOLOGY_WORD}' or being "
    f"{HOSTNAME}"
)


def is_topology_key(raw: object) -> bool:
    """Whether ``raw`` is a label key a topology level may be: well formed and bounded, and
    ``kubernetes.io/hostname`` or naming ``topology``."""
    if not isinstance(raw, str) or len(raw) > MAX_LABEL_KEY:
        return False
    found = _KEY.fullmatch(raw)
    if found is None or len(found.group("name")) > MAX_LABEL:
        return False
    prefix = found.group("prefix")
    if prefix is not None and len(prefix) > MAX_SUBDOMAIN:
        return False
    return raw == HOSTNAME or TOPOLOGY_WORD in raw


def is_label_value(raw: object) -> bool:
    """Whether ``raw`` is a Kubernetes label value a domain may be named by (not empty)."""
    return isinstance(raw, str) and len(raw) <= MAX_LABEL and _VALUE.fullmatch(raw) is not None


def topology_level(raw: object, path: str, *, name: str | None = None) -> str:
    """One topology level (``is_topology_key``); ``ValueRefused`` naming ``path``."""
    if is_topology_key(raw):
        assert isinstance(raw, str)
        return raw
    label = name or path
    code = "invalid-type" if not isinstance(raw, str) else "invalid-value"
    if isinstance(raw, str) and len(raw) > MAX_LABEL_KEY:
        code = "too-long"
    raise ValueRefused(path, code, f"{label} must be {_KEY_RULE}, got {shown(raw)}")


def topology_levels(raw: object, path: str, *, name: str | None = None) -> list[str]:
    """The comma-separated topology levels of a tree, widest first: at most ``MAX_LEVELS``
    distinct ones (spaces around commas allowed), in their order."""
    label = name or path
    wrong = f"{label}: {shown(raw)} is not a comma-separated list of topology levels"
    if not isinstance(raw, str):
        raise ValueRefused(path, "invalid-type", f"{wrong} (a string)")
    if len(raw) > MAX_LEVELS * (MAX_LABEL_KEY + 2):
        raise ValueRefused(path, "too-long", f"{wrong} of at most {MAX_LEVELS} levels")
    parts = [part.strip(" ") for part in raw.split(",")]
    if len(parts) > MAX_LEVELS:
        raise ValueRefused(path, "too-long", f"{wrong} of at most {MAX_LEVELS} levels")
    for part in parts:
        if not is_topology_key(part):
            raise ValueRefused(path, "invalid-value", f"{wrong}: {shown(part)} is not {_KEY_RULE}")
    if len(set(parts)) != len(parts):
        raise ValueRefused(path, "invalid-value", f"{label}: {shown(raw)} names a level twice")
    return parts


def topology_labels(labels: object) -> dict[str, str]:
    """Of a node's labels, the ones a topology level may name and whose value a domain may be
    named by, sorted by key, at most ``MAX_NODE_LABELS`` (the first in key order). Anything
    else -- a malformed key or value, a label of no level -- is left out: a node is
    never refused for its labels."""
    if not isinstance(labels, Mapping):
        return {}
    kept = sorted(
        (key, value)
        for key, value in labels.items()
        if is_topology_key(key) and is_label_value(value)
    )
    return dict(kept[:MAX_NODE_LABELS])


def level_noun(level: str) -> str:
    """How people read a level: its name after the prefix, without a ``topology-`` start
    (``rack`` for ``topology.usher.io/rack`` or ``cloud.example.com/topology-rack``)."""
    noun = level.rpartition("/")[2]
    return noun.removeprefix(f"{TOPOLOGY_WORD}-") or noun
