"""Builders of the demo stories' inputs as the pure core sees them: the demo's tree (for a
test to add a story's nodes to), the setup events of a cluster running it, and a story job as
``usher submit`` requests it. Pure values; never plays a story or talks to a system."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from schemas import LogEvent
from usher.client.manifests import JobRequest
from usher.core.history import sim as simulator
from usher.demo import demo_file
from usher.demo.story import StoryJob


def walkthrough_tree() -> dict[str, Any]:
    """The demo's walkthrough ElasticQuotaTree, as ``usher up`` applies it."""
    tree: dict[str, Any] = yaml.safe_load(demo_file("walkthrough-tree.yaml").read_text())
    return tree


def story_setup(
    name: str, tree: dict[str, Any], nodes: Sequence[dict[str, Any]] = ()
) -> list[LogEvent]:
    """The events that set up a cluster with ``tree`` (and ``nodes``, when given)."""
    scenario: dict[str, Any] = {"name": name, "objects": [tree]}
    if nodes:
        scenario["nodes"] = list(nodes)
    return list(simulator.load_scenario(scenario, name).setup)


def story_request(job: StoryJob) -> JobRequest:
    """``job`` as the story submits it (the image is the one thing it does not depend on)."""
    return JobRequest(
        namespace=job.namespace,
        image="busybox",
        name=job.name,
        cpu=job.cpu,
        replicas=job.replicas,
        priority_class=job.priority_class,
        zone=job.zone,
        duration_s=job.duration_s,
    )
