"""The ``usher`` command line: the outermost layer, for people and scripts.

What it does: parses arguments, loads files, calls the core, adapters and services, prints
tables (or JSON), and maps every known error to one clear line and a meaningful exit code.
What it must never do: hold decision logic, or show a traceback for bad input.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

import click
import yaml

from usher.adapters.embedded.processes import ServerStartError
from usher.adapters.embedded.stack import EmbeddedStack, usher_home
from usher.adapters.logs import configure, redact_url
from usher.core import sim as simulator
from usher.core.errors import InputError

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

EXIT_OK = 0
EXIT_DIFFERENCES = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_UNAVAILABLE = 4


def fail(message: str, code: int) -> NoReturn:
    """Print one line on stderr and exit with ``code`` (no traceback)."""
    click.echo(f"usher: {message}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="usher")
def cli() -> None:
    """Usher: an event-sourced, multi-tenant job queue for Kubernetes batch work."""


@cli.command()
@click.option("--home", type=click.Path(path_type=Path), default=None,
              help="Data folder (default $USHER_HOME or ~/.usher).")  # fmt: skip
def up(home: Path | None) -> None:
    """Start the embedded stack (NATS JetStream, PostgreSQL) and run until Ctrl-C."""
    configure()
    home = home or usher_home()
    stack = EmbeddedStack(home)
    stopping = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        info = stack.start()
    except ServerStartError as exc:
        fail(f"{exc.name} did not start: {exc.reason} (logs in {home / 'logs'})",
             EXIT_UNAVAILABLE)  # fmt: skip
        return
    click.echo(f"Usher embedded stack is up (data in {info.home})")
    click.echo(f"  NATS JetStream  {info.nats_url}")
    click.echo(f"  PostgreSQL      {redact_url(info.database_url)}")
    click.echo(f"  stack file      {home / 'stack.json'}")
    click.echo("Press Ctrl-C to stop.", nl=True)
    sys.stdout.flush()
    try:
        while not stopping.wait(0.5):
            for name, server in (("nats", stack.nats), ("postgres", stack.postgres)):
                if server.process is not None and not server.process.running():
                    click.echo(f"usher: {name} exited unexpectedly; stopping", err=True)
                    stopping.set()
    finally:
        stack.stop()
        click.echo("Stopped.")


def load_yaml_file(path: Path) -> Any:
    """Read and parse a YAML file, turning every failure into one clear line and exit 3."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{path}: no such file", EXIT_BAD_INPUT)
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        fail(f"{path}: cannot read ({exc.__class__.__name__})", EXIT_BAD_INPUT)
    try:
        return yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        fail(f"{path}:{where}: invalid YAML: {problem}", EXIT_BAD_INPUT)


def report_input_error(source: str, exc: InputError) -> None:
    """One line per problem, each naming the field path."""
    for error in exc.errors:
        where = f"{error.path}: " if error.path else ""
        message = error.message.removeprefix(f"{source}: ")
        click.echo(f"usher: {source}: {where}{message} [{error.code}]", err=True)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per file.")
@click.option("--check", is_flag=True, help="Compare with the file's expect: block.")
def sim(files: tuple[Path, ...], as_json: bool, check: bool) -> None:
    """Play scenario FILES through the admission core (no cluster, no servers).

    Exit 0 when every file ran (and, with --check, matched its expect: block); 1 when some
    outcome differs from expect:; 3 when a file is missing or malformed.
    """
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


SERVICES = ("watcher", "ledger", "dequeuer", "preemptor")


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
@click.option("--policy", type=click.Choice(["Round", "Block"]), default=None)
@click.option("--oversell-rate", default=None, help="max x rate is the cap (default 1).")
@click.option("--within-quota", type=click.Choice(["Never", "LowerPriority"]), default=None)
@click.option(
    "--min-runtime",
    "min_runtime_s",
    type=float,
    default=None,
    help="Seconds an admitted workload is protected from reclaim.",
)
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
    settle_ms: int | None,
) -> None:
    """Run one SERVICE in the foreground until SIGTERM or Ctrl-C.

    Settings come from the options, else USHER_* variables, else the running embedded
    stack's stack.json. Every service of one installation must use the same policy,
    oversell rate and within-quota setting.
    """
    from services.common.runtime import run_service
    from services.common.settings import SettingsError, load_settings

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
    except OSError as exc:
        fail(
            f"{service}: cannot reach a server ({exc.__class__.__name__}: {exc})", EXIT_UNAVAILABLE
        )
    except KeyboardInterrupt:
        pass


def main() -> None:
    """Console entry point."""
    cli()

