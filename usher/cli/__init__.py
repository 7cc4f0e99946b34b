"""The ``usher`` command line: the outermost layer, for people and scripts.

What it does: parses arguments, loads files, calls the core, adapters and services, prints
tables (or JSON), and maps every known error to one clear line and a meaningful exit code.
What it must never do: hold decision logic, or show a traceback for bad input.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import msgspec

from usher import interrupts
from usher.adapters.logs import configure, redact_url
from usher.adapters.stack_file import CONSOLE_PORT, home_problem, read_stack_info, usher_home
from usher.cli.values import DURATION, HALF_LIFE
from usher.client.errors import BadInput
from usher.core.model.config import POLICIES, WITHIN_QUOTA_MODES
from usher.core.model.errors import InputError
from usher.local.processes import ServerStartError, pid_alive

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_DIFFERENCES = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_UNAVAILABLE = 4
EXIT_INTERRUPTED = 130
"""Ctrl-C: stopped on the user's request (128 + SIGINT, as shells report it)."""


def import_nats_without_websockets(nats_url: str | None) -> None:
    """Import nats-py without its WebSocket transport when ``nats_url`` does not need it.

    nats-py imports aiohttp at start in case a ``ws://`` URL comes (0.2 s and more, most of
    a short command's start-up, TLS contexts included); ``nats://`` and ``tls://`` never use
    it. aiohttp is hidden only while nats-py's transport module loads: a later import (a
    Kubernetes call) finds it as usual. Does nothing for a ``ws(s)://`` URL or once loaded.
    """
    if nats_url is not None and nats_url.lower().startswith(("ws://", "wss://")):
        return
    if "nats.aio.transport" in sys.modules or "aiohttp" in sys.modules:
        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # makes `import aiohttp` fail
    try:
        importlib.import_module("nats.aio.transport")
    finally:
        del sys.modules["aiohttp"]


def fail(message: str, code: int) -> NoReturn:
    """Print one line on stderr and exit with ``code`` (no traceback)."""
    click.echo(f"usher: {message}", err=True)
    sys.exit(code)


def _check_home(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """``--home``: a folder, or a path where one can be made (one line and exit 2 if not)."""
    if value is not None and (problem := home_problem(value)) is not None:
        fail(f"--home: {problem}", EXIT_USAGE)
    return value


def home_option(
    help_text: str = "Data folder (default $USHER_HOME or ~/.usher).",
) -> Callable[[F], F]:
    """The ``--home`` option every command that finds the stack takes."""
    return click.option(
        "--home",
        type=click.Path(path_type=Path),
        default=None,
        callback=_check_home,
        help=help_text,
    )


half_life_option = click.option(
    "--half-life",
    "half_life_s",
    type=HALF_LIFE,
    default=None,
    help="Seconds: fair share with memory (F1) orders borrowing queues by usage decayed with"
    " this half-life (default off).",
)
"""The ``--half-life`` option of ``usher up`` and ``usher run`` (the engine setting F1)."""
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "usher.cli.people": (
        "apply",
        "submit",
        "wait",
        "delete",
        "cancel",
        "jobs",
        "queues",
        "queue",
        "quota",
    ),
    "usher.cli.history": ("replay", "audit", "explain", "budget", "log"),
    "usher.cli.analysis": ("what-if", "usage"),
    "usher.cli.stack": ("status", "down"),
    "usher.cli.console": ("console",),
    "usher.cli.holds": ("hold", "drain", "resume"),
    "usher.cli.clusters": ("cluster",),
    "usher.cli.subscribers": ("subscriber",),
}
"""Where the commands not defined here live; a module is imported only when one of its
commands runs (or for ``--help``), so ``usher --version`` and ``usher jobs`` skip the others'
imports. A command missing from this table still works: an unknown name loads every module."""


