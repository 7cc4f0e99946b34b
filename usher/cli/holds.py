"""``usher hold | drain | resume NODE``: an operator's order on a quota node (R14, R15).

What it does: asks the ledger, as the admin identity, to hold a node or queue (nothing new
is admitted below it; running work goes on), to drain it (hold, then preempt the running
work below it once ``--grace`` has passed) or to resume it; prints what the ledger recorded.
NODE is a quota path (``root/research``), a node name or a queue name. Exit codes as the
other people's commands: 0 recorded, 3 refused (the field named), 4 nothing to talk to.
What it must never do: decide anything itself (the ledger judges and records the order) or
claim who asks (the ledger knows it from the identity).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from schemas import HoldAction, NodeHeld, NodeResumed
from usher.cli import EXIT_USAGE, cli, fail
from usher.cli.people import run, target_options

if TYPE_CHECKING:
    from usher.client import AsyncClient

_DURATION = re.compile(r"(-?[0-9]+)([smh]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


def grace_seconds(text: str | None) -> int | None:
    """``--grace`` as whole seconds: ``90``, ``90s``, ``15m``, ``2h`` (a negative one is the
    ledger's to refuse, naming the field); None when not given."""
    if text is None:
        return None
    matched = _DURATION.fullmatch(text.strip())
    if matched is None:
        fail(f"--grace: expected seconds or a duration like 90s, 15m, 2h; got {text!r}", EXIT_USAGE)
    return int(matched.group(1)) * _UNIT_SECONDS[matched.group(2)]


def _order(action: HoldAction, node: str, reason: str, grace: int | None, options: Any) -> None:
    async def work(client: AsyncClient) -> NodeHeld | NodeResumed:
        return await client.order_hold(action, node, reason=reason, grace_seconds=grace)

    recorded = run(options, work)
    click.echo(describe(recorded))


def describe(event: NodeHeld | NodeResumed) -> str:
    """One line for people: what the ledger recorded."""
    why = f": {event.reason}" if event.reason else ""
    if isinstance(event, NodeResumed):
        return f"{event.node} resumed by {event.by}{why}"
    if event.mode == "Hold":
        return f"{event.node} held by {event.by}{why}; running work goes on"
    return (
        f"{event.node} drained by {event.by}{why}; running work below it is preempted "
        f"after {event.grace_seconds} s"
    )


_REASON = click.option("--reason", default="", help="Why (shown in every pending reason).")


@cli.command("hold")
@click.argument("node")
@_REASON
@target_options
def hold_command(node: str, reason: str, **options: Any) -> None:
    """Admit nothing new below NODE (a quota path, node name or queue); running work goes on."""
    _order("Hold", node, reason, None, options)


@cli.command("drain")
@click.argument("node")
@_REASON
@click.option(
    "--grace",
    default=None,
    help="Before the running work is preempted: 90, 90s, 15m, 2h "
    "(default: the node's usher.io/drain-grace-seconds, else 0).",
)
@target_options
def drain_command(node: str, reason: str, grace: str | None, **options: Any) -> None:
    """Hold NODE, then preempt the work running below it once the grace has passed."""
    _order("Drain", node, reason, grace_seconds(grace), options)


@cli.command("resume")
@click.argument("node")
@_REASON
@target_options
def resume_command(node: str, reason: str, **options: Any) -> None:
    """Lift the hold or drain ordered on NODE: its queues admit again, in their order."""
    _order("Resume", node, reason, None, options)
