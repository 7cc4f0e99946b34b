"""The generated reference pages (command line, metrics, schemas) are committed fresh: each
equals what ``usher.cli.reference_docs`` renders from the code, as ``make reference`` writes it.
A changed click option, metric declaration or wire field therefore fails here until the pages
are written again."""

from __future__ import annotations

import re

import click
import pytest

from tests.conftest import REPO
from usher.cli import cli
from usher.cli.reference_docs import (
    link_rules,
    render_all_pages,
    render_cli,
    render_metrics,
    rule_names,
)

DOCS = REPO / "docs"


@pytest.mark.parametrize("relative", sorted(render_all_pages()))
def test_committed_reference_page_is_current(relative: str) -> None:
    on_disk = (DOCS / relative).read_text(encoding="utf-8")
    assert on_disk == render_all_pages()[relative], f"run `make reference`: {relative} is stale"


def test_every_command_is_on_the_cli_page() -> None:
    page = render_cli()
    ctx = click.Context(cli, info_name="usher")
    for name in cli.list_commands(ctx):
        assert f"\n## usher {name}\n" in page


def test_a_new_option_changes_the_cli_page() -> None:
    command = cli.get_command(click.Context(cli), "quota")
    assert command is not None
    before = render_cli()
    extra = click.Option(["--brand-new-flag"], is_flag=True, help="Only in this test.")
    command.params.append(extra)
    try:
        assert "--brand-new-flag" in render_cli() != before
    finally:
        command.params.remove(extra)


def test_every_metric_family_appears_once_with_its_labels() -> None:
    page = render_metrics()
    rows = re.findall(r"^\| `(usher_\w+)` \| (\w+) \| ([^|]*) \|", page, flags=re.M)
    names = [name for name, _, _ in rows]
    assert len(names) == len(set(names))
    assert ("usher_preemptions_total", "counter", "`reason`") in rows
    assert "usher_admission_wait_seconds" in names


def test_rule_codes_are_written_with_their_name_and_linked() -> None:
    rules = rule_names(DOCS)
    assert rules["R10"] == ("r10", "readiness and requeue")
    text = link_rules("held (R14/R15), X9 and ZZ1 unknown", rules)
    assert text == (
        "held ([R14 hold](../admission-rules.md#r14)/[R15 drain](../admission-rules.md#r15)),"
        " X9 and ZZ1 unknown"
    )
