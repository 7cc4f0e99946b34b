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
from typing import Any

import click

from usher.adapters.embedded.processes import ServerStartError
from usher.adapters.embedded.stack import EmbeddedStack, usher_home
from usher.adapters.logs import configure, redact_url

EXIT_OK = 0
EXIT_DIFFERENCES = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_UNAVAILABLE = 4


def fail(message: str, code: int) -> None:
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


def main() -> None:
    """Console entry point."""
    cli()


if __name__ == "__main__":
    main()
