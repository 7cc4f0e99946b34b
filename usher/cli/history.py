"""History commands: ``usher replay``, ``audit``, ``explain``, ``budget``, ``log`` (and the
helpers ``usher.cli.analysis``'s ``what-if`` and ``usage`` share).

What it does: reads the log (from the running installation over NATS, or offline from a file
written by ``usher log export``), hands it to the pure history modules of the core, prints a
table for people or JSON for scripts, and maps every expected failure to one line and an exit
code: 1 audit findings; 2 usage (bad TIME, bad option, a non-empty stream without --force);
3 bad input (missing or malformed file, invalid tree, a workload the log never mentions);
4 unavailable (no stack running, NATS or PostgreSQL unreachable, no log stream).
Engine settings (``--policy``, ``--oversell-rate``, ``--within-quota``, ``--min-runtime``)
resolve like ``usher run``: option, else ``USHER_*`` variable, else the defaults; give the
installation's own so that reasons and checks match what its services did.
The core's history modules and the adapters are loaded when a command runs, never to check
its arguments (``usher replay --seq -5`` answers before any of them is imported).
What it must never do: decide anything itself, write to the log except ``log import``, or
print a traceback for an expected failure.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import msgspec

from schemas import Millis, WorkloadKey
from usher.adapters.stack_file import read_stack_info, usher_home
from usher.cli import (
    EXIT_BAD_INPUT,
    EXIT_DIFFERENCES,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    cli,
    fail,
    home_option,
    import_nats_without_websockets,
)
from usher.cli.lazy import lazy_module
from usher.cli.values import DURATION, HALF_LIFE, SEQUENCE
from usher.core.model.config import (
    POLICIES,
    WITHIN_QUOTA_MODES,
    EngineConfig,
)

if TYPE_CHECKING:
    import asyncio

    import yaml

    from services.common.settings import ServiceSettings
    from usher.core.history import audit as auditing
    from usher.core.history import dryrun
    from usher.core.history import explain as explaining
    from usher.core.history import replay as hist
    from usher.core.rules import budgets
else:  # loaded when a command runs: an argument error is told before (issue 29)
    asyncio = lazy_module("asyncio")
    yaml = lazy_module("yaml")
    budgets = lazy_module("usher.core.rules.budgets")
    auditing = lazy_module("usher.core.history.audit")
    dryrun = lazy_module("usher.core.history.dryrun")
    explaining = lazy_module("usher.core.history.explain")
    hist = lazy_module("usher.core.history.replay")

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
    help="table for people, json or yaml for scripts.",
)


def _source(command: F) -> F:
    """``--file`` (offline) or ``--nats``/``--prefix`` (the running installation)."""
    for option in reversed(
        (
            click.option(
                "--file",
                "log_file",
                type=click.Path(path_type=Path),
                default=None,
                help="Read an exported log (usher log export) instead of NATS.",
            ),
            click.option("--nats", "nats_url", default=None, help="NATS URL ($USHER_NATS_URL)."),
            click.option("--prefix", default=None, help="Subject prefix of the installation."),
            home_option("Folder of the running `usher up` (default $USHER_HOME)."),
        )
    ):
        command = option(command)
    return command


def _engine(command: F) -> F:
    """The installation's decision settings, as ``usher run`` takes them."""
    for option in reversed(
        (
            click.option("--policy", type=click.Choice(POLICIES), default=None),
            click.option("--oversell-rate", default=None, help="max x rate is the cap."),
            click.option("--within-quota", type=click.Choice(WITHIN_QUOTA_MODES), default=None),
            click.option(
                "--min-runtime", "min_runtime_s", type=DURATION, default=None, help="Seconds."
            ),
            click.option(
                "--half-life",
                "half_life_s",
                type=HALF_LIFE,
                default=None,
                help="Seconds: fair share's half-life (F1; default the installation's, off).",
            ),
        )
    ):
        command = option(command)
    return command


def _stack_admin_url(home: Path | None) -> str | None:
    """The running ``usher up``'s admin URL (``stack.json``), if any."""
    try:
        return read_stack_info(home or usher_home()).admin_nats_url or None
    except (FileNotFoundError, msgspec.DecodeError):
        return None


