"""``usher console``: the read-only web console over the log, in the foreground.

What it does: finds the installation as every people command does (``--home``, ``--nats``,
``--prefix``, else ``USHER_*`` variables, else the running stack's ``stack.json``), then
serves ``usher.console`` on ``--host``/``--port`` (127.0.0.1:8470 by default) until SIGTERM
or Ctrl-C. ``usher up`` runs it as a process of its own and prints its URL.
What it must never do: listen beyond loopback unless asked with ``--host``, print a secret,
or import the web server before the command runs (``usher --version`` stays fast).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from usher.adapters.stack_file import CONSOLE_PORT
from usher.cli import EXIT_UNAVAILABLE, EXIT_USAGE, cli, fail, home_option
from usher.core.model.config import POLICIES


@cli.command("console")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    default=CONSOLE_PORT,
    show_default=True,
    help="Port to listen on.",
)
@click.option("--nats", "nats_url", default=None, help="NATS of a real installation (read-only).")
@click.option("--prefix", default=None, help="Subject prefix (default usher).")
@click.option(
    "--policy",
    type=click.Choice(POLICIES),
    default=None,
    help="The installation's policy (default: the stack's).",
)
@click.option(
    "--startup-timeout",
    "startup_timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    envvar="USHER_STARTUP_TIMEOUT_SECONDS",
    help="Seconds to reach NATS at start, as the services ($USHER_STARTUP_TIMEOUT_SECONDS).",
)
@click.option(
    "--listen-fd",
    type=click.IntRange(min=3),
    default=None,
    hidden=True,
    help="A listening socket inherited from `usher up` (it holds the port), instead of --port.",
)
@home_option("Folder of the running `usher up` (default $USHER_HOME).")
def console_command(
    host: str,
    port: int,
    nats_url: str | None,
    prefix: str | None,
    policy: str | None,
    startup_timeout_s: float,
    listen_fd: int | None,
    home: Path | None,
) -> None:
    """Serve the read-only web console: quota tree, queues, jobs' stories, live decisions,
    charts and time travel, all folded from the log."""
    from usher.client.errors import ClientError, NotRunning
    from usher.client.target import resolve_target

    try:
        target = resolve_target(home=home, nats_url=nats_url, prefix=prefix, policy=policy)
        target.need_nats()
    except NotRunning as exc:
        fail(exc.message, EXIT_UNAVAILABLE)
    except ClientError as exc:  # a bad setting (policy, oversell rate)
        fail(exc.message, EXIT_USAGE)
    from usher.console.server import serve

    def say(line: str) -> None:
        click.echo(line)

    import socket

    try:
        listening = None if listen_fd is None else socket.socket(fileno=listen_fd)
        asyncio.run(
            serve(
                target,
                host,
                port,
                say=say,
                startup_timeout_s=startup_timeout_s,
                listening=listening,
            )
        )
    except OSError as exc:
        fail(f"console: cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_UNAVAILABLE)
    except ClientError as exc:
        fail(exc.message, EXIT_UNAVAILABLE)
    except KeyboardInterrupt:
        pass
