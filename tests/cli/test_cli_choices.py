"""Every CLI option naming a policy or a within-quota mode offers exactly the core's choices.

The choice lists come from ``usher.core.model.config`` (the ``Policy`` enum and the within-quota
modes): a command that spells its own list, or misses a new value, fails here.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from usher.cli import cli
from usher.core.model.config import POLICIES, WITHIN_QUOTA_MODES, Policy


def _commands(group: click.Group, ctx: click.Context) -> Iterator[click.Command]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None:
            continue
        yield command
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, parent=ctx, info_name=name))


def _choices(suffix: str) -> list[tuple[str, str, tuple[str, ...]]]:
    ctx = click.Context(cli, info_name="usher")
    found = []
    for command in _commands(cli, ctx):
        for param in command.params:
            if isinstance(param, click.Option) and any(o.endswith(suffix) for o in param.opts):
                assert isinstance(param.type, click.Choice), (command.name, param.opts)
                found.append((str(command.name), param.opts[0], tuple(param.type.choices)))
    return found


def test_policy_choices_are_the_policy_enum() -> None:
    assert tuple(p.value for p in Policy) == POLICIES
    found = _choices("-policy")
    assert len(found) >= 4  # up, run, the history commands' settings, what-if (and baseline)
    assert all(choices == POLICIES for _, _, choices in found), found


def test_within_quota_choices_are_the_core_modes() -> None:
    found = _choices("-within-quota")
    assert len(found) >= 4
    assert all(choices == WITHIN_QUOTA_MODES for _, _, choices in found), found