@dataclass(frozen=True)
class _Log:
    """A log read for one command, and where it came from."""

    history: hist.History
    settings: ServiceSettings
    live: bool


def _settings(
    *,
    live: bool,
    nats_url: str | None,
    prefix: str | None,
    home: Path | None = None,
    database_url: str | None = None,
    policy: str | None = None,
    oversell_rate: str | None = None,
    within_quota: str | None = None,
    min_runtime_s: float | None = None,
    half_life_s: float | None = None,
) -> ServiceSettings:
    from services.common.settings import SettingsError, load_settings

    try:
        settings = load_settings(
            # Offline, no server is needed: a placeholder keeps the NATS URL from being required.
            nats_url=nats_url or (None if live else "nats://offline"),
            database_url=database_url,
            prefix=prefix,
            policy=policy,
            oversell_rate=oversell_rate,
            within_quota=within_quota,
            min_runtime_s=min_runtime_s,
            home=home,
            half_life_s=half_life_s,
        )
    except SettingsError as exc:
        if exc.name == "nats":
            fail(f"no stack running: {exc.detail}", EXIT_UNAVAILABLE)
        fail(f"{exc.name}: {exc.detail}", EXIT_USAGE)
    except ValueError as exc:
        fail(f"settings: {exc}", EXIT_USAGE)
    return settings


def _read(log_file: Path | None, settings: ServiceSettings) -> hist.History:
    if log_file is None:
        import_nats_without_websockets(settings.nats_url)
    from usher.adapters.nats.export import (
        ExportFileError,
        LogStreamMissing,
        LogUnavailable,
        fetch_log,
        read_export_file,
    )

    if log_file is not None:
        try:
            _, entries = read_export_file(log_file)
        except ExportFileError as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        return hist.decode_history(entries)
    from usher.adapters.nats.subjects import Subjects

    subjects = Subjects(settings.prefix)
    try:
        _, entries = asyncio.run(fetch_log(settings.nats_url, subjects))
    except LogUnavailable as exc:
        fail(f"{exc} (is the stack running? start it with `usher up`)", EXIT_UNAVAILABLE)
    except LogStreamMissing as exc:
        fail(f"{exc} at {settings.nats_url}: wrong --prefix, or nothing ran yet", EXIT_UNAVAILABLE)
    return hist.decode_history(entries)


def _load(log_file: Path | None, **options: Any) -> _Log:
    live = log_file is None
    settings = _settings(live=live, **options)
    return _Log(history=_read(log_file, settings), settings=settings, live=live)


def _config(settings: ServiceSettings) -> EngineConfig:
    """The installation's settings, deciding for every zone (a replay sees them all)."""
    return replace(settings.engine, zones=None)


def _when(option: str, text: str | None, history: hist.History) -> Millis | None:
    return _time(option, text, history.end_ms)


def _time(option: str, text: str | None, end_ms: Millis | None) -> Millis | None:
    if text is None:
        return None
    try:
        return hist.parse_time(text, end_ms)
    except hist.TimeError as exc:
        fail(f"{option} {exc.text!r}: {exc.detail}", EXIT_USAGE)


def _log_time(option: str, text: str | None, history: hist.History) -> Millis | None:
    """A TIME in the log's own time (when the stream stored each entry), which no sender can
    forge; relative to the log's last entry."""
    _time(option, text, Millis(0))  # a malformed TIME is a usage error first
    if text is not None and not history.log_times_known:
        fail(
            f"{option}: this export has no log times (written by an older usher); "
            "export the log again",
            EXIT_BAD_INPUT,
        )
    return _time(option, text, history.log_end_ms)


def _print(text: str) -> None:
    click.echo(text, nl=False)


def _show(output: str, as_json: Callable[[], str], as_table: Callable[[], str]) -> None:
    """The table, the JSON, or the same JSON as YAML (one vocabulary for both)."""
    if output == "table":
        _print(as_table())
    elif output == "json":
        _print(as_json())
    else:
        _print(yaml.safe_dump(json.loads(as_json()), sort_keys=False))


