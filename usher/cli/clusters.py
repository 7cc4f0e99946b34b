"""``usher cluster list`` and ``usher cluster lost NAME``: the clusters of an installation
of several (M1).

What it does: ``list`` shows each cluster the log spoke of, as the core folds it
(``usher.core.engine.queries.clusters``): connected, disconnected or lost, since when and why,
its zones and how many of its jobs are admitted and waiting. ``domains`` shows each domain of
each topology level the tree names (TP1) with its pinned use and free room, as TP1 counts it
(``queries.domain_use``). ``lost``, as the admin identity,
puts ``ClusterLost`` on the log for a cluster the log knows: its workloads are released as if
deleted (the ledger and every engine read it) and nothing is admitted there until its watcher
connects again. Exit codes as the other people's commands: 0 done, 3 refused (the field
named), 4 nothing to talk to.
What it must never do: guess that a cluster is gone (only an operator knows), publish as
anyone but the admin, or work out a cluster's state itself (the core's fold says it).
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any

import click

from schemas import ClusterLost
from usher.cli import cli
from usher.cli.people import emit, output_option, render_table, run, target_options

if TYPE_CHECKING:
    from usher.client import AsyncClient
    from usher.core.engine.queries import ClusterView, DomainUse


@cli.group("cluster")
def cluster_group() -> None:
    """The clusters of an installation of several (M1)."""


@cluster_group.command("list")
@output_option
@target_options
def list_command(output: str, **options: Any) -> None:
    """Each cluster the log spoke of: its state and since when, its zones, how many of its
    jobs are admitted (they keep counting while it is disconnected) and waiting."""

    async def work(client: AsyncClient) -> list[ClusterView]:
        from usher.core.engine import queries

        return queries.clusters((await client.state()).engine)

    found = run(options, work)

    def table() -> str:
        if not found:
            return "No cluster on the log: no watcher has announced its cluster (ClusterConnected)."
        from usher.core.model.reasons import format_moment

        rows = [
            [
                c.cluster,
                c.state,
                format_moment(c.since_ms),
                ",".join(c.zones) or "-",
                str(c.admitted),
                str(c.pending),
                c.why or "-",
            ]
            for c in found
        ]
        headers = ["CLUSTER", "STATE", "SINCE", "ZONES", "ADMITTED", "PENDING", "WHY"]
        return render_table(headers, rows)

    emit(found, output, table)


@cluster_group.command("domains")
@output_option
@target_options
def domains_command(output: str, **options: Any) -> None:
    """Each domain of each topology level the tree names, per zone (TP1): what pinned
    admissions use of what its nodes allocate, and what is free for a gang."""

    async def work(client: AsyncClient) -> list[DomainUse]:
        from usher.core.engine import queries

        return queries.domain_use((await client.state()).engine)

    found = run(options, work)

    def table() -> str:
        if not found:
            return (
                "No topology domain: the tree names no topology level "
                "(usher.io/topology-levels), or no node carries one."
            )
        from usher.console.pages import domain_rows

        resources, rows = domain_rows(found)
        headers = ["ZONE", "LEVEL", "DOMAIN"]
        for r in resources:
            headers += [f"{r.upper()} used/allocatable", f"{r.upper()} free"]
        cells = []
        for row in rows:
            line = [row.zone, row.level, row.domain]
            for cell in row.cells:
                line += [f"{cell[0]}/{cell[1]}", cell[2]] if cell else ["-", "-"]
            cells.append(line)
        return render_table(headers, cells)

    emit(found, output, table)


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