class LazyCommands(click.Group):
    """The ``usher`` group: imports a command's module when that command is asked for."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            modules = [m for m, names in COMMAND_MODULES.items() if cmd_name in names]
            for module in modules or COMMAND_MODULES:
                importlib.import_module(module)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in COMMAND_MODULES:
            importlib.import_module(module)
        return super().list_commands(ctx)


@click.group(cls=LazyCommands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="usher")
def cli() -> None:
    """Usher: an event-sourced, multi-tenant job queue for Kubernetes batch work."""
    if os.environ.get("USHER_HOME") and (problem := home_problem(usher_home())) is not None:
        fail(f"USHER_HOME: {problem}", EXIT_USAGE)


@cli.command()
@home_option()
@click.option("--no-demo", is_flag=True, help="Start empty: no quota tree, no demo jobs.")
@click.option(
    "--zones",
    default="a,b",
    show_default=True,
    help="Zones, each with a node and a dequeuer (unlabelled jobs: zone default).",
)
@click.option(
    "--burst-zones",
    default="",
    help="Zones with a virtual kubelet's node (large allocatable) and a dequeuer each, added"
    " to --zones; the demo marks them burst in the tree (Z3).",
)
@click.option(
    "--racks",
    default="",
    metavar="BxRxN",
    help="Each zone's nodes in B blocks of R racks of N nodes, labelled with their topology"
    " (TP1), e.g. 2x2x2; default one node per zone.",
)
@click.option(
    "--clusters",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    help="Emulated clusters (M1): the first holds --zones; each other one, c2, c3..., its own"
    " zone of its name, emulator and watcher.",
)
@click.option(
    "--policy",
    type=click.Choice(POLICIES),
    default="Round",
    show_default=True,
    help="Block: strict priority (kube-queue's StrictPriority).",
)
@click.option("--oversell-rate", default="1", show_default=True, help="Cap is max x rate.")
@click.option(
    "--within-quota",
    type=click.Choice(WITHIN_QUOTA_MODES),
    default="Never",
    show_default=True,
)
@click.option(
    "--min-runtime",
    "min_runtime_s",
    type=DURATION,
    default=0.0,
    help="Seconds an admitted job is protected from reclaim.",
)
@half_life_option
@click.option(
    "--durable",
    is_flag=True,
    help="NATS fsyncs every entry before acknowledging it (sync_interval: always).",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Demo randomness.")
@click.option("--plain", is_flag=True, help="Plain lines even on a terminal.")
@click.option(
    "--console-port",
    type=click.IntRange(min=0, max=65535),
    default=CONSOLE_PORT,
    show_default=True,
    help="The web console's port on 127.0.0.1 (0: any free port; taken: another one).",
)
@click.option("--no-console", is_flag=True, help="Start no web console.")
@click.option(
    "--reuse-orphan",
    is_flag=True,
    help="As root: take back this home's earlier PostgreSQL data that it no longer points to.",
)
@click.option(
    "--remove-orphans",
    is_flag=True,
    help="As root: delete every orphaned PostgreSQL data folder (of homes deleted or that"
    " point elsewhere) that is not reused.",
)
@click.option(
    "--interval",
    "interval_s",
    type=DURATION,
    default=10.0,
    show_default=True,
    help="Seconds between summaries in plain mode.",
)
def up(
    home: Path | None,
    no_demo: bool,
    zones: str,
    burst_zones: str,
    racks: str,
    clusters: int,
    policy: str,
    oversell_rate: str,
    within_quota: str,
    min_runtime_s: float,
    half_life_s: float | None,
    durable: bool,
    seed: int,
    plain: bool,
    console_port: int,
    no_console: bool,
    reuse_orphan: bool,
    remove_orphans: bool,
    interval_s: float,
) -> None:
    """Start the whole system on this machine and show it live, until Ctrl-C.

    NATS JetStream, PostgreSQL, the Kubernetes API emulator (with a fake kubelet) and the
    services (ledger, preemptor, one dequeuer per zone, watcher) and the read-only web console
    (its URL is printed) each run as a process; data
    stays in $USHER_HOME, so starting again resumes. Unless --no-demo, kube-queue's walkthrough's
    quota tree and three scenarios are played, then a steady mixed workload. Ctrl-C or SIGTERM stops
    everything in order: services, emulator, PostgreSQL, NATS.
    """
    import asyncio

    from usher.cli.live import run_up
    from usher.local.cluster import parse_racks
    from usher.local.system import EmbeddedSystem, SystemOptions

    configure()
    logging.getLogger("alembic").setLevel(logging.WARNING)  # migrations: no chatter on screen
    home = home or usher_home()
    zone_list = _zone_names("--zones", zones)
    burst_list = _zone_names("--burst-zones", burst_zones)
    if "default" in burst_list:
        fail("--burst-zones: zone default takes unlabelled jobs; it cannot be burst", EXIT_USAGE)
    try:
        parse_racks(racks)
    except ValueError as exc:
        fail(f"--racks: {exc}", EXIT_USAGE)
    if interval_s <= 0:
        fail(f"--interval: must be positive, got {interval_s:g}", EXIT_USAGE)
    if min_runtime_s < 0:
        fail(f"--min-runtime: must be 0 or more seconds, got {min_runtime_s:g}", EXIT_USAGE)
    _refuse_second_start(home)
    _settle_orphans(home, reuse=reuse_orphan, remove=remove_orphans)
    options = SystemOptions(
        zones=(*zone_list, *(z for z in burst_list if z not in zone_list)),
        burst_zones=burst_list,
        racks=racks,
        policy=policy,
        oversell_rate=oversell_rate,
        within_quota=within_quota,
        min_runtime_s=min_runtime_s,
        half_life_s=half_life_s,
        durable=durable,
        console_port=None if no_console else console_port,
        clusters=clusters,
    )
    _check_service_settings(home, options)
    system = EmbeddedSystem(home, options, up_pid=os.getpid())
    stop = _UpStop()
    stop.install(raising=True)  # while starting, a signal unwinds the start (which cleans up)
    click.echo(f"Starting Usher in {home} ...")
    try:
        info = system.start()
    except ServerStartError as exc:
        fail(_start_failure(exc, home), EXIT_UNAVAILABLE)
    except KeyboardInterrupt:
        say("Stopped before it was up.")
        sys.exit(stop.exit_code())
    stop.install(raising=False)
    reason: str | None = None
    try:  # from here on every way out stops the stack, whatever happens to the output
        _say_up(info, home)
        if not stop.requested.is_set():
            reason = asyncio.run(
                run_up(
                    system,
                    info,
                    stop.requested,
                    demo=not no_demo,
                    seed=seed,
                    plain=plain or not sys.stdout.isatty(),
                    interval_s=interval_s,
                )
            )
    finally:
        stop.install(raising=False)  # a second Ctrl-C must not cut the stop
        say("Stopping: services, emulator, PostgreSQL, NATS ...")
        system.stop()
        say("Stopped.")
    if reason is not None:
        fail(reason, EXIT_UNAVAILABLE)
    sys.exit(stop.exit_code())


def say(line: str) -> None:
    """Print a line on stdout that may be gone: the reader of ``usher up | tee up.log`` dies
    with the same Ctrl-C. A broken or closed stdout then becomes /dev/null, so the stop that
    follows still runs to its end (else click ends the process at the first failed write and
    the children die with it, leaving ``stack.json`` behind) and nothing fails at exit."""
    try:
        click.echo(line)
        sys.stdout.flush()
    except (OSError, ValueError):  # EPIPE, EIO (the terminal closed), a closed stream
        _silence_stdout()


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _say_up(info: Any, home: Path) -> None:
    """What ``usher up`` prints once everything runs: where each part is."""
    say(f"Usher is up (data in {info.home})")
    sync = "fsync before every ack" if info.durable else "default fsync interval"
    say(f"  NATS JetStream  {redact_url(info.nats_url)} ({sync})")
    say(f"  PostgreSQL      {redact_url(info.database_url)}")
    say(f"  Kubernetes API  kubeconfig {info.kubeconfig}")
    say(f"  services        {', '.join(info.service_pids)} (logs in {home / 'logs'})")
    if info.console_url:
        say(f"  web console     {info.console_url}")
    say(f"  stack file      {home / 'stack.json'}")
    say("Press Ctrl-C to stop (or run `usher down`).")


class _UpStop:
    """How ``usher up`` reacts to Ctrl-C and SIGTERM: a clean stop, then exit 130 for Ctrl-C
    (0 for SIGTERM, which is how ``usher down`` asks)."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signals: list[int] = []

    def install(self, *, raising: bool) -> None:
        """``raising``: the first signal raises ``KeyboardInterrupt`` (to unwind a start).

        A Ctrl-C that came before, whose ``KeyboardInterrupt`` was lost where Python ignores
        exceptions (``usher.interrupts``), counts as requested now: a first install raises
        at once, nothing started yet. ``_raise`` notes before it raises for the same reason:
        a raise swallowed during the start still stops the stack once it is up."""
        handler = self._raise if raising else self._note
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        if interrupts.interrupted() and signal.SIGINT not in self.signals:
            self._note(signal.SIGINT, None)
            if raising:
                self.install(raising=False)
                raise KeyboardInterrupt

    def _note(self, signum: int, _frame: Any) -> None:
        self.signals.append(signum)
        self.requested.set()

    def _raise(self, signum: int, frame: Any) -> None:
        self._note(signum, frame)
        self.install(raising=False)  # only once: the clean-up that follows must finish
        raise KeyboardInterrupt

    def exit_code(self) -> int:
        return EXIT_INTERRUPTED if signal.SIGINT in self.signals else EXIT_OK