# ---------------------------------------------------------------------------- replay


@cli.command("replay")
@click.option("--until", metavar="TIME", default=None, help="ISO-8601 or relative (-10m).")
@click.option("--seq", "until_seq", type=SEQUENCE, default=None, metavar="N")
@OUTPUT
@_source
@_engine
def replay_command(
    until: str | None, until_seq: int | None, output: str, log_file: Path | None, **options: Any
) -> None:
    """Queue state at any point, rebuilt from the log alone.

    Folds every entry up to TIME (the longest prefix of the log at or before it; a relative
    TIME like -10m counts back from the log's last entry) or stream sequence N, and prints
    queues with positions, workloads with states and reasons, and quota used/min/max.
    """
    if until is not None and until_seq is not None:
        fail("give --until or --seq, not both", EXIT_USAGE)
    log = _load(log_file, **options)
    state = hist.replay(
        log.history,
        _config(log.settings),
        until_ms=_when("--until", until, log.history),
        until_seq=until_seq,
    )
    _show(output, lambda: hist.render_replay_json(state), lambda: hist.render_replay_table(state))


# ---------------------------------------------------------------------------- audit


@cli.command("audit")
@click.option(
    "--since", metavar="TIME", default=None, help="Report decisions the log stored from TIME on."
)
@click.option(
    "--database",
    "database_url",
    default=None,
    help="Ledger database to compare with (live default: $USHER_DATABASE_URL / stack.json).",
)
@click.option("--no-ledger", is_flag=True, help="Skip the comparison with the ledger.")
@click.option(
    "--quiescent",
    is_flag=True,
    help="The log has come to rest: also check its end (no workload stuck, none unreleased).",
)
@OUTPUT
@_source
@_engine
def audit_command(
    since: str | None,
    database_url: str | None,
    no_ledger: bool,
    quiescent: bool,
    output: str,
    log_file: Path | None,
    **options: Any,
) -> None:
    """Re-derive every recorded decision from the log before it; list what is not justified.

    Exit 0 when every decision is justified, the log keeps its invariants and the ledger
    agrees with the log, 1 when there are findings (each names the decision: seq, event id,
    workload, and why). Invariants: running usage (preempted victims counted until their
    Released) never above max x oversell rate at an admission, no admission while live, every
    preemption justified; with --quiescent also, at the end, every workload finished, admitted,
    or waiting for a true reason. Offline (--file) the ledger part is skipped unless
    --database is given. Entries that are not valid envelopes are listed apart and do not
    change the exit code. --since is the log's own time (when the stream stored each entry),
    never the time an envelope claims.
    """
    log = _load(log_file, database_url=database_url, **options)
    url = None if no_ledger else (database_url or (log.settings.database_url if log.live else None))
    ledger = None
    if url is not None:
        from usher.adapters.pg.audit_reads import LedgerUnavailable, read_ledger

        try:
            ledger = asyncio.run(read_ledger(url))
        except LedgerUnavailable as exc:
            fail(str(exc), EXIT_UNAVAILABLE)
    report = auditing.audit(
        log.history,
        _config(log.settings),
        since_ms=_log_time("--since", since, log.history),
        ledger=ledger,
        quiescent=quiescent,
    )
    _show(
        output,
        lambda: auditing.render_audit_json(report),
        lambda: auditing.render_audit_table(report),
    )
    if report.findings:
        sys.exit(EXIT_DIFFERENCES)


# ---------------------------------------------------------------------------- explain


