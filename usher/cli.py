"""The ``usher`` command line: the outermost layer, for people and scripts.

What it does: parses arguments, loads files, calls the core, adapters and services, prints
tables (or JSON), and maps every known error to one clear line and a meaningful exit code.
What it must never do: hold decision logic, or show a traceback for bad input.
"""

from __future__ import annotations

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


def main() -> None:
    """Console entry point."""
    cli()


if __name__ == "__main__":
    main()