def _check_service_settings(home: Path, options: Any) -> None:
    """Resolve every setting the services will resolve (same values, same environment)
    before anything starts: a bad one is one line and exit 2, with nothing started."""
    from services.common.settings import SettingsError, load_settings

    try:
        load_settings(
            nats_url="nats://127.0.0.1:4222",  # a placeholder: every service gets its own
            home=home,
            policy=options.policy,
            oversell_rate=options.oversell_rate,
            within_quota=options.within_quota,
            min_runtime_s=options.min_runtime_s,
            settle_ms=options.settle_ms,
            half_life_s=options.half_life_s,
        )
    except SettingsError as exc:
        name = (
            f"--{exc.name}"
            if exc.name in ("oversell-rate", "policy", "within-quota", "half-life")
            else exc.name
        )
        fail(f"{name}: {exc.detail}", EXIT_USAGE)
    except ValueError as exc:  # a USHER_* variable that is not a number
        fail(f"settings: {exc}", EXIT_USAGE)


def _start_failure(exc: ServerStartError, home: Path) -> str:
    """``<name> did not start: <reason>: <its last error line> (logs in ...)``."""
    last = last_error_line(exc.log)
    said = f": {last}" if last else ""
    return f"{exc.name} did not start: {exc.reason}{said} (logs in {home / 'logs'})"


