"""Hostile values for every ``usher.io/`` setting the registry knows (issue 26).

For each setting x each hostile value (tests/builders/hostile.py): a tree carrying it is refused
(``TreeInvalid``) naming that attribute; a job carrying it is refused (``WorkloadInvalid``, which
the watcher publishes as ``WorkloadRejected``) naming that annotation; and the same tree or job
folded straight into an engine -- as a forged log entry would be, with no validation -- never
raises, keeps the tree in force, leaves the engine's snapshot writable, and a plain job is
admitted right after.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import (
    Admitted,
    Millis,
    PodSet,
    QuotaNode,
    QuotaTreeApplied,
    RetryAsk,
    WorkloadKey,
    WorkloadObserved,
    Zone,
)
from tests.builders.events import observed
from tests.builders.hostile import CORPUS, bad_values, hostile_values
from tests.builders.manifests import batch_job, container, elastic_quota_tree, pod_template
from tests.long import examples
from usher.core.engine.facade import Engine
from usher.core.engine.snapshot import snapshot
from usher.core.intake.workload import extract_workload
from usher.core.model.config import EngineConfig, Policy
from usher.core.model.errors import TreeInvalid, WorkloadInvalid
from usher.core.rules.holds import tree_holds
from usher.core.state.indexed import TreeIndex
from usher.core.tree.quota_tree import parse_tree
from usher.core.values.registry import SETTINGS, Setting, job_settings, tree_settings

CONFIG = EngineConfig(policy=Policy.ROUND, instant_release=True)
ROOT_ATTRIBUTES = "spec.root.attributes"
ANNOTATIONS = "metadata.annotations"
TREE_SETTINGS = tree_settings()
JOB_SETTINGS = job_settings()


def _tree_manifest(attributes: dict[str, object]) -> dict[str, Any]:
    leaf = {"name": "team", "min": {"cpu": "4"}, "max": {"cpu": "8"}, "namespaces": ["a"]}
    root = {"name": "root", "min": {"cpu": "8"}, "max": {"cpu": "8"}, "children": [leaf]}
    return elastic_quota_tree({**root, "attributes": attributes})


def _job_manifest(annotations: dict[str, object]) -> dict[str, Any]:
    main = container(cpu="1", memory="1Gi")
    job = batch_job("j", "a", template=pod_template(main), parallelism=2, completions=2)
    job["metadata"]["annotations"] = annotations
    return job


def _ids(setting: Setting[Any]) -> str:
    return setting.key.removeprefix("usher.io/")


@pytest.mark.parametrize("setting", TREE_SETTINGS, ids=_ids)
def test_every_corpus_value_in_a_tree_is_refused_naming_the_attribute(
    setting: Setting[Any],
) -> None:
    for hostile in bad_values(setting.kind):
        with pytest.raises(TreeInvalid) as refused:
            parse_tree(_tree_manifest({setting.key: hostile.value}))
        paths = [error.path for error in refused.value.errors]
        assert paths == [f"{ROOT_ATTRIBUTES}.{setting.key}"], hostile.label
        assert len(refused.value.errors[0].message) < 1000, hostile.label  # quoted cut short


@pytest.mark.parametrize("setting", JOB_SETTINGS, ids=_ids)
def test_every_corpus_value_in_a_job_is_refused_naming_the_annotation(
    setting: Setting[Any],
) -> None:
    for hostile in bad_values(setting.kind):
        with pytest.raises(WorkloadInvalid) as refused:
            extract_workload(_job_manifest({setting.key: hostile.value}), created_ms=Millis(0))
        paths = {error.path for error in refused.value.errors}
        assert paths == {f"{ANNOTATIONS}.{setting.key}"}, hostile.label
        assert all(len(error.message) < 1000 for error in refused.value.errors), hostile.label


@st.composite
def _tree_case(draw: st.DrawFn) -> tuple[Setting[Any], object]:
    setting = draw(st.sampled_from(TREE_SETTINGS))
    return setting, draw(hostile_values(setting.kind))


@st.composite
def _job_case(draw: st.DrawFn) -> tuple[Setting[Any], object]:
    setting = draw(st.sampled_from(JOB_SETTINGS))
    return setting, draw(hostile_values(setting.kind))


@settings(max_examples=examples(300), deadline=None)
@given(_tree_case())
def test_generated_hostile_attributes_are_refused_naming_them(
    case: tuple[Setting[Any], object],
) -> None:
    setting, value = case
    with pytest.raises(TreeInvalid) as refused:
        parse_tree(_tree_manifest({setting.key: value}))
    assert [e.path for e in refused.value.errors] == [f"{ROOT_ATTRIBUTES}.{setting.key}"]


@settings(max_examples=examples(300), deadline=None)
@given(_job_case())
def test_generated_hostile_annotations_are_refused_naming_them(
    case: tuple[Setting[Any], object],
) -> None:
    setting, value = case
    with pytest.raises(WorkloadInvalid) as refused:
        extract_workload(_job_manifest({setting.key: value}), created_ms=Millis(0))
    assert {e.path for e in refused.value.errors} == {f"{ANNOTATIONS}.{setting.key}"}


# ------------------------------------------------------------- folded without validation


def _engine() -> tuple[Engine, QuotaNode]:
    engine = Engine(CONFIG)
    good = parse_tree(_tree_manifest({}))
    engine.apply(QuotaTreeApplied(root=good), Millis(0))
    return engine, good


def _plain_job_is_admitted(engine: Engine, name: str, at: int) -> None:
    engine.apply(observed("a", name, 1), Millis(at))
    decisions = engine.decide(Millis(at))
    key = WorkloadKey(f"a/{name}")
    assert any(isinstance(d, Admitted) and d.workload == key for d in decisions)


def _forged_tree(good: QuotaNode, key: str, value: str) -> QuotaNode:
    return msgspec.structs.replace(good, attributes={key: value})


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_forged_tree_folds_without_raising_and_changes_nothing(data: st.DataObject) -> None:
    setting = data.draw(st.sampled_from(TREE_SETTINGS))
    value = data.draw(hostile_values(setting.kind, strings_only=True).filter(_is_str))
    assert isinstance(value, str)
    engine, good = _engine()
    forged = _forged_tree(good, setting.key, value)
    # Every reader of attributes, on the forged tree itself: none may raise.
    TreeIndex(forged, CONFIG)
    tree_holds(forged, {}, Millis(1))
    engine.apply(QuotaTreeApplied(root=forged), Millis(1))
    assert engine.state.tree.root == good  # the tree in force stays
    _plain_job_is_admitted(engine, "plain", 2)
    snapshot(engine)  # every number in the state still fits the log's encoding


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _forged_jobs() -> list[tuple[str, WorkloadObserved]]:
    """Typed events carrying what no manifest can give: each annotation-derived field out of
    the registry's bounds, as a log entry written without the watcher could."""
    base = observed("a", "forged", 1, count=2)
    huge = 99999999999999999999  # beyond int64: what broke snapshots
    pods = base.pod_sets
    return [
        ("retry-limit", msgspec.structs.replace(base, retry=RetryAsk(limit=huge))),
        ("retry-limit-101", msgspec.structs.replace(base, retry=RetryAsk(limit=101))),
        ("oom-factor-nan", msgspec.structs.replace(base, retry=RetryAsk(memory_factor="nan"))),
        (
            "oom-factor-huge",
            msgspec.structs.replace(base, retry=RetryAsk(memory_factor="9" * 9999)),
        ),
        ("oom-cap", msgspec.structs.replace(base, retry=RetryAsk(memory_cap=2**63))),
        ("zones-100KB", msgspec.structs.replace(base, zones=[Zone("z" * 100_000)])),
        ("zone-script", msgspec.structs.replace(base, zone=Zone("<script>"))),
        ("max-runtime", msgspec.structs.replace(base, max_runtime_seconds=huge)),
        (
            "min-parallelism",
            msgspec.structs.replace(
                base,
                pod_sets=[PodSet(name="main", count=2, requests=pods[0].requests, min_count=huge)],
            ),
        ),
    ]


