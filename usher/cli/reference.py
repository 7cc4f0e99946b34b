"""Writes docs/reference/annotations.md from the registry of ``usher.io/`` keys.

What it does: ``python -m usher.cli.reference`` (``make reference``) renders the page with
``usher.core.values.render`` and writes it under the repository root (or the directory given);
a test checks the committed page equals the rendered one.
What it must never do: render anything itself (the core renders; this only writes).
"""

from __future__ import annotations

import sys
from pathlib import Path

from usher.core.values.render import PAGE_PATH, render_reference


def write_reference(root: Path) -> Path:
    """Write the page under ``root``; return its path."""
    target = root / PAGE_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_reference(), encoding="utf-8")
    return target


if __name__ == "__main__":
    print(write_reference(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()))
