"""The ``usher`` console script's first step: light, so that Ctrl-C is never a traceback.

What it does: imports the command line (about a second of imports) and runs it; a Ctrl-C
that comes during those imports, before the command has set its own handling, ends the
process with exit 130 and one line. During the imports SIGINT only sets a flag, checked once
they are done: a ``KeyboardInterrupt`` raised in the middle of a third-party import could be
swallowed by a bare ``except:`` there, and the command would then start as if never
interrupted. Ctrl-C and SIGTERM work however the process was started: a SIGINT ignored or
a signal blocked by the parent (both survive exec: a script's background job, a thread that
blocks signals) would otherwise be lost until ``usher up`` sets its own handling. After the
imports a Ctrl-C raises as usual and is also noted (``usher.interrupts``), so one raised
where Python ignores exceptions is still seen when ``usher up`` sets its own handling.
What it must never do: import anything heavy itself, or swallow any other exception.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import NoReturn

from usher import interrupts

EXIT_INTERRUPTED = 130


def _stop_interrupted() -> NoReturn:
    sys.stderr.write("usher: interrupted\n")
    _exit_interrupted()


def _exit_interrupted() -> NoReturn:
    """Exit 130 now, streams and log handlers flushed. Not through the interpreter's
    finalisation: a Ctrl-C whose ``KeyboardInterrupt`` an ignored context swallowed can make
    it end the process by SIGINT instead (seen: "usher: interrupted", then exit -2)."""
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(EXIT_INTERRUPTED)


def kubectl_main() -> None:
    """``kubectl-usher``: ``usher`` for the installation of the kubeconfig's context
    (``usher.cli.kubectl``), so that ``kubectl usher jobs --context prod`` works as a plugin."""
    main(kubectl_plugin=True)


def _as_kubectl_plugin() -> None:
    """Take kubectl's flags out of ``sys.argv`` and point the environment at the context's
    installation; a context that names none is one line and its exit code."""
    from usher.cli.kubectl import PluginError, environment_for

    try:
        argv, env = environment_for(sys.argv[1:], os.environ)
    except PluginError as exc:
        sys.stderr.write(f"usher: {exc.message}\n")
        sys.exit(exc.code)
    sys.argv[1:] = argv
    for name in set(os.environ) - set(env):
        del os.environ[name]
    os.environ.update(env)


def main(*, kubectl_plugin: bool = False) -> None:
    """Run ``usher.cli.main``; an early Ctrl-C is one line and exit 130."""
    signal.signal(signal.SIGINT, interrupts.remember)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        from usher.cli import main as cli_main

        if kubectl_plugin:
            _as_kubectl_plugin()
    except KeyboardInterrupt:
        _stop_interrupted()
    signal.signal(signal.SIGINT, interrupts.remember_and_raise)
    if interrupts.interrupted():
        _stop_interrupted()
    try:
        cli_main()
    except KeyboardInterrupt:
        _stop_interrupted()
    except SystemExit as exc:
        if exc.code == EXIT_INTERRUPTED:
            _exit_interrupted()
        raise