def last_error_line(log: str) -> str | None:
    """The last thing a process said before it died: its last error event (JSON logs), else
    its last non-empty line (a one-line failure, or a traceback's exception line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        try:
            event = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue
        if isinstance(event, dict) and event.get("level") in ("error", "critical"):
            details = [f"{k}={v}" for k, v in event.items() if k in ("error", "detail", "reason")]
            return " ".join([str(event.get("event", "")), *details]).strip()
    return lines[-1] if lines else None


@cli.command("streams")
@click.option(
    "--nats",
    "nats_url",
    default=None,
    help="The admin identity's NATS URL (default: $USHER_ADMIN_NATS_URL, else stack.json's).",
)
@click.option("--prefix", default=None, help="Subject prefix of the installation (usher).")
@click.option(
    "--replicas",
    default=None,
    help="Replicas of the log and DLQ (default: $USHER_STREAM_REPLICAS, else 1).",
)
@home_option()
def streams_command(
    nats_url: str | None, prefix: str | None, replicas: str | None, home: Path | None
) -> None:
    """Create or update the log and DLQ streams, as the admin (services never may)."""
    import asyncio

    from services.common.settings import SettingsError, stream_replicas
    from usher.adapters.nats.subjects import Subjects
    from usher.local.stack import prepare_streams

    try:
        count = stream_replicas(replicas or os.environ.get("USHER_STREAM_REPLICAS") or "1")
    except SettingsError as exc:
        fail(f"--replicas: {exc.detail}", EXIT_USAGE)
    url = nats_url or os.environ.get("USHER_ADMIN_NATS_URL")
    stack = None
    with contextlib.suppress(FileNotFoundError, msgspec.DecodeError):
        stack = read_stack_info(home or usher_home())
    url = url or (stack.admin_nats_url if stack else None)
    if not url:
        fail("no admin NATS URL: pass --nats or set USHER_ADMIN_NATS_URL", EXIT_USAGE)
    subjects = Subjects(
        prefix or os.environ.get("USHER_PREFIX") or (stack.prefix if stack else "usher")
    )
    try:
        asyncio.run(prepare_streams(url, subjects, count))
    except (OSError, TimeoutError, nats_errors()) as exc:
        fail(
            f"streams not created at {redact_url(url)}: {type(exc).__name__}: {exc}",
            EXIT_UNAVAILABLE,
        )
    click.echo(f"streams {subjects.stream_name}, {subjects.dlq_stream_name}: {count} replicas")


def nats_errors() -> type[Exception]:
    import nats.errors

    return nats.errors.Error


_ZONE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


def _zone_names(option: str, text: str) -> tuple[str, ...]:
    """The zones a comma-separated option names; a usage error naming a bad one."""
    names = tuple(z.strip() for z in text.split(",") if z.strip())
    for zone in names:
        if not _ZONE.match(zone):
            fail(
                f"{option}: {zone!r} is not a valid zone name (letters, digits, '-', '_', '.')",
                EXIT_USAGE,
            )
    return names


def _settle_orphans(home: Path, *, reuse: bool, remove: bool) -> None:
    """As root, PostgreSQL's data lives outside the home (``usher.local.servers``); what no
    home points to any more is found here, before anything starts, and always said. The
    data of a deleted home is removed: its passwords and its log went with the home, so
    nothing can open it again. The data of a home that still exists is kept unless asked:
    ``--reuse-orphan`` points this home at its own earlier data again, ``--remove-orphans``
    deletes the rest. No question is asked: ``usher up`` runs from scripts too."""
    from usher.local.servers import find_orphans, remove_orphan, reuse_orphan

    orphans = find_orphans()
    ours = next((o for o in orphans if o.reusable_by(home)), None)
    if reuse and ours is None:
        fail(f"--reuse-orphan: no earlier PostgreSQL data of {home} to reuse", EXIT_USAGE)
    if reuse and ours is not None:
        reuse_orphan(ours, home)
        say(f"Reusing this home's earlier PostgreSQL data {ours.path}")
    for orphan in orphans:
        if orphan is ours and reuse:
            continue
        if remove or not orphan.home_exists:
            remove_orphan(orphan)
            say(f"Removed orphaned PostgreSQL data {orphan.describe()}")
            continue
        hint = "--reuse-orphan takes it back, " if orphan is ours else ""
        say(
            f"Kept orphaned PostgreSQL data {orphan.describe()} ({hint}--remove-orphans removes it)"
        )


def _refuse_second_start(home: Path) -> None:
    """One system per home: refuse while another ``usher up`` runs there; forget a stale file."""
    try:
        info = read_stack_info(home)
    except FileNotFoundError:
        return
    except (msgspec.DecodeError, msgspec.ValidationError):
        (home / "stack.json").unlink(missing_ok=True)
        return
    alive = [f"{name} (pid {pid})" for name, pid in info.all_pids().items() if pid_alive(pid)]
    if alive:
        fail(
            f"Usher is already running in {home}: {', '.join(alive[:3])}; stop it first",
            EXIT_UNAVAILABLE,
        )
    (home / "stack.json").unlink(missing_ok=True)


def load_yaml_file(path: Path) -> Any:
    """Read and parse a YAML file, turning every failure into one clear line and exit 3."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{path}: no such file", EXIT_BAD_INPUT)
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        fail(f"{path}: cannot read ({exc.__class__.__name__})", EXIT_BAD_INPUT)
    from usher.client.manifests import parse_yaml  # YAML and the core: not for every command

    try:
        documents = parse_yaml(text, str(path))
    except BadInput as exc:
        fail(exc.message, EXIT_BAD_INPUT)
    if len(documents) > 1:
        fail(f"{path}: expected one YAML document, found {len(documents)}", EXIT_BAD_INPUT)
    return documents[0] if documents else None


