"""``usher cluster lost NAME``: an operator declares a cluster lost (M1).

What it does: as the admin identity, puts ``ClusterLost`` on the log for a cluster the log
knows: its workloads are released as if deleted (the ledger and every engine read it) and
nothing is admitted there until its watcher connects again. Exit codes as the other people's
commands: 0 recorded, 3 refused (the field named), 4 nothing to talk to.
What it must never do: guess that a cluster is gone (only an operator knows), or publish as
anyone but the admin.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any

import click

from schemas import ClusterLost
from usher.cli import cli
from usher.cli.people import run, target_options

if TYPE_CHECKING:
    from usher.client import AsyncClient


@cli.group("cluster")
def cluster_group() -> None:
    """The clusters of an installation of several (M1)."""


@cluster_group.command("lost")
@click.argument("name")
@click.option("--by", default=None, help="Who declares it (default: your user name).")
@click.option("--reason", default="", help="Why (shown in the waiting jobs' reasons).")
@target_options
def lost_command(name: str, by: str | None, reason: str, **options: Any) -> None:
    """Declare cluster NAME lost: its jobs stop counting, nothing is admitted there until
    its watcher connects again."""
    who = by or getpass.getuser()

    async def work(client: AsyncClient) -> ClusterLost:
        return await client.declare_cluster_lost(name, by=who, reason=reason)

    recorded = run(options, work)
    why = f": {recorded.reason}" if recorded.reason else ""
    click.echo(
        f"cluster {recorded.cluster} declared lost by {recorded.by}{why}; its jobs are "
        "released, nothing is admitted there until its watcher connects again"
    )
