"""The local stack's stand-in for kube-state-metrics (``usher.local.kube_state``), scraped.

Served on a real port and read back with prometheus_client's own parser: the series are
kube-state-metrics' restart counter, with its labels, and follow the counts as they change.
(The e2e alerts test, tests/e2e/test_alerts_e2e.py, has a real Prometheus fire
UsherServiceRestarting on it while ``usher up`` restarts a killed service.)
"""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from usher.local.kube_state import KubeStateMetrics, RestartCounts
from usher.local.processes import free_port, port_open


def scrape(port: int) -> dict[str, tuple[dict[str, str], float]]:
    """Each pod's restart sample: (labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    families = list(text_string_to_metric_families(text))
    assert [(f.name, f.type) for f in families] == [
        ("kube_pod_container_status_restarts", "counter")
    ]
    found = {}
    for sample in families[0].samples:
        assert sample.name == "kube_pod_container_status_restarts_total"
        found[sample.labels["pod"]] = (sample.labels, sample.value)
    return found


def test_every_process_is_a_pod_whose_restarts_follow_the_counts() -> None:
    counts = {"ledger": 0, "dequeuer-a": 0, "watcher": 0}
    port = free_port()
    exporter = KubeStateMetrics(RestartCounts(lambda: counts, "/home/one"), "127.0.0.1", port)
    exporter.start()
    try:
        before = scrape(port)
        assert {pod: value for pod, (_, value) in before.items()} == counts  # all there, at 0
        labels, _ = before["dequeuer-a"]
        assert set(labels) == {"namespace", "pod", "uid", "container"}
        assert labels["namespace"] == "usher-system"
        assert labels["container"] == "dequeuer"  # deploy/'s container name: the component
        counts["dequeuer-a"] = 3
        after = scrape(port)
        assert after["dequeuer-a"][1] == 3 and after["ledger"][1] == 0
        # A pod's uid stays across its container's restarts, and differs between pods.
        assert after["dequeuer-a"][0]["uid"] == labels["uid"]
        assert len({labels["uid"] for labels, _ in after.values()}) == len(counts)
    finally:
        exporter.stop()
    assert not port_open("127.0.0.1", port)


def test_another_stack_gives_its_pods_other_uids() -> None:
    one = RestartCounts(lambda: {"ledger": 0}, "/home/one")
    two = RestartCounts(lambda: {"ledger": 0}, "/home/two")
    uids = [next(iter(c.collect())).samples[0].labels["uid"] for c in (one, two)]
    assert uids[0] != uids[1]