def report_input_error(source: str, exc: InputError) -> None:
    """One line per problem, each naming the field path."""
    for error in exc.errors:
        where = f"{error.path}: " if error.path else ""
        message = error.message.removeprefix(f"{source}: ")
        click.echo(f"usher: {source}: {where}{message} [{error.code}]", err=True)


@cli.command()
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per file.")
@click.option("--check", is_flag=True, help="Compare with the file's expect: block.")
@click.option(
    "--generate",
    "spec_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Generate a workload from SPEC (YAML; see docs/how-to/plan-with-the-simulator.md)"
    " and report per department.",
)
@click.option(
    "--seed", type=int, default=None, help="With --generate: the random seed (default: the spec's)."
)
@click.option(
    "--horizon",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="With --generate: seconds of arrivals, the report's window (default: spec's).",
)
@click.option(
    "--rate-scale",
    type=click.FloatRange(min=0),
    default=None,
    help="With --generate: multiply every department's arrival rate and bursts' jobs.",
)
@click.option(
    "--policy",
    type=click.Choice(POLICIES),
    default=None,
    help="With --generate: the admission policy (default: the spec's config, else Round).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "csv"]),
    default=None,
    help="With --generate: table for people, json or csv for scripts (--json: json).",
)
@click.option(
    "--emit",
    type=click.Path(path_type=Path),
    default=None,
    help="With --generate: also write the generated scenario to this YAML file.",
)
def sim(
    files: tuple[Path, ...],
    as_json: bool,
    check: bool,
    spec_file: Path | None,
    seed: int | None,
    horizon: float | None,
    rate_scale: float | None,
    policy: str | None,
    output: str | None,
    emit: Path | None,
) -> None:
    """Play scenario FILES through the admission core (no cluster, no servers).

    With --generate SPEC, generate the workload a spec describes (seeded: the same spec and
    seed print the same bytes), play it, and report per department: admitted, waits,
    resource-seconds against the guarantee, preemptions and the work they threw away,
    utilisation.

    Exit 0 when every file ran (and, with --check, matched its expect: block); 1 when some
    outcome differs from expect:; 3 when a file is missing or malformed.
    """
    if spec_file is not None:
        if files or check:
            raise click.UsageError("--generate takes no FILES and no --check")
        from usher.cli.simgen import generate_and_report

        knobs = (seed, horizon, rate_scale, policy)
        generate_and_report(spec_file, knobs, output or ("json" if as_json else "table"), emit)
        return
    if not files:
        raise click.UsageError("Missing argument 'FILES...'.")
    if any(v is not None for v in (seed, horizon, rate_scale, policy, output, emit)):
        raise click.UsageError(
            "--seed, --horizon, --rate-scale, --policy, -o and --emit need --generate"
        )
    from usher.core.history import sim as simulator

    differing = 0
    for path in files:
        data = load_yaml_file(path)
        try:
            scenario = simulator.load_scenario(data, str(path))
        except InputError as exc:
            report_input_error(str(path), exc)
            sys.exit(EXIT_BAD_INPUT)
        result = simulator.run(scenario)
        if as_json:
            click.echo(simulator.render_json(result))
        else:
            if len(files) > 1:
                click.echo(f"== {path}")
            click.echo(simulator.render_table(result))
        if check:
            differences = simulator.check(scenario, result)
            for line in differences:
                click.echo(f"{path}: {line}", err=True)
            differing += bool(differences)
            if not differences and not as_json:
                click.echo(f"{path}: matches expect")
    if differing:
        sys.exit(EXIT_DIFFERENCES)


