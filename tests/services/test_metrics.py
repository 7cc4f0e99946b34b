"""Metrics and probes over real HTTP: a dequeuer and a ledger in this process, scraped."""

from __future__ import annotations

import asyncio

import aiohttp
import msgspec
import pytest
from nats.js import JetStreamContext
from prometheus_client.parser import text_string_to_metric_families

from schemas import (
    Admitted,
    HoldMode,
    Millis,
    NodeHeld,
    NodeResumed,
    QuotaPath,
    QuotaTreeApplied,
    WorkloadFinished,
    WorkloadKey,
    Zone,
)
from services.common.health import HealthServer
from services.common.metrics import Metrics, process_metrics, record_admission, record_engine
from services.common.runtime import ServiceContext
from services.common.settings import ServiceSettings
from services.dequeuer.service import main as dequeuer_main
from services.ledger.service import main as ledger_main
from tests.builders.events import CORE, observed
from tests.builders.trees import two_leaf_tree
from tests.conftest import Infra
from tests.services.helpers import eventually, log_events, publish, running
from usher.adapters.nats.subjects import Subjects
from usher.core.engine.facade import Engine
from usher.core.model.config import EngineConfig

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _settings(infra: Infra, subjects: Subjects, url: str, zone: str | None) -> ServiceSettings:
    return ServiceSettings(
        nats_url=infra.nats_url,
        database_url=url,
        prefix=subjects.prefix,
        zone=Zone(zone) if zone else None,
        engine=EngineConfig(zones=frozenset({Zone(zone)}) if zone else None),
        request_timeout_s=2.0,
        metrics_port=0,  # USHER_METRICS_PORT=0: a free port
    )