@pytest.mark.parametrize(("label", "event"), _forged_jobs(), ids=lambda x: str(x)[:20])
def test_a_forged_job_folds_without_raising_and_a_plain_job_is_admitted(
    label: str, event: WorkloadObserved
) -> None:
    engine, _ = _engine()
    engine.apply(event, Millis(1))
    engine.decide(Millis(1))
    assert event.workload not in engine.state.jobs, label  # not folded
    _plain_job_is_admitted(engine, "plain", 2)
    snapshot(engine)


def test_the_corpus_covers_every_kind_the_registry_uses() -> None:
    """Each setting has hostile values to refuse, and the fixed corpus has the issue's cases."""
    for setting in SETTINGS:
        assert len(bad_values(setting.kind)) >= 10, setting.key
    labels = {hostile.label for hostile in CORPUS}
    wanted = {"100000-digits", "2**64", "negative", "fullwidth", "arabic-indic", "superscript"}
    assert wanted | {"spaces", "nan", "inf", "1e300", "empty", "100KB", "nul", "int"} <= labels


def _two_leaves(leaf: dict[str, Any]) -> dict[str, Any]:
    other = {"name": "other", "min": {"cpu": "4"}, "max": {"cpu": "8"}, "namespaces": ["b"]}
    root = {"name": "root", "min": {"cpu": "8"}, "max": {"cpu": "8"}, "children": [other, leaf]}
    return elastic_quota_tree(root)


