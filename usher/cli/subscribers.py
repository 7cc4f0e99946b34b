"""``usher subscriber NAME``: an identity for another system that reads the decision stream.

What it does: mints ``subscriber-NAME`` on the running ``usher up`` (usher/local/subscribers.py)
and says how to connect: the file holding the NATS URL with its password, the stream, the
subjects, the durable consumer's name and the inbox prefix its client must use
(docs/how-to/subscribe.md). Exit 4 when no stack runs in the data folder; 2 for a bad name.
What it must never do: print a password.
"""

from __future__ import annotations

from pathlib import Path

import click

from usher.adapters.stack_file import usher_home
from usher.cli import EXIT_UNAVAILABLE, cli, fail, home_option
from usher.local.subscribers import NoStack, mint


@cli.command("subscriber")
@click.argument("name")
@home_option()
def subscriber_command(name: str, home: Path | None) -> None:
    """Mint (or show again) the NATS identity of consuming system NAME on the local stack."""
    folder = home or usher_home()
    try:
        access = mint(folder, name)
    except FileNotFoundError:
        fail(f"no Usher is running in {folder} (no stack.json): start one with `usher up`", 4)
    except NoStack as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    except ValueError as exc:
        fail(str(exc), 2)
    click.echo(f"NATS user       {access.user}")
    click.echo(f"URL (secret)    {access.url_file}   (export NATS_URL=$(cat {access.url_file}))")
    click.echo(f"stream          {access.stream}")
    click.echo(f"subjects        {access.subjects}")
    click.echo(f"durable         {access.durable}   (the one consumer it may ack and delete)")
    click.echo(f"inbox prefix    {access.inbox_prefix}")