async def _scrape(session: aiohttp.ClientSession, base: str) -> tuple[Samples, set[str]]:
    async with session.get(f"{base}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    samples: Samples = {}
    families: set[str] = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, families


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_metrics_and_probes_of_a_dequeuer_and_a_ledger(
    infra: Infra, subjects: Subjects, js: JetStreamContext, migrated_url: str
) -> None:
    metrics = process_metrics()
    ledger_settings = _settings(infra, subjects, migrated_url, None)
    dequeuer_settings = _settings(infra, subjects, migrated_url, "default")
    contexts: list[ServiceContext] = []

    def ready() -> bool:
        return len(contexts) == 2 and all(c.ready.is_set() and c.nc.is_connected for c in contexts)

    health = HealthServer(metrics, ready)
    port = await health.start(dequeuer_settings.metrics_host, dequeuer_settings.metrics_port)
    assert port is not None and port > 0
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/healthz") as response:
                assert response.status == 200
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 503  # nothing started yet
            await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
            async with (
                running("ledger", ledger_main, ledger_settings, subjects) as ledger,
                running("dequeuer", dequeuer_main, dequeuer_settings, subjects) as dequeuer,
            ):
                contexts.extend([ledger, dequeuer])
                async with session.get(f"{base}/readyz") as response:
                    assert response.status == 200
                # The registry is the process's: earlier tests in it may have counted usage on
                # nodes of the same names. What this test adds is measured from here.
                before, _ = await _scrape(session, base)
                admissions_name = "usher_zone_admissions_total"
                admissions_before = (
                    _value(before, admissions_name, zone="default", burst="false") or 0.0
                )
                usage_name = "usher_usage_resource_seconds_total"
                leaf_before = _value(before, usage_name, node="root/A", resource="cpu") or 0.0
                root_before = _value(before, usage_name, node="root", resource="cpu") or 0.0
                # Two workloads in A's queue: 60 cores fit (A's min), the next 50 do not
                # (the root's 100 would be exceeded), so one admitted and one pending.
                await publish(
                    js, subjects.job(Zone("default"), "a1", "first"), observed("a1", "first", 60)
                )
                await publish(
                    js, subjects.job(Zone("default"), "a1", "second"), observed("a1", "second", 50)
                )

                async def admitted() -> list[object]:
                    return [e for e in await log_events(js, subjects) if isinstance(e, Admitted)]

                assert await eventually(admitted, timeout_s=10)
                queue = "root-a-a1"  # leaf root/A with namespace a1, named as kube-queue does

                async def scraped() -> Samples | None:
                    samples, _ = await _scrape(session, base)
                    pending = _value(samples, "usher_queue_pending_workloads", queue=queue)
                    ledger_lag = _value(samples, "usher_consumer_lag_entries", service="ledger")
                    counted = _value(samples, admissions_name, zone="default", burst="false")
                    if pending == 1 and ledger_lag == 0 and (counted or 0) > admissions_before:
                        return samples
                    return None

                samples = await eventually(scraped, timeout_s=10, every_s=0.2)
                assert samples is not None, {
                    k: v
                    for k, v in (await _scrape(session, base))[0].items()
                    if "lag" in k[0] or "pending" in k[0]
                }
                _, families = await _scrape(session, base)
                for family in (
                    "usher_queue_pending_workloads",
                    "usher_queue_admitted_workloads",
                    "usher_admission_wait_seconds",
                    "usher_quota_used",
                    "usher_quota_min",
                    "usher_quota_max",
                    "usher_preemptions",
                    "usher_quota_nodes_held",
                    "usher_decision_pass_seconds",
                    "usher_consumer_lag_entries",
                    "usher_ledger_transaction_seconds",
                    "usher_watch_reconnects",
                    "usher_dlq_parked",
                    "usher_leader",
                    "usher_usage_resource_seconds",
                    "usher_zone_admissions",
                ):
                    assert family in families, family
                # One granted reservation in zone default, which the tree does not mark burst.
                assert (
                    _value(samples, admissions_name, zone="default", burst="false")
                    == admissions_before + 1
                )
                assert _value(samples, "usher_queue_admitted_workloads", queue=queue) == 1
                assert _value(samples, "usher_quota_nodes_held", mode="Hold") == 0
                assert _value(samples, "usher_quota_used", node="root/A", resource="cpu") == (
                    60 * CORE
                )
                assert _value(samples, "usher_quota_min", node="root/A", resource="cpu") == (
                    60 * CORE
                )
                assert _value(samples, "usher_quota_max", node="root", resource="cpu") == (
                    100 * CORE
                )
                passes = _value(samples, "usher_decision_pass_seconds_count", zone="default")
                assert passes is not None and passes >= 1
                waits = _value(samples, "usher_admission_wait_seconds_count", zone="default")
                assert waits is not None and waits >= 1
                reserves = _value(
                    samples, "usher_ledger_transaction_seconds_count", operation="reserve"
                )
                assert reserves is not None and reserves >= 1
                logs = _value(samples, "usher_ledger_transaction_seconds_count", operation="log")
                assert logs is not None and logs >= 1
                lag = _value(samples, "usher_consumer_lag_entries", service="dequeuer-default")
                assert lag is not None and 0 <= lag <= 5
                assert _value(samples, "usher_leader", role="dequeuer-default") == 1
                assert _value(samples, "usher_leader", role="ledger-relay") == 1

                # Usage (U1): the admitted 60 cores accrue on root/A and on root alike.
                async def used() -> tuple[float, float] | None:
                    now, _ = await _scrape(session, base)
                    leaf = (_value(now, usage_name, node="root/A", resource="cpu") or 0.0) - (
                        leaf_before
                    )
                    root = (_value(now, usage_name, node="root", resource="cpu") or 0.0) - (
                        root_before
                    )
                    return (leaf, root) if leaf > 0 else None

                accrued = await eventually(used, timeout_s=10, every_s=0.2)
                assert accrued is not None and accrued[0] == pytest.approx(accrued[1])

                # A poison entry on the log: the dequeuer parks it, the counter says so.
                parked_before = _value(samples, "usher_dlq_parked_total", service="dequeuer") or 0.0
                await js.publish(subjects.job(Zone("default"), "x", "junk"), b"\x00 junk")

                async def parked() -> bool:
                    now, _ = await _scrape(session, base)
                    value = _value(now, "usher_dlq_parked_total", service="dequeuer") or 0.0
                    return value >= parked_before + 1

                assert await eventually(parked, timeout_s=10, every_s=0.1)
                contexts.clear()
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 503
    finally:
        await health.stop()


async def test_a_taken_port_does_not_stop_anything() -> None:
    first = HealthServer(Metrics(), lambda: True)
    port = await first.start("127.0.0.1", 0)
    assert port is not None
    try:
        second = HealthServer(Metrics(), lambda: True)
        assert await second.start("127.0.0.1", port) is None
        assert await HealthServer(Metrics(), lambda: True).start("127.0.0.1", -1) is None
    finally:
        await first.stop()
    await asyncio.sleep(0)


def test_held_and_draining_nodes_are_counted_by_mode() -> None:
    """R14/R15: the gauge follows the holds in force, by mode, and drops when they lift."""

    metrics = Metrics()
    engine = Engine()
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(0))
    modes: tuple[tuple[str, HoldMode], ...] = (("root/A", "Hold"), ("root/B", "Drain"))
    for node, mode in modes:
        held = NodeHeld(node=QuotaPath(node), mode=mode, by="alice", at_ms=Millis(1))
        engine.apply(held, Millis(1))
    record_engine(metrics, engine)
    value = metrics.registry.get_sample_value
    assert (
        value("usher_quota_nodes_held", {"mode": "Hold"}),
        value("usher_quota_nodes_held", {"mode": "Drain"}),
    ) == (1, 1)
    engine.apply(NodeResumed(node=QuotaPath("root/B"), by="alice", at_ms=Millis(2)), Millis(2))
    record_engine(metrics, engine)
    assert value("usher_quota_nodes_held", {"mode": "Drain"}) == 0


