"""The ``usher`` console script's first step: light, so that Ctrl-C is never a traceback.

What it does: imports the command line (about a second of imports) and runs it; a Ctrl-C
that comes during those imports, before the command has set its own handling, ends the
process with exit 130 and one line. During the imports SIGINT only sets a flag, checked once
they are done: a ``KeyboardInterrupt`` raised in the middle of a third-party import could be
swallowed by a bare ``except:`` there, and the command would then start as if never
interrupted. Ctrl-C and SIGTERM work however the process was started: a SIGINT ignored or
a signal blocked by the parent (both survive exec: a script's background job, a thread that
blocks signals) would otherwise be lost until ``usher up`` sets its own handling.
What it must never do: import anything heavy itself, or swallow any other exception.
"""

from __future__ import annotations

import signal
import sys
from typing import Any, NoReturn

EXIT_INTERRUPTED = 130

_interrupted: list[int] = []


def _remember(signum: int, _frame: Any) -> None:
    _interrupted.append(signum)


def _stop_interrupted() -> NoReturn:
    sys.stderr.write("usher: interrupted\n")
    sys.exit(EXIT_INTERRUPTED)


def main() -> None:
    """Run ``usher.cli.main``; an early Ctrl-C is one line and exit 130."""
    signal.signal(signal.SIGINT, _remember)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        from usher.cli import main as cli_main
    except KeyboardInterrupt:
        _stop_interrupted()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if _interrupted:
        _stop_interrupted()
    try:
        cli_main()
    except KeyboardInterrupt:
        _stop_interrupted()
