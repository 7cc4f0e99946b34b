"""The quota tree as it travels on the wire.

What it does: a recursive ``QuotaNode`` carrying canonical integer quantities, the shape of a
validated ElasticQuotaTree (T1, docs/admission-rules.md).
What it must never do: validate or parse Kubernetes notation (that is the core's job).
"""

from __future__ import annotations

import msgspec

from schemas.common import Resources


class QuotaNode(msgspec.Struct, frozen=True, kw_only=True):
    """One node of a validated quota tree."""

    name: str
    min: Resources = msgspec.field(default_factory=dict)
    max: Resources = msgspec.field(default_factory=dict)
    namespaces: list[str] = msgspec.field(default_factory=list)
    attributes: dict[str, str] = msgspec.field(default_factory=dict)
    children: list[QuotaNode] = msgspec.field(default_factory=list)