def test_budget_gauges_follow_spent_and_left_and_drop_with_the_budget() -> None:
    """B1: spent and left of each budget in core-seconds; a tree without it removes them."""
    metrics = Metrics()
    engine = Engine(EngineConfig(instant_release=True))
    tree = two_leaf_tree(a_attributes={"usher.io/budgets": "cpu=1h per month"})
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    engine.apply(observed("a1", "running", 2), Millis(0))
    engine.decide(Millis(0))
    engine.decide(Millis(600_000))  # 2 cpu for 600 s
    record_engine(metrics, engine)
    value = metrics.registry.get_sample_value
    labels = {"node": "root/A", "resource": "cpu", "window": "month"}
    assert value("usher_budget_spent_resource_seconds", labels) == 1200
    assert value("usher_budget_left_resource_seconds", labels) == 2400
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(600_001))
    record_engine(metrics, engine)
    assert value("usher_budget_spent_resource_seconds", labels) is None


def test_zone_quota_gauges_follow_usage_per_capped_zone_and_drop_with_the_cap() -> None:
    """Z1: used and cap per node and zone it caps; a tree without the cap removes them."""
    metrics = Metrics()
    engine = Engine(EngineConfig(instant_release=True))
    tree = two_leaf_tree(a_attributes={"usher.io/zone-max": "a100: cpu=10"})
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    engine.apply(observed("a1", "in-a100", 6, zone="a100"), Millis(0))
    engine.apply(observed("a1", "in-h100", 3, zone="h100"), Millis(0))
    engine.decide(Millis(0))
    record_engine(metrics, engine)
    value = metrics.registry.get_sample_value
    labels = {"node": "root/A", "zone": "a100", "resource": "cpu"}
    assert value("usher_quota_zone_used", labels) == 6 * CORE
    assert value("usher_quota_zone_max", labels) == 10 * CORE
    assert value("usher_quota_used", {"node": "root/A", "resource": "cpu"}) == 9 * CORE
    assert value("usher_quota_zone_used", {**labels, "zone": "h100"}) is None
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(1))
    record_engine(metrics, engine)
    assert value("usher_quota_zone_used", labels) is None


