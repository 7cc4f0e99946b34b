"""Typed failures of the Usher client: each one is a sentence a person can act on.

What it does: one exception class per thing a caller decides on: nothing to talk to
(``NotRunning``), a bad file, manifest or option (``BadInput``, with one line per problem), an
object the Kubernetes API already has (``AlreadyExists``, a ``BadInput`` naming it), an object
that does not exist (``NotFound``), a refusal by the Kubernetes API (``Refused``), and a wait
that ran out of time (``WaitTimeout``).
What it must never do: carry a secret (URLs are redacted before they get here) or a traceback
meant for people.
"""

from __future__ import annotations


class ClientError(Exception):
    """Base of every client failure; ``lines`` are what a person should read."""

    def __init__(self, message: str, lines: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.lines = lines or [message]


class NotRunning(ClientError):
    """No Usher to talk to: no ``stack.json`` and no addresses given, or a server is down."""


class BadInput(ClientError):
    """A file, manifest or option is wrong; ``lines`` name each problem with its place."""


class AlreadyExists(BadInput):
    """A create the Kubernetes API answered 409 ``AlreadyExists``: an object of that ``kind``
    (``Job``, ``TFJob``...) and ``name`` is already in ``namespace``. A ``BadInput`` (what it
    was before it had a type of its own), so callers that catch that keep working; a script run
    again catches this one to know its job is there (never by reading the message)."""

    def __init__(self, message: str, *, kind: str, namespace: str, name: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.namespace = namespace
        self.name = name


class NotFound(ClientError):
    """A job, queue or namespace that Usher does not know."""


class Refused(ClientError):
    """The Kubernetes API refused a request (the server's reason is in the message)."""


class WaitTimeout(ClientError):
    """A job did not reach the awaited state in time; ``job`` is its last known state."""

    def __init__(self, message: str, job: object | None = None) -> None:
        super().__init__(message)
        self.job = job


class GroupIncomplete(ClientError):
    """A fan-out stopped part-way (an API failure, or Ctrl-C): ``created`` are the jobs the
    Kubernetes API accepted (``namespace/name``), ``not_created`` the ones never sent; nothing
    else was sent. ``interrupted`` is True for Ctrl-C (a cancelled call), else ``cause`` is the
    failure that stopped it. ``lines`` say all of it, and how to finish or undo the group."""

    def __init__(
        self,
        group: str,
        created: list[str],
        not_created: list[str],
        *,
        interrupted: bool,
        cause: ClientError | None = None,
    ) -> None:
        total = len(created) + len(not_created)
        why = "interrupted" if interrupted else f"stopped: {cause.message if cause else 'failed'}"
        lines = [
            f"group {group}: {why}",
            f"created {len(created)} of {total} jobs: {_listed(created)}",
            f"not created {len(not_created)} of {total}: {_listed(not_created)}",
            f"group {group}: {len(created)} of {total} jobs created; undo with `usher delete"
            f" --group {group}`, or follow them with `usher wait --group {group}`",
        ]
        super().__init__(lines[-1], lines)
        self.group = group
        self.created = created
        self.not_created = not_created
        self.interrupted = interrupted
        self.cause = cause


def _listed(keys: list[str], most: int = 20) -> str:
    """``a, b, c`` (the first ``most`` and how many more), or ``none``."""
    if not keys:
        return "none"
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return ", ".join(keys[:most]) + more