@cli.command("explain")
@click.argument("workload", metavar="NS/NAME", required=False)
@click.option(
    "-f",
    "--filename",
    "manifest",
    type=click.Path(path_type=Path),
    default=None,
    help="A job manifest not submitted yet: what the next pass would do with it (dry run).",
)
@OUTPUT
@_source
@_engine
def explain_command(
    workload: str | None, manifest: Path | None, output: str, log_file: Path | None, **options: Any
) -> None:
    """Why NS/NAME is where it is: state, queue, limit, reclaim, estimated start, and its
    history on the log; or, with -f FILE, what submitting the job(s) of FILE would do.

    The reclaim dry run uses the current time (the last entry's time with --file). A
    workload the log never mentions is bad input (exit 3). With -f nothing is created: each
    job of the file is tried alone on the state at the end of the log (as `usher submit
    --dry-run` does).
    """
    if (workload is None) == (manifest is None):
        fail("give NS/NAME, or -f FILE (a job manifest), not both", EXIT_USAGE)
    if manifest is not None:
        _explain_manifest(manifest, output, log_file, **options)
        return
    assert workload is not None
    namespace, _, name = workload.partition("/")
    if not namespace or not name or "/" in name:
        fail(f"{workload!r}: expected NAMESPACE/NAME", EXIT_USAGE)
    try:
        if log_file is None:  # the running installation: its read model, not the whole log
            explanation = _explain_live(WorkloadKey(workload), _settings(live=True, **options))
        else:
            log = _load(log_file, **options)
            explanation = explaining.explain(
                log.history, _config(log.settings), WorkloadKey(workload), _now(log)
            )
    except explaining.UnknownWorkload as exc:
        fail(f"unknown job {exc.workload}: it does not appear on the log", EXIT_BAD_INPUT)
    _show(
        output,
        lambda: explaining.render_explain_json(explanation),
        lambda: explaining.render_explain_table(explanation),
    )


def _explain_live(key: WorkloadKey, settings: ServiceSettings) -> explaining.Explanation:
    """``explain`` on the running installation's log, from its read model
    (``usher.client.readmodel.explain_recent``); reclaim is tried at the current time."""
    import_nats_without_websockets(settings.nats_url)
    from usher.adapters.nats.export import LogStreamMissing, LogUnavailable, connect
    from usher.adapters.nats.subjects import Subjects
    from usher.client.readmodel import explain_recent

    async def explained() -> explaining.Explanation:
        nc = await connect(settings.nats_url)
        try:
            now = Millis(int(time.time() * 1000))
            js = nc.jetstream()
            return await explain_recent(js, Subjects(settings.prefix), _config(settings), key, now)
        finally:
            await nc.close()

    import nats.js.errors

    try:
        return asyncio.run(explained())
    except LogUnavailable as exc:
        fail(f"{exc} (is the stack running? start it with `usher up`)", EXIT_UNAVAILABLE)
    except (LogStreamMissing, nats.js.errors.NotFoundError):
        missing = LogStreamMissing(Subjects(settings.prefix).stream_name)
        fail(
            f"{missing} at {settings.nats_url}: wrong --prefix, or nothing ran yet",
            EXIT_UNAVAILABLE,
        )


def _now(log: _Log) -> Millis:
    """The clock for a live log; the last entry's time for an exported one (repeatable)."""
    end = log.history.end_ms
    return Millis(int(time.time() * 1000)) if log.live or end is None else end


def _explain_manifest(path: Path, output: str, log_file: Path | None, **options: Any) -> None:
    """``explain -f``: a dry run of every job of ``path`` on the log's state."""
    from usher.cli.people import workload_manifests
    from usher.client.errors import BadInput
    from usher.client.manifests import observed_for_dry_run, workload_document

    manifests = workload_manifests(path)
    log = _load(log_file, **options)
    now = _now(log)
    config = _config(log.settings)
    results: list[dryrun.DryRun] = []
    for index, manifest in enumerate(manifests, start=1):
        try:
            document = workload_document(manifest, source=str(path), index=index)
            observed = observed_for_dry_run(document, now)
            results.append(dryrun.dry_run_on_history(log.history, config, observed, now))
        except BadInput as exc:
            for line in exc.lines[:-1]:
                click.echo(f"usher: {line}", err=True)
            fail(exc.lines[-1], EXIT_BAD_INPUT)
        except dryrun.AlreadyKnown as exc:
            fail(str(exc), EXIT_BAD_INPUT)
    _show(
        output,
        lambda: dryrun.render_dry_runs_json(results),
        lambda: dryrun.render_dry_runs_table(results),
    )


