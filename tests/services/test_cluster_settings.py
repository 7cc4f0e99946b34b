"""``USHER_CLUSTER`` and ``USHER_CLUSTERS`` (M1): read strictly, a bad one named."""

from __future__ import annotations

import pytest

from schemas import ClusterName, Zone
from services.common.settings import SettingsError, cluster_settings


def test_a_watcher_of_a_named_cluster_knows_every_clusters_zones() -> None:
    settings = cluster_settings({"USHER_CLUSTERS": "default=a,b;c2=c2", "USHER_CLUSTER": "c2"})
    assert settings == {
        "cluster": ClusterName("c2"),
        "clusters": {ClusterName("default"): (Zone("a"), Zone("b")), ClusterName("c2"): ("c2",)},
    }


def test_a_single_cluster_installation_names_none() -> None:
    assert cluster_settings({}) == {"cluster": None, "clusters": {}}


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"USHER_CLUSTERS": "default=a;c2=a"}, "USHER_CLUSTERS[1].zones"),
        ({"USHER_CLUSTERS": "default=a", "USHER_CLUSTER": "c2"}, "USHER_CLUSTER"),
        ({"USHER_CLUSTER": "c2"}, "USHER_CLUSTER"),
        ({"USHER_CLUSTERS": "default=a", "USHER_CLUSTER": "C 2"}, "USHER_CLUSTER"),
    ],
)
def test_a_bad_cluster_setting_is_named(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError) as refused:
        cluster_settings(env)
    assert refused.value.name == name
