"""The ``usher`` console script's first step: light, so that Ctrl-C is never a traceback.

What it does: imports the command line (about a second of imports) and runs it; a Ctrl-C
that comes before the command has set its own handling (during those imports) ends the
process with exit 130 and one line.
What it must never do: import anything heavy itself, or swallow any other exception.
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130


def main() -> None:
    """Run ``usher.cli.main``; an early Ctrl-C is one line and exit 130."""
    try:
        from usher.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("usher: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
