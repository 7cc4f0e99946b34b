"""The analysis commands: ``usher what-if`` and ``usher usage``.

What it does: the two history commands whose options name values of the core's what-if and
usage modules (their defaults and choices), kept apart from ``usher.cli.history`` so that the
other history commands check their arguments before any of the core's history is imported
(issue 29); they read the log and map failures exactly as ``usher.cli.history`` does, with its
helpers.
What it must never do: decide anything itself, write to the log, or print a traceback for an
expected failure.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from schemas import Millis
from services.common.settings import SettingsError, parse_rate
from usher.cli import (
    EXIT_BAD_INPUT,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    cli,
    fail,
    load_yaml_file,
    report_input_error,
)
from usher.cli.history import (
    OUTPUT,
    _load,
    _print,
    _read,
    _settings,
    _show,
    _source,
    _time,
    _when,
)
from usher.cli.values import DURATION
from usher.core.history import replay as hist
from usher.core.history import usage, whatif
from usher.core.model.config import (
    POLICIES,
    WITHIN_QUOTA_MODES,
    EngineConfig,
    Policy,
    ReadinessPolicy,
    WithinQuota,
)
from usher.core.model.errors import InputError, ValueRefused
from usher.core.tree.quota_tree import parse_tree
from usher.core.values import numbers

# ---------------------------------------------------------------------------- what-if


def _policy(raw: str) -> Policy:
    return Policy(raw)


def _within(raw: str) -> WithinQuota:
    return "LowerPriority" if raw == "LowerPriority" else "Never"


def _config_of(
    policy: str,
    rate: str,
    within: str,
    runtime_s: float,
    ready_timeout_s: float = 0.0,
    half_life_s: float | None = None,
) -> EngineConfig:
    try:
        return EngineConfig(
            policy=_policy(policy),
            oversell_rate=parse_rate(rate),
            within_quota=_within(within),
            min_runtime_ms=round(runtime_s * 1000),
            readiness=ReadinessPolicy(timeout_ms=round(ready_timeout_s * 1000)),
            half_life_ms=None if half_life_s is None else round(half_life_s * 1000),
        )
    except SettingsError as exc:
        fail(f"{exc.name}: {exc.detail}", EXIT_USAGE)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)


def _half_life(name: str, raw: str) -> float | None:
    """A ``--half-life`` value (F1): seconds > 0, or ``off``."""
    if raw == "off":
        return None
    try:
        seconds = float(numbers.duration(raw, name, high=numbers.MAX_HALF_LIFE_SECONDS))
    except ValueRefused as refused:
        fail(f"{refused.message} (or off)", EXIT_USAGE)
    if not seconds > 0 or round(seconds * 1000) <= 0:
        fail(f"{name}: must be more than 0 seconds, got {raw}", EXIT_USAGE)
    return seconds


def _tree(path: Path) -> whatif.Variant:
    manifest = load_yaml_file(path)
    try:
        root = parse_tree(manifest)
    except InputError as exc:
        report_input_error(str(path), exc)
        sys.exit(EXIT_BAD_INPUT)
    return whatif.Variant(config=EngineConfig(), tree=root, tree_label=str(path))


POLICY = click.Choice(POLICIES)
WITHIN = click.Choice(WITHIN_QUOTA_MODES)


@cli.command("what-if")
@click.option("--tree", type=click.Path(path_type=Path), default=None, help="ElasticQuotaTree.")
@click.option("--policy", type=POLICY, default=None)
@click.option("--oversell", "--oversell-rate", "oversell", default=None, metavar="RATE")
@click.option("--within-quota", type=WITHIN, default=None, metavar="MODE")
@click.option("--min-runtime", "min_runtime_s", type=DURATION, default=None, metavar="SECONDS")
@click.option(
    "--ready-timeout",
    "ready_timeout_s",
    type=DURATION,
    default=None,
    metavar="SECONDS",
    help=(
        "Ready timeout of nodes that set no usher.io/ready-timeout-seconds (R10). Pod progress"
        " is on the log only where a timeout was in force when it was recorded; elsewhere every"
        " admission counts as never ready."
    ),
)
@click.option(
    "--half-life",
    "half_life",
    default=None,
    metavar="SECONDS|off",
    help="Fair share with memory (F1): order borrowing queues by usage decayed with this"
    " half-life; off = R3's order.",
)
@click.option(
    "--zone-max",
    "zone_max",
    multiple=True,
    metavar="NODE=VALUE",
    help="Set NODE's usher.io/zone-max (Z1) on every replayed tree, e.g. 'gpu-team=a100:"
    " nvidia.com/gpu=8; h100: nvidia.com/gpu=4'; NODE= removes it. Repeatable.",
)
@click.option(
    "--zones",
    "zone_lists",
    multiple=True,
    metavar="NODE=LIST",
    help="Set NODE's default accepted zones, usher.io/zones (Z3), e.g. 'gpu-team=a100,eci';"
    " NODE= removes it. Jobs whose own annotation lists zones keep theirs. Repeatable.",
)
@click.option(
    "--burst-zones",
    "burst_zones",
    default=None,
    metavar="LIST",
    help="Set the root's usher.io/burst-zones (Z3), e.g. 'eci'; '' removes it.",
)
@click.option(
    "--reclaim-within",
    "reclaim_within",
    multiple=True,
    metavar="NODE=MODE",
    help="Set NODE's usher.io/reclaim-within (L1: Any, LowerPriority or Never) on every"
    " replayed tree, e.g. 'team-a=Never'; NODE= removes it. Repeatable.",
)
@click.option(
    "--lending-limit",
    "lending_limit",
    multiple=True,
    metavar="NODE=AMOUNTS",
    help="Set NODE's usher.io/lending-limit (L2) on every replayed tree, e.g."
    " 'team-a=cpu=4, nvidia.com/gpu=2'; NODE= removes it. Repeatable.",
)
@click.option(
    "--reclaim-with-own-victims",
    "own_victims",
    multiple=True,
    metavar="NODE=true|false",
    help="Set NODE's usher.io/reclaim-with-own-victims (P1) on every replayed tree; NODE="
    " removes it. Repeatable.",
)
@click.option(
    "--preempt-while-borrowing",
    "while_borrowing",
    multiple=True,
    metavar="NODE=VALUE",
    help="Set NODE's usher.io/preempt-while-borrowing (P2: Never, LowerPriority or"
    " LowerPriorityBorrowersOnly, optionally :N, N a priority) on every replayed tree; NODE="
    " removes it. Repeatable.",
)
@click.option(
    "--within-quota-request",
    "within_request",
    multiple=True,
    metavar="NODE=Any|WithinMin",
    help="Set NODE's usher.io/within-quota-request (P3) on every replayed tree; NODE= removes"
    " it. Repeatable.",
)
@click.option(
    "--topology-level",
    "topology_level",
    default=None,
    metavar="LEVEL|none",
    help="Every job asking a topology level (TP1) asks LEVEL instead, required or preferred as"
    " it was, e.g. 'topology.usher.io/block'; none: as if no job asked any.",
)
@click.option("--baseline-policy", type=POLICY, default="Round", show_default=True)
@click.option("--baseline-oversell", default="1", show_default=True, metavar="RATE")
@click.option("--baseline-within-quota", type=WITHIN, default="Never", show_default=True)
@click.option("--baseline-min-runtime", type=DURATION, default=0.0, show_default=True)
@click.option("--baseline-ready-timeout", type=DURATION, default=0.0, show_default=True)
@click.option("--baseline-half-life", default="off", show_default=True, metavar="SECONDS|off")
@click.option("--since", metavar="TIME", default=None, help="Replay from TIME (state as recorded).")
@click.option("--until", metavar="TIME", default=None, help="Stop the replay at TIME.")
@click.option(
    "--window-ms",
    type=click.IntRange(min=0),
    default=whatif.DEFAULT_WINDOW_MS,
    show_default=True,
    help="Events this close to a group's first one form one group.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=whatif.DEFAULT_LIMIT,
    show_default=True,
    help="Differing decisions to show.",
)
@OUTPUT
@_source
def what_if_command(
    tree: Path | None,
    policy: str | None,
    oversell: str | None,
    within_quota: str | None,
    min_runtime_s: float | None,
    ready_timeout_s: float | None,
    half_life: str | None,
    zone_max: tuple[str, ...],
    zone_lists: tuple[str, ...],
    burst_zones: str | None,
    reclaim_within: tuple[str, ...],
    lending_limit: tuple[str, ...],
    own_victims: tuple[str, ...],
    while_borrowing: tuple[str, ...],
    within_request: tuple[str, ...],
    topology_level: str | None,
    baseline_policy: str,
    baseline_oversell: str,
    baseline_within_quota: str,
    baseline_min_runtime: float,
    baseline_ready_timeout: float,
    baseline_half_life: str,
    since: str | None,
    until: str | None,
    window_ms: int,
    limit: int,
    output: str,
    log_file: Path | None,
    nats_url: str | None,
    prefix: str | None,
    home: Path | None,
) -> None:
    """Replay the recorded inputs with other settings and compare with the baseline.

    Cluster events are replayed through the core twice, with the baseline settings (the
    --baseline-* options: Round, 1, Never, 0 s, no ready timeout, fair share off unless given)
    and with the
    changed ones; a pass runs after each group of events that arrived together and at
    min-runtime, ready-deadline and requeue-backoff wakeups.
    Recorded decisions are ignored; finishes and deletions happen when they happened.
    --zone-max, --zones and --burst-zones change those zone attributes on every tree replayed,
    --reclaim-within and --lending-limit those lending attributes (L1, L2),
    --reclaim-with-own-victims, --preempt-while-borrowing and --within-quota-request a node's
    preemption policies (P1-P3), --topology-level the level topology jobs ask (TP1).
    """
    lending = [(whatif.RECLAIM_WITHIN_FLAG, raw) for raw in reclaim_within]
    lending += [(whatif.LENDING_LIMIT_FLAG, raw) for raw in lending_limit]
    preemption = {
        whatif.RECLAIM_WITH_OWN_VICTIMS_FLAG: own_victims,
        whatif.PREEMPT_WHILE_BORROWING_FLAG: while_borrowing,
        whatif.WITHIN_QUOTA_REQUEST_FLAG: within_request,
    }
    try:
        zone_policy = whatif.parse_zone_policy(
            zone_max, zone_lists, burst_zones, preemption, lending=lending
        )
        level = whatif.parse_topology_level(topology_level)
    except whatif.ZonePolicyError as exc:
        fail(str(exc), EXIT_USAGE)
    changes = (tree, policy, oversell, within_quota, min_runtime_s, ready_timeout_s, half_life)
    if all(change is None for change in (*changes, level)) and zone_policy is None:
        fail(
            "nothing to compare: give --tree, --policy, --oversell, --within-quota, "
            "--min-runtime, --ready-timeout, --half-life, --zone-max, --zones, --burst-zones, "
            "--reclaim-within, --lending-limit, --reclaim-with-own-victims, "
            "--preempt-while-borrowing, --within-quota-request or --topology-level",
            EXIT_USAGE,
        )
    base_half_life = _half_life("--baseline-half-life", baseline_half_life)
    base = _config_of(
        baseline_policy,
        baseline_oversell,
        baseline_within_quota,
        baseline_min_runtime,
        baseline_ready_timeout,
        base_half_life,
    )
    changed = _config_of(
        policy or baseline_policy,
        oversell or baseline_oversell,
        within_quota or baseline_within_quota,
        min_runtime_s if min_runtime_s is not None else baseline_min_runtime,
        ready_timeout_s if ready_timeout_s is not None else baseline_ready_timeout,
        _half_life("--half-life", half_life) if half_life is not None else base_half_life,
    )
    alternative = _tree(tree) if tree is not None else whatif.Variant(config=changed)
    log = _load(log_file, nats_url=nats_url, prefix=prefix, home=home)
    spec = whatif.WhatIfSpec(
        baseline=whatif.Variant(config=base),
        changed=replace(alternative, config=changed, zone_policy=zone_policy, topology_level=level),
        since_ms=_when("--since", since, log.history),
        until_ms=_when("--until", until, log.history),
        window_ms=window_ms,
        limit=limit,
    )
    try:
        report = whatif.what_if(log.history, spec)
    except whatif.ZonePolicyError as exc:
        fail(str(exc), EXIT_USAGE)
    _show(
        output,
        lambda: whatif.render_whatif_json(report),
        lambda: whatif.render_whatif_table(report),
    )


# ---------------------------------------------------------------------------- usage


def _window(
    since: str | None, until: str | None, now: Millis
) -> tuple[Millis | None, Millis | None]:
    """``--since``/``--until`` as times (relative ones count back from ``now``), checked."""
    since_ms, until_ms = _time("--since", since, now), _time("--until", until, now)
    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        fail(
            f"--since {since!r} ({hist.format_time(since_ms)}) is after --until {until!r} "
            f"({hist.format_time(until_ms)})",
            EXIT_USAGE,
        )
    return since_ms, until_ms


def _ledger_intervals(
    url: str | None, since_ms: Millis | None, until_ms: Millis | None
) -> list[usage.Interval]:
    if url is None:
        fail("--ledger: no ledger database: pass --database or run `usher up`", EXIT_USAGE)
    from usher.adapters.pg.audit_reads import LedgerUnavailable, read_usage_intervals

    try:
        return asyncio.run(read_usage_intervals(url, since_ms, until_ms))
    except LedgerUnavailable as exc:
        fail(str(exc), EXIT_UNAVAILABLE)


@cli.command("usage")
@click.option("--since", metavar="TIME", default=None, help="Window start (default: all).")
@click.option("--until", metavar="TIME", default=None, help="Window end (default: now).")
@click.option(
    "--by", type=click.Choice(usage.USAGE_BY), default="node", show_default=True, help="Group by."
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
    help="table for people, json or csv for scripts.",
)
@click.option(
    "--ledger",
    "from_ledger",
    is_flag=True,
    help="Sum the ledger's allocation intervals (PostgreSQL) instead of the log's decisions.",
)
@click.option(
    "--database",
    "database_url",
    default=None,
    help="Ledger database for --ledger (default: $USHER_DATABASE_URL / stack.json).",
)
@_source
def usage_command(
    since: str | None,
    until: str | None,
    by: str,
    output: str,
    from_ledger: bool,
    database_url: str | None,
    log_file: Path | None,
    **options: Any,
) -> None:
    """Resource-hours used per quota node, leaf queue or namespace over a window (U1).

    A workload accrues what it was admitted with (a partial admission: the pods admitted)
    from its admission to its preemption, requeue or release (finish, deletion); one still
    running accrues up to now. --by node counts every node on the path, so a node's usage is
    its children's summed. TIME is ISO-8601 or relative to now (-7d, -12h); offline (--file)
    now is the log's last entry. Amounts are exact (canonical units x ms in json/csv) and
    shown in hours of the resource's unit (CPU-hours, GiB-hours, GPU-hours).
    """
    group = usage.UsageBy(by)
    for option, text in (("--since", since), ("--until", until)):
        _time(option, text, Millis(0))  # a malformed TIME is a usage error first
    if from_ledger:
        settings = _settings(live=False, database_url=database_url, **options)
        if log_file is None:
            now = Millis(int(time.time() * 1000))
        else:  # offline, "now" is the log's last entry, as without --ledger
            now = _read(log_file, settings).end_ms or Millis(0)
        since_ms, until_ms = _window(since, until, now)
        intervals = _ledger_intervals(
            database_url or settings.database_url, since_ms, until_ms or now
        )
    else:
        log = _load(log_file, **options)
        now = Millis(int(time.time() * 1000)) if log.live else (log.history.end_ms or Millis(0))
        since_ms, until_ms = _window(since, until, now)
        intervals = usage.intervals_of(log.history.items)
    report = usage.usage_report(
        intervals, since_ms=since_ms, until_ms=until_ms, now_ms=now, by=group
    )
    render = {
        "table": usage.render_usage_table,
        "json": usage.render_usage_json,
        "csv": usage.render_usage_csv,
    }[output]
    _print(render(report))
