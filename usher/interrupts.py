"""How Ctrl-C reaches a command: remembered as well as raised.

What it does: ``remember`` only notes a SIGINT (while the command line imports);
``remember_and_raise`` notes it and raises ``KeyboardInterrupt`` as Python's own handler does;
``interrupted`` says whether one came. A ``KeyboardInterrupt`` raised where Python ignores
exceptions (a ``__del__``, a garbage-collection or after-fork callback, a bare ``except:`` of
a library) is lost; the note is not, so a command that sets its own handling later (``usher
up``) still sees the Ctrl-C that came before.
What it must never do: import anything but the standard library's ``signal`` (it runs before
the command line is imported), or decide what a command does about a Ctrl-C.
"""

from __future__ import annotations

from typing import Any

_received: list[int] = []


def remember(signum: int, _frame: Any) -> None:
    """Note a signal, raise nothing."""
    _received.append(signum)


def remember_and_raise(signum: int, _frame: Any) -> None:
    """Note a signal and raise ``KeyboardInterrupt``, as Python's default SIGINT handler."""
    _received.append(signum)
    raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether a SIGINT has come since the process started."""
    return bool(_received)
