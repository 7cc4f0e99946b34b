"""Logging for every Usher process, configured once with structlog.

What it does: JSON lines on stderr (key=value with colours when stderr is a TTY), with the
bound context (service, job, queue, quota ids) on every line; credentials are scrubbed.
What it must never do: print a secret (URLs are logged with their password removed).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO, cast

_CONFIGURED = False
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@", re.I)
_SECRET_KEYS = {"password", "token", "secret", "authorization", "creds", "credentials"}


def redact_url(url: str) -> str:
    """``scheme://user:pw@host`` -> ``scheme://user:***@host``."""
    return _URL_PASSWORD.sub(r"\g<scheme>\g<user>:***@", url)


def _scrub_secrets(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in list(event.items()):
        if key.lower() in _SECRET_KEYS:
            event[key] = "***"
        elif isinstance(value, str) and "://" in value:
            event[key] = redact_url(value)
    return event


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is now, not the one seen at configure time.

    Loggers are cached on first use; a file object captured then may be closed later (test
    runners swap stderr per test, daemons redirect it), and logging must never crash a loop.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "INFO", *, json: bool | None = None) -> None:
    """Configure structlog and stdlib logging; idempotent. ``json=None``: JSON unless a TTY."""
    import structlog  # here, not at the top: a command that never logs skips its 0.1 s

    global _CONFIGURED
    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _scrub_secrets,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(name)s %(message)s")
    _CONFIGURED = True


def get_logger(**bound: Any) -> Any:
    """A structlog logger with ``bound`` ids (service, workload, queue, quota...)."""
    import structlog

    if not _CONFIGURED:
        configure()
    return structlog.get_logger().bind(**bound)