def test_usage_is_given_in_every_zone_beside_the_caps_and_guarantees_declared() -> None:
    """Z3/Z4: usage per node in every zone counted on it (burst or not), its guarantee where it
    declares one; summed over zones it is the node's total; the old Z1 series stay as they
    were; a workload gone and a guarantee gone take their series with them."""
    metrics = Metrics()
    engine = Engine(EngineConfig(instant_release=True))
    attributes = {"usher.io/zone-min": "a100: cpu=20", "usher.io/zone-max": "a100: cpu=30"}
    root = msgspec.structs.replace(
        two_leaf_tree(a_attributes=attributes), attributes={"usher.io/burst-zones": "eci"}
    )
    engine.apply(QuotaTreeApplied(root=root), Millis(0))
    engine.apply(observed("a1", "in-a100", 6, zone="a100"), Millis(0))
    engine.apply(observed("a1", "in-eci", 3, zone="eci"), Millis(0))
    engine.apply(observed("b1", "in-h100", 2, zone="h100"), Millis(0))
    engine.decide(Millis(0))
    record_engine(metrics, engine)
    value = metrics.registry.get_sample_value

    def in_zone(node: str, zone: str) -> float | None:
        labels = {"node": node, "zone": zone, "resource": "cpu"}
        return value("usher_quota_used_in_zone", labels)

    assert (in_zone("root/A", "a100"), in_zone("root/A", "eci")) == (6 * CORE, 3 * CORE)
    assert (in_zone("root/B", "h100"), in_zone("root/B", "a100")) == (2 * CORE, None)
    assert (in_zone("root", "a100"), in_zone("root", "eci"), in_zone("root", "h100")) == (
        6 * CORE,
        3 * CORE,
        2 * CORE,
    )
    for node, zones in (("root/A", ("a100", "eci")), ("root", ("a100", "eci", "h100"))):
        total = value("usher_quota_used", {"node": node, "resource": "cpu"})
        assert sum(in_zone(node, zone) or 0 for zone in zones) == total
    a100 = {"node": "root/A", "zone": "a100", "resource": "cpu"}
    assert value("usher_quota_zone_min", a100) == 20 * CORE
    assert value("usher_quota_zone_min", {**a100, "node": "root"}) is None  # declares none
    assert value("usher_quota_zone_used", a100) == 6 * CORE  # Z1's series, as before
    assert value("usher_quota_zone_max", a100) == 30 * CORE
    assert value("usher_quota_zone_used", {**a100, "zone": "eci"}) is None

    engine.apply(WorkloadFinished(workload=WorkloadKey("a1/in-a100")), Millis(1))
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(1))
    record_engine(metrics, engine)
    assert in_zone("root/A", "a100") is None  # nothing counts there, nothing declared
    assert in_zone("root/A", "eci") == 3 * CORE
    assert value("usher_quota_zone_min", a100) is None


def test_a_declared_zone_shows_zero_usage_until_something_runs_there() -> None:
    """A guarantee (Z4) or cap (Z1) in a zone nobody uses yet: its usage line is there, at 0."""
    metrics = Metrics()
    engine = Engine(EngineConfig(instant_release=True))
    tree = two_leaf_tree(a_attributes={"usher.io/zone-min": "a100: cpu=20"})
    engine.apply(QuotaTreeApplied(root=tree), Millis(0))
    record_engine(metrics, engine)
    labels = {"node": "root/A", "zone": "a100", "resource": "cpu"}
    assert metrics.registry.get_sample_value("usher_quota_used_in_zone", labels) == 0
    assert metrics.registry.get_sample_value("usher_quota_zone_min", labels) == 20 * CORE


def test_admissions_are_counted_per_zone_with_burst_zones_labelled() -> None:
    """Z3: the counter's burst label follows the root's usher.io/burst-zones in force."""
    metrics = Metrics()
    engine = Engine()
    burst_tree = msgspec.structs.replace(
        two_leaf_tree(), attributes={"usher.io/burst-zones": "eci"}
    )
    engine.apply(QuotaTreeApplied(root=burst_tree), Millis(0))
    record_admission(metrics, engine, "eci")
    record_admission(metrics, engine, "eci")
    record_admission(metrics, engine, "default")
    value = metrics.registry.get_sample_value
    assert value("usher_zone_admissions_total", {"zone": "eci", "burst": "true"}) == 2
    assert value("usher_zone_admissions_total", {"zone": "default", "burst": "false"}) == 1
    engine.apply(QuotaTreeApplied(root=two_leaf_tree()), Millis(1))
    record_admission(metrics, engine, "eci")
    assert value("usher_zone_admissions_total", {"zone": "eci", "burst": "false"}) == 1
