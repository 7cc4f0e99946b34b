"""Lists of zone names (docs/admission-rules.md Z2, Z3): the ``usher.io/zones`` key and its
parser, shared by a job's annotation (Z2) and a tree node's attribute (Z3).

What it does: ``parse_zone_names`` reads ``"a100,h100"`` into distinct zone names in order,
or says why the text is not such a list.
What it must never do: perform I/O, reorder or drop a name, or know what a list is used for.
"""

from __future__ import annotations

from typing import Final

from schemas import Zone
from usher.core.model.errors import ValueRefused
from usher.core.values import names, registry

ZONES_KEY: Final = registry.ZONES.key
"""Accepted zones, comma separated, most preferred first: a job's annotation (Z2), or a tree
node's attribute for the workloads below it that list none (Z3)."""


def parse_zone_names(raw: str) -> tuple[list[Zone], str | None]:
    """A comma-separated list of distinct zone names in its order, or why it is not one."""
    try:
        return names.zone_names(raw, ZONES_KEY, name=""), None
    except ValueRefused as refused:
        return [], refused.message
