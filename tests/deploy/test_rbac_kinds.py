"""deploy/base/rbac-watcher.yaml names exactly the job kinds of the registry (usher/core/kinds).

Adding a kind is one module in the registry; this test says which RBAC rule it still needs.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from usher.core.kinds import FAMILIES, REJECTED

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "base" / "rbac-watcher.yaml"
JOB_VERBS = {"get", "list", "watch", "patch", "create"}
"""create: the next attempt of a failed job with retries (R12) is a copy of it."""
OBSERVE_VERBS = {"list", "watch"}


def _cluster_rules() -> list[dict[str, list[str]]]:
    documents = list(yaml.safe_load_all(RBAC.read_text(encoding="utf-8")))
    (role,) = [d for d in documents if d and d.get("kind") == "ClusterRole"]
    rules: list[dict[str, list[str]]] = role["rules"]
    return rules


def _granted(verbs: set[str]) -> set[tuple[str, str]]:
    """(group, resource) pairs whose rule grants exactly ``verbs``."""
    return {
        (group, resource)
        for rule in _cluster_rules()
        if set(rule["verbs"]) == verbs
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_admitted_kinds_get_exactly_the_job_verbs() -> None:
    admitted = {family.storage for family in FAMILIES}
    granted = _granted(JOB_VERBS)
    assert granted == admitted, (granted - admitted, admitted - granted)


def test_rejected_kinds_are_only_listed_and_watched() -> None:
    rejected = {family.storage for family in REJECTED}
    job_groups = {family.group for family in (*FAMILIES, *REJECTED)} - {"batch"}
    observed = {pair for pair in _granted(OBSERVE_VERBS) if pair[0] in job_groups}
    assert observed == rejected


def test_no_rule_grants_a_job_kind_more_than_it_needs() -> None:
    storages = {family.storage for family in (*FAMILIES, *REJECTED)}
    for rule in _cluster_rules():
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                if (group, resource) in storages:
                    assert set(rule["verbs"]) <= JOB_VERBS, (group, resource, rule["verbs"])


def test_pods_are_only_listed() -> None:
    """The watcher lists a failed job's pods by its label (their terminations): never more."""
    granted = [
        set(rule["verbs"])
        for rule in _cluster_rules()
        if "" in rule["apiGroups"] and any(r.startswith("pods") for r in rule["resources"])
    ]
    assert granted == [{"list"}]