@cli.command("migrate")
@click.option(
    "--database",
    "database_url",
    default=None,
    help="PostgreSQL URL of the schema's owner (default: $USHER_DATABASE_URL; the password "
    "may come from $USHER_DATABASE_PASSWORD).",
)
def migrate_command(database_url: str | None) -> None:
    """Upgrade the ledger's schema to this release's head (idempotent; the usher-migrate Job)."""
    from sqlalchemy.exc import SQLAlchemyError

    from services.common.settings import SettingsError, with_password
    from usher.adapters.pg.migrate import upgrade

    try:
        url = with_password(
            database_url or os.environ.get("USHER_DATABASE_URL"),
            os.environ.get("USHER_DATABASE_PASSWORD"),
        )
    except SettingsError as exc:
        fail(f"{exc.name}: {exc.detail}", EXIT_USAGE)
    if not url:
        fail("no database: pass --database or set USHER_DATABASE_URL", EXIT_USAGE)
    try:
        upgrade(url)
    except (OSError, SQLAlchemyError) as exc:
        fail(f"migrate: cannot migrate {redact_url(url)}: {type(exc).__name__}", EXIT_UNAVAILABLE)
    click.echo("schema at head")


SERVICES = ("watcher", "ledger", "dequeuer", "preemptor", "webhook")