@pytest.mark.parametrize(
    ("leaf", "path", "code"),
    [
        ({"name": "Team A"}, "spec.root.children[1](Team A).name", "invalid-name"),
        ({"name": "-team"}, "spec.root.children[1](-team).name", "invalid-name"),
        ({"name": "t" * 100_000}, "spec.root.children[1].name", "invalid-name"),
        ({"name": "team", "namespaces": ["User_A"]}, "spec.root.children[1](team).namespaces[0]",
         "invalid-namespace"),
        ({"name": "team", "namespaces": ["n" * 64]}, "spec.root.children[1](team).namespaces[0]",
         "invalid-namespace"),
        ({"name": "team", "attributes": {"k" * 100_000: "1"}},
         "spec.root.children[1](team).attributes.'kkkkk",
         "invalid-key"),
    ],
)  # fmt: skip
def test_names_that_cannot_name_a_queue_or_a_namespace_are_refused(
    leaf: dict[str, Any], path: str, code: str
) -> None:
    """Before issue 26 such a tree was Accepted, and the Queue for it could not be created; a
    100 KB name or key is refused without being repeated in full."""
    leaf = {"min": {"cpu": "4"}, "max": {"cpu": "8"}, "namespaces": ["a"], **leaf}
    with pytest.raises(TreeInvalid) as refused:
        parse_tree(_two_leaves(leaf))
    [error] = refused.value.errors
    assert (error.path[: len(path)], error.code) == (path, code)
    assert len(error.path) < 400 and len(error.message) < 400


def test_a_queue_name_longer_than_an_object_name_is_refused() -> None:
    deep: dict[str, Any] = {"name": "leaf", "min": {"cpu": "4"}, "max": {"cpu": "8"},
                            "namespaces": ["a"]}  # fmt: skip
    for level in range(5):
        deep = {"name": f"level{level}-" + "x" * 50, "min": {"cpu": "4"}, "max": {"cpu": "8"},
                "children": [deep]}  # fmt: skip
    with pytest.raises(TreeInvalid) as refused:
        parse_tree(_two_leaves(deep))
    assert [e.code for e in refused.value.errors] == ["invalid-queue-name"]
