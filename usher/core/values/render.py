"""The reference page of every ``usher.io/`` key, rendered as Markdown text from the registry.

What it does: ``render_reference`` turns ``SETTINGS`` into the text of
docs/reference/annotations.md -- a summary table, then one section per key with its scope,
default, inheritance, rule, bounds and an example. ``python -m usher.cli.reference_docs``
(``make reference``) writes it; a test checks the committed page equals it.
What it must never do: write a file or do any other I/O (the writer is in ``usher.cli``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from usher.core.values.registry import SETTINGS, Setting

PAGE_PATH: Final = "docs/reference/annotations.md"
"""Where the page lives in the repository."""

_WHERE: Final = {
    "tree": "tree node attribute",
    "job": "job annotation",
    "both": "tree node attribute and job annotation",
}


def render_reference(settings: Sequence[Setting[Any]] = SETTINGS) -> str:
    """The whole page, ending with one newline."""
    lines = [
        "# `usher.io/` tree attributes and job annotations",
        "",
        "<!-- Generated from usher/core/values/registry.py by `make reference`;",
        "     do not edit by hand. -->",
        "",
        "Every key Usher reads. Tree attributes are set under a node's `attributes` in the",
        "ElasticQuotaTree; job annotations under a job's `metadata.annotations`. Values are",
        "strings (quote numbers in YAML), read strictly: ASCII digits only, no surrounding spaces,",
        "finite numbers within the bounds below. A tree with a value out of bounds is refused as",
        "a whole (the previous tree stays in force) naming the field; a job is rejected",
        "(`WorkloadRejected`) naming the annotation.",
        "",
        "| Key | Where | Kind | Default | Inherited | Rule |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for entry in settings:
        lines.append(
            f"| [`{entry.key}`](#{_anchor(entry.key)}) | {entry.scope} | {entry.kind} | "
            f"{_default(entry)} | {'yes' if entry.inherited else 'no'} | {entry.rule} |"
        )
    for entry in settings:
        lines += [
            "",
            f"## {entry.key}",
            "",
            entry.summary,
            "",
            f"- Where: {_WHERE[entry.scope]}",
            f"- Kind: {entry.kind}",
            f"- Accepted: {entry.bounds}",
            f"- Default: {_default(entry)}",
            f"- Inherited down the tree: {'yes' if entry.inherited else 'no'}",
            f"- Rule: {entry.rule}",
            f'- Example: `{entry.key}: "{entry.example}"`',
        ]
    return "\n".join(lines) + "\n"


def _default(entry: Setting[Any]) -> str:
    return f"`{entry.default}`" if entry.default is not None else "none"


def _anchor(key: str) -> str:
    """GitHub's heading anchor of ``## <key>``: lower case, ``.`` and ``/`` dropped."""
    return "".join(c for c in key.lower() if c.isalnum() or c in "-_")