@cli.command()
@click.argument("service", type=click.Choice(SERVICES))
@click.option("--zone", default=None, help="Zone of a dequeuer (default: $USHER_ZONE or default).")
@click.option("--nats", "nats_url", default=None, help="NATS URL (default: $USHER_NATS_URL).")
@click.option(
    "--database",
    "database_url",
    default=None,
    help="PostgreSQL URL for the ledger (default: $USHER_DATABASE_URL).",
)
@click.option("--kubeconfig", default=None, help="Kubeconfig for the watcher.")
@click.option("--prefix", default=None, help="Subject prefix of the installation (usher).")
@click.option("--policy", type=click.Choice(POLICIES), default=None)
@click.option("--oversell-rate", default=None, help="max x rate is the cap (default 1).")
@click.option("--within-quota", type=click.Choice(WITHIN_QUOTA_MODES), default=None)
@click.option(
    "--min-runtime",
    "min_runtime_s",
    type=DURATION,
    default=None,
    help="Seconds an admitted workload is protected from reclaim.",
)
@half_life_option
@click.option(
    "--settle-ms",
    type=int,
    default=None,
    help="Dequeuer: wait this long for more events before a pass (default 20).",
)
def run(
    service: str,
    zone: str | None,
    nats_url: str | None,
    database_url: str | None,
    kubeconfig: str | None,
    prefix: str | None,
    policy: str | None,
    oversell_rate: str | None,
    within_quota: str | None,
    min_runtime_s: float | None,
    half_life_s: float | None,
    settle_ms: int | None,
) -> None:
    """Run one SERVICE in the foreground until SIGTERM or Ctrl-C.

    Settings come from the options, else USHER_* variables, else the running embedded
    stack's stack.json. Every service of one installation must use the same policy,
    oversell rate and within-quota setting.
    """
    from services.common.runtime import ServiceUnavailable, run_service
    from services.common.settings import SettingsError, load_settings, load_webhook_settings
    from usher.adapters.pg.migrate import SchemaBehind

    if service == "webhook":
        # No NATS: it only reads namespaces and trees from the API and answers over HTTPS.
        try:
            webhook_settings = load_webhook_settings(kubeconfig)
        except SettingsError as exc:
            fail(f"webhook: {exc.name}: {exc.detail}", EXIT_USAGE)
        importlib.import_module("services.webhook.service").run_webhook(webhook_settings)
        return
    if service == "dequeuer":
        zone = zone or os.environ.get("USHER_ZONE") or "default"
    try:
        settings = load_settings(
            nats_url=nats_url,
            database_url=database_url,
            kubeconfig=kubeconfig,
            prefix=prefix,
            zone=zone,
            policy=policy,
            oversell_rate=oversell_rate,
            within_quota=within_quota,
            min_runtime_s=min_runtime_s,
            settle_ms=settle_ms,
            half_life_s=half_life_s,
        )
    except SettingsError as exc:
        fail(f"{exc.name}: {exc.detail}", EXIT_USAGE)
    if service == "ledger" and settings.database_url is None:
        fail("the ledger needs PostgreSQL: pass --database or set USHER_DATABASE_URL", EXIT_USAGE)
    if service == "watcher" and settings.kubeconfig is None:
        fail("the watcher needs a Kubernetes API: pass --kubeconfig or set KUBECONFIG", EXIT_USAGE)
    entry = importlib.import_module(f"services.{service}.service")
    try:
        run_service(service, settings, entry.main)
    except ServiceUnavailable as exc:
        fail(f"{service}: cannot reach {exc.server}: {exc.detail}", EXIT_UNAVAILABLE)
    except SchemaBehind as exc:
        fail(f"{service}: {exc}", EXIT_UNAVAILABLE)
    except SettingsError as exc:
        fail(f"{service}: {exc.name}: {exc.detail}", EXIT_USAGE)
    except OSError as exc:
        fail(
            f"{service}: cannot reach a server ({exc.__class__.__name__}: {exc})", EXIT_UNAVAILABLE
        )
    except KeyboardInterrupt:
        pass


def main() -> None:
    """Console entry point: click's own failures are one line too (no usage block)."""
    try:
        code = cli.main(prog_name="usher", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "usher"
        fail(f"{exc.format_message()} (see {where} --help)", EXIT_USAGE)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
    except click.Abort:
        fail("interrupted", EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
