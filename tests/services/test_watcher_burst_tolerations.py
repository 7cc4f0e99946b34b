"""The watcher's pin into a burst zone adds the zone's tolerations (Z3), per kind.

Every registered kind admitted into a burst zone gets the virtual kubelet's toleration on
every pod template (never twice, the template's own kept); admitted again, nothing to do;
admitted later into a plain zone, its templates are exactly as a plain admission leaves them
(what Usher added is taken back, what the user wrote stays); a plain zone never adds one. Which
tolerations a zone gets is read from the root attributes of the tree in force.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from services.watcher.kinds import (
    ADDED_TOLERATIONS_ANNOTATION,
    JOB_FAMILIES,
    JobFamily,
    admit_patch,
)
from tests.core.test_kinds import job, jobset, rayjob, spark, tfjob, workflow
from usher.core.intake.workload import extract_workload
from usher.core.tree.burst_tolerations import DEFAULT_TOLERATIONS, Toleration
from usher.core.tree.zone_burst import zone_tolerations
from usher.local.kube_emulator.patches import merge_patch

Obj = dict[str, Any]
MANIFESTS = [job, tfjob, rayjob, jobset, spark, workflow]
SPOT: Toleration = {"key": "example.com/spot", "operator": "Equal", "value": "true",
                    "effect": "NoSchedule"}  # fmt: skip


def family(kind: str) -> JobFamily:
    return next(f for f in JOB_FAMILIES if f.kind == kind)


def pod_specs(f: JobFamily, obj: Obj) -> list[Obj]:
    return [t["spec"] for t in f.templates(obj["spec"])]


def admit(f: JobFamily, obj: Obj, zone: str, tolerations: tuple[Toleration, ...] = ()) -> Obj:
    patch = admit_patch(f, obj, zone, None, tolerations)
    assert patch is not None
    return merge_patch(copy.deepcopy(obj), patch)  # type: ignore[no-any-return]


@pytest.mark.parametrize("make", MANIFESTS, ids=[m.__name__ for m in MANIFESTS])
def test_a_burst_pin_tolerates_the_taint_and_a_later_plain_pin_undoes_it(make: Any) -> None:
    manifest = make()
    f = family(manifest["kind"])
    burst = admit(f, manifest, "eci", DEFAULT_TOLERATIONS)
    specs = pod_specs(f, burst)
    assert specs and all(s["tolerations"] == list(DEFAULT_TOLERATIONS) for s in specs)
    assert all(s["nodeSelector"] == {"usher.io/zone": "eci"} for s in specs)
    assert extract_workload(burst, created_ms=0).pod_sets == (
        extract_workload(manifest, created_ms=0).pod_sets
    )
    assert admit_patch(f, burst, "eci", None, DEFAULT_TOLERATIONS) is None  # nothing to do
    back = admit(f, burst, "a")  # preempted, requeued, admitted into a plain zone
    plain = admit(f, manifest, "a")
    assert back["spec"] == plain["spec"]
    assert all("tolerations" not in s for s in pod_specs(f, back))
    assert ADDED_TOLERATIONS_ANNOTATION not in back["metadata"].get("annotations", {})
    assert admit_patch(f, back, "a") is None


@pytest.mark.parametrize("make", MANIFESTS, ids=[m.__name__ for m in MANIFESTS])
def test_a_plain_pin_adds_no_toleration_and_no_annotation(make: Any) -> None:
    manifest = make()
    patch = admit_patch(family(manifest["kind"]), manifest, "a")
    assert patch is not None and "tolerations" not in json.dumps(patch)
    assert "annotations" not in patch.get("metadata", {})


def test_the_templates_own_tolerations_stay_and_are_never_doubled() -> None:
    manifest = job()
    f = family("Job")
    own = [{"key": "team", "operator": "Exists"}, dict(DEFAULT_TOLERATIONS[0])]
    manifest["spec"]["template"]["spec"]["tolerations"] = copy.deepcopy(own)
    burst = admit(f, manifest, "eci", (*DEFAULT_TOLERATIONS, SPOT))
    assert burst["spec"]["template"]["spec"]["tolerations"] == [*own, SPOT]
    assert json.loads(burst["metadata"]["annotations"][ADDED_TOLERATIONS_ANNOTATION]) == [[SPOT]]
    back = admit(f, burst, "a")
    assert back["spec"]["template"]["spec"]["tolerations"] == own  # the user's, as written


def test_a_move_between_burst_zones_swaps_their_tolerations() -> None:
    f = family("RayJob")
    first = admit(f, rayjob(), "eci", DEFAULT_TOLERATIONS)
    second = admit(f, first, "spot", (SPOT,))
    assert {json.dumps(s["tolerations"]) for s in pod_specs(f, second)} == {json.dumps([SPOT])}


def test_only_a_burst_zone_of_the_tree_gets_tolerations() -> None:
    root = {"usher.io/burst-zones": "eci,spot",
            "usher.io/burst-tolerations": "spot: example.com/spot=true:NoSchedule"}  # fmt: skip
    assert zone_tolerations(root, "eci") == DEFAULT_TOLERATIONS  # not named: the default
    assert zone_tolerations(root, "spot") == (SPOT,)
    assert zone_tolerations(root, "a") == ()
    assert zone_tolerations({}, "eci") == ()
    untainted = {"usher.io/burst-zones": "eci", "usher.io/burst-tolerations": "eci:"}
    assert zone_tolerations(untainted, "eci") == ()
