"""The root's ``usher.io/burst-tolerations`` (Z3): T1 refusals naming the attribute, the
values it accepts, and how a toleration meets a taint (as the Kubernetes scheduler)."""

from __future__ import annotations

from typing import Any

import pytest

from usher.core.tree.burst_tolerations import (
    BURST_TOLERATIONS_ATTRIBUTE,
    parse_burst_tolerations,
    retolerated,
    tolerates,
)
from usher.core.tree.zone_burst import BURST_ZONES_ATTRIBUTE, attribute_errors

ROOT = "spec.root.attributes"
BURST = {BURST_ZONES_ATTRIBUTE: "eci,spot"}


@pytest.mark.parametrize(
    ("value", "root", "says"),
    [
        ("eci: virtual-kubelet.io/provider:NoSchedule", False, "on the root only"),
        ("a: virtual-kubelet.io/provider:NoSchedule", True, "'a' is not a burst zone"),
        ("virtual-kubelet.io/provider:NoSchedule", True, "'virtual-kubelet.io/provider"),
        ("eci virtual-kubelet.io/provider:NoSchedule", True, "is not 'zone: key"),
        ("eci: k:NoSchedule; eci: j:NoSchedule", True, "'eci' is named twice"),
        ("eci: virtual-kubelet.io/provider", True, "is not a taint"),
        ("eci: k:Never", True, "Effect one of NoSchedule|PreferNoSchedule|NoExecute"),
        ("eci: k=v=w:NoSchedule", True, "is not a taint"),
        ("eci: bad key:NoSchedule", True, "is not a taint"),
        ("eci: k:NoSchedule,", True, "'' is not a taint"),
        ("eci: k:NoSchedule, k:NoSchedule", True, "names the taint 'k:NoSchedule' twice"),
    ],
)
def test_t1_refuses_a_bad_value_naming_the_attribute(value: str, root: bool, says: str) -> None:
    burst = BURST if root else {}  # burst zones below the root are refused on their own
    [error] = attribute_errors({**burst, BURST_TOLERATIONS_ATTRIBUTE: value}, ROOT, root=root)
    assert (error.path, error.code) == (
        f"{ROOT}.{BURST_TOLERATIONS_ATTRIBUTE}",
        "invalid-attribute",
    )
    assert says in error.message


def test_t1_refuses_tolerations_when_no_zone_is_burst() -> None:
    [error] = attribute_errors({BURST_TOLERATIONS_ATTRIBUTE: "eci: k:NoSchedule"}, ROOT, root=True)
    assert "not a burst zone" in error.message


def test_a_good_value_reads_as_kubectl_taint_notation() -> None:
    raw = "eci: virtual-kubelet.io/provider:NoSchedule, example.com/spot=true:NoExecute; spot:"
    assert attribute_errors({**BURST, BURST_TOLERATIONS_ATTRIBUTE: raw}, ROOT, root=True) == []
    assert parse_burst_tolerations(raw, ["eci", "spot"]) == (
        {
            "eci": (
                {
                    "key": "virtual-kubelet.io/provider",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                },
                {
                    "key": "example.com/spot",
                    "operator": "Equal",
                    "value": "true",
                    "effect": "NoExecute",
                },
            ),
            "spot": (),
        },
        None,
    )


VK = {"key": "virtual-kubelet.io/provider", "value": "eci", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (
            {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"},
            True,
        ),
        ({"key": "virtual-kubelet.io/provider", "operator": "Exists"}, True),  # every effect
        ({"operator": "Exists"}, True),  # every taint
        ({"key": "virtual-kubelet.io/provider", "operator": "Equal", "value": "eci"}, True),
        ({"key": "virtual-kubelet.io/provider", "value": "eci"}, True),  # Equal by default
        ({"key": "virtual-kubelet.io/provider", "operator": "Equal", "value": "aci"}, False),
        (
            {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoExecute"},
            False,
        ),
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Equal"}, False),  # an empty key needs Exists
    ],
)
def test_a_toleration_meets_a_taint_as_the_scheduler_decides(
    toleration: dict[str, Any], tolerated: bool
) -> None:
    assert tolerates([toleration], VK) is tolerated
    assert tolerates([], VK) is False


def test_retolerated_takes_back_only_what_usher_added() -> None:
    own = {"key": "team", "operator": "Exists"}
    mine = {"key": "k", "operator": "Exists", "effect": "NoSchedule"}
    assert retolerated([own], [], [mine, own]) == ([own, mine], [mine])
    assert retolerated([own, mine], [mine], []) == ([own], [])
    assert retolerated([own, mine], [mine], [mine]) == ([own, mine], [mine])
