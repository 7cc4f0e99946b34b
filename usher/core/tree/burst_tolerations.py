"""The tolerations a burst zone's pods need, and how a toleration meets a taint (Z3).

What it does: a burst zone's nodes are a virtual kubelet's, tainted so that only pods meant
for them land there (``virtual-kubelet.io/provider``, effect ``NoSchedule``). The root's
attribute ``usher.io/burst-tolerations`` says, per burst zone, which taints its pods must
tolerate: ``"eci: virtual-kubelet.io/provider:NoSchedule, example.com/spot=true:NoSchedule"``
(zones separated by ``;``, each ``zone: taint, taint``, a taint in ``kubectl taint`` notation
``key[=value]:Effect``; an empty list after the colon: that zone's nodes are not tainted). A
burst zone it does not name takes the virtual kubelet's taint (``DEFAULT_TOLERATIONS``).
``parse_burst_tolerations`` reads the value (or says why it is refused, T1),
``tolerates`` decides whether a pod's tolerations let it onto a node with a given taint (as
the Kubernetes scheduler decides), and ``retolerated`` gives a pod spec's tolerations with
the wanted ones added (never one it has) and the ones Usher added before taken away.
What it must never do: perform I/O, decide which zone is burst (``zone_burst`` does), or
remove a toleration a pod template had of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from schemas import Zone
from usher.core.values import registry

BURST_TOLERATIONS_ATTRIBUTE: Final = registry.BURST_TOLERATIONS.key
"""On the root only: per burst zone, the taints its pods must tolerate (Z3)."""

Toleration = dict[str, Any]
"""A toleration as a pod spec holds it (``key``, ``operator``, ``value``, ``effect``)."""

VIRTUAL_KUBELET_TAINT_KEY: Final = "virtual-kubelet.io/provider"
"""The taint a virtual kubelet's node carries (its value names the provider)."""

DEFAULT_TOLERATIONS: Final[tuple[Toleration, ...]] = (
    {"key": VIRTUAL_KUBELET_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
)
"""What the pods of a burst zone the attribute does not name tolerate: a virtual kubelet's."""

EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")


def parse_burst_tolerations(
    raw: str, burst: Sequence[Zone]
) -> tuple[dict[Zone, tuple[Toleration, ...]], str | None]:
    """The tolerations per zone the attribute value names, or why it is refused (a zone
    that is not in ``burst``, a zone named twice, a taint not in ``key[=value]:Effect``)."""
    out: dict[Zone, tuple[Toleration, ...]] = {}
    for part in raw.split(";"):
        zone, colon, taints = part.partition(":")
        zone = zone.strip()
        if not colon or not zone or any(c.isspace() for c in zone):
            return {}, f"{part.strip()!r} is not 'zone: key[=value]:Effect, ...'"
        if zone not in burst:
            return {}, f"zone {zone!r} is not a burst zone (usher.io/burst-zones)"
        if zone in out:
            return {}, f"zone {zone!r} is named twice"
        tolerations: list[Toleration] = []
        for text in (t.strip() for t in taints.split(",")):
            if not text and not taints.strip():
                break  # "eci:" -- that zone's nodes carry no taint
            toleration, problem = _parse_toleration(text)
            if toleration is None:
                return {}, problem
            if toleration in tolerations:
                return {}, f"zone {zone!r} names the taint {text!r} twice"
            tolerations.append(toleration)
        out[Zone(zone)] = tuple(tolerations)
    return out, None


def _parse_toleration(text: str) -> tuple[Toleration | None, str]:
    """``key[=value]:Effect`` as the toleration of that taint (Exists without a value)."""
    taint, _, effect = text.rpartition(":")
    key, equals, value = taint.partition("=")
    if not taint or effect not in EFFECTS or not _KEY.match(key) or not _VALUE.match(value):
        effects = "|".join(EFFECTS)
        return None, f"{text!r} is not a taint 'key[=value]:Effect' (Effect one of {effects})"
    if not equals:
        return {"key": key, "operator": "Exists", "effect": effect}, ""
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}, ""


def tolerates(tolerations: Sequence[object], taint: Mapping[str, Any]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint``, as the Kubernetes scheduler
    matches them: same effect (or none named), same key (or none with ``Exists``), and the
    same value unless the operator is ``Exists``."""
    return any(isinstance(t, dict) and _matches(t, taint) for t in tolerations)


def _matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    exists = toleration.get("operator") == "Exists"
    if not key:
        return exists
    if key != taint.get("key"):
        return False
    return exists or (toleration.get("value") or "") == (taint.get("value") or "")


def retolerated(
    current: Sequence[object], added_before: Sequence[object], wanted: Sequence[Toleration]
) -> tuple[list[object], list[Toleration]]:
    """A pod spec's tolerations as they should be, and which of them Usher added: those it
    added before (``added_before``) taken away, so it is as the user wrote it, then each of
    ``wanted`` it does not have appended. Its own tolerations stay, in their order."""
    own = list(current)
    for toleration in added_before:
        if toleration in own:
            own.remove(toleration)
    added = [t for t in wanted if t not in own]
    return own + added, added