# ---------------------------------------------------------------------------- budget


@cli.command("budget")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts.",
)
@_source
def budget_command(output: str, log_file: Path | None, **options: Any) -> None:
    """Spent, left and reset time of every budget of the quota tree in force (B1).

    A node's usher.io/budgets attribute limits resource x time below it per calendar month
    (UTC) or per N-day window; the work running below it counts up to now (offline, --file:
    the log's last entry). Amounts are exact in json (canonical units x ms) and shown in hours
    of the resource's unit (CPU-hours, GiB-hours, GPU-hours).
    """
    log = _load(log_file, **options)
    now = Millis(int(time.time() * 1000)) if log.live else (log.history.end_ms or Millis(0))
    report = hist.budgets_at(log.history, _config(log.settings), now)
    _show(
        output,
        lambda: budgets.render_budget_json(report),
        lambda: budgets.render_budget_table(report),
    )


# ---------------------------------------------------------------------------- log export/import


@cli.group("log")
def log_group() -> None:
    """Export the log to a file, or import such a file into an installation's log."""


@log_group.command("export")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--nats", "nats_url", default=None, help="NATS URL ($USHER_NATS_URL).")
@click.option("--prefix", default=None, help="Subject prefix of the installation.")
@home_option("Folder of the running `usher up` (default $USHER_HOME).")
def export_command(file: Path, nats_url: str | None, prefix: str | None, home: Path | None) -> None:
    """Write every log entry (seq, subject, stored time, envelope) to FILE, a JSON line each."""
    from usher.adapters.nats.export import (
        ExportFileError,
        LogStreamMissing,
        LogUnavailable,
        export_log,
    )

    settings = _settings(live=True, nats_url=nats_url, prefix=prefix, home=home)
    from usher.adapters.nats.subjects import Subjects

    subjects = Subjects(settings.prefix)
    try:
        header = asyncio.run(export_log(settings.nats_url, subjects, file))
    except LogUnavailable as exc:
        fail(f"{exc} (is the stack running? start it with `usher up`)", EXIT_UNAVAILABLE)
    except LogStreamMissing as exc:
        fail(f"{exc} at {settings.nats_url}: wrong --prefix, or nothing ran yet", EXIT_UNAVAILABLE)
    except ExportFileError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    click.echo(
        f"exported {header.entries} entries (seq {header.first_seq}..{header.last_seq}) "
        f"of {header.stream} to {file}"
    )


@log_group.command("import")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Append even if the log stream is not empty.")
@click.option(
    "--nats",
    "nats_url",
    default=None,
    help="The admin's NATS URL ($USHER_ADMIN_NATS_URL; else the running stack's admin).",
)
@click.option("--prefix", default=None, help="Subject prefix of the installation.")
@home_option("Folder of the running `usher up` (default $USHER_HOME).")
def import_command(
    file: Path, force: bool, nats_url: str | None, prefix: str | None, home: Path | None
) -> None:
    """Publish FILE's entries into the log, in order, keeping each id as Nats-Msg-Id.

    Writing the log (and creating its streams) is the admin identity's right only.
    """
    from usher.adapters.nats.export import (
        ExportFileError,
        LogUnavailable,
        StreamNotEmpty,
        import_log,
    )

    admin = nats_url or os.environ.get("USHER_ADMIN_NATS_URL") or _stack_admin_url(home)
    settings = _settings(live=True, nats_url=admin, prefix=prefix, home=home)
    from usher.adapters.nats.subjects import Subjects

    subjects = Subjects(settings.prefix)
    try:
        result = asyncio.run(import_log(settings.nats_url, subjects, file, force=force))
    except ExportFileError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except LogUnavailable as exc:
        fail(f"{exc} (is the stack running? start it with `usher up`)", EXIT_UNAVAILABLE)
    except StreamNotEmpty as exc:
        fail(f"{exc}; pass --force to append to it", EXIT_USAGE)
    new = result.published - result.duplicates
    click.echo(
        f"imported {new} entries into {result.stream} "
        f"({result.duplicates} already there, dropped by id)"
    )
