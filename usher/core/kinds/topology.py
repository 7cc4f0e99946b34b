"""A job's topology ask and its pin (TP1): the one place that reads the one and writes the other.

What it does: ``asked`` reads what a job of any kind asks of topology -- the annotation
``usher.io/topology-required`` or ``usher.io/topology-preferred`` (one level for the whole
gang: every pod set of the job in one domain; both at once are refused naming the second) --
as a ``TopologyAsk``, or None. ``pinned`` adds a chosen domain to the zone pin a kind's
``selector_patch`` wrote: wherever that patch selects the zone's nodes (every pod template of
every kind), it selects the domain's too (``<level>: <domain>``), so the kind registry's one
knowledge of where pod templates live serves both pins.
What it must never do: do I/O, read a clock, mutate a patch it was given, or hold knowledge of
a kind (where a kind's templates live is its family module's).
"""

from __future__ import annotations

import copy
from typing import Any

from schemas import TopologyAsk, TopologyPin
from usher.core.kinds.family import ZONE_LABEL, Spec
from usher.core.kinds.fields import ANNOTATIONS_PREFIX, Errors, Raw, annotation, error
from usher.core.values.registry import TOPOLOGY_PREFERRED, TOPOLOGY_REQUIRED

BOTH_CODE = "topology-twice"
"""The error code of a job asking both a required and a preferred topology level."""


def asked(manifest: Raw, errors: Errors) -> TopologyAsk | None:
    """The job's topology ask, checked; None when it asks none (or its value is refused,
    reported in ``errors`` naming the annotation)."""
    required = annotation(TOPOLOGY_REQUIRED, manifest, errors)
    preferred = annotation(TOPOLOGY_PREFERRED, manifest, errors)
    if required is not None and preferred is not None:
        message = (
            f"{TOPOLOGY_PREFERRED.key} cannot be set with {TOPOLOGY_REQUIRED.key}: "
            "a job asks one topology level, required or preferred"
        )
        errors.append(error(f"{ANNOTATIONS_PREFIX}.{TOPOLOGY_PREFERRED.key}", BOTH_CODE, message))
        return None
    if required is not None:
        return TopologyAsk(level=required, required=True)
    if preferred is not None:
        return TopologyAsk(level=preferred, required=False)
    return None


def pinned(spec: Spec, pin: TopologyPin | None) -> Spec:
    """A copy of ``spec`` (a kind's zone ``selector_patch``) whose every node selector that
    names the zone also names ``pin``'s domain; ``spec`` itself when there is no pin."""
    if pin is None:
        return spec
    copied = copy.deepcopy(spec)
    _pin_selectors(copied, pin)
    return copied


def _pin_selectors(node: Any, pin: TopologyPin) -> None:
    if isinstance(node, list):
        for item in node:
            _pin_selectors(item, pin)
        return
    if not isinstance(node, dict):
        return
    selector = node.get("nodeSelector")
    if isinstance(selector, dict) and ZONE_LABEL in selector:
        selector[pin.level] = pin.domain
    for key, child in node.items():
        if key != "nodeSelector":
            _pin_selectors(child, pin)
