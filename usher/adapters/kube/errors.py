"""Typed failures of the Kubernetes API, built from the server's ``Status`` objects.

What it does: turns an HTTP error (or a watch ``ERROR`` event, or a broken connection) into one
exception class per thing a caller decides on: ``NotFound``, ``Conflict`` (and
``AlreadyExists``), ``Invalid`` (with the server's field causes), ``WatchExpired`` (410 Gone:
re-list), ``Transient`` (5xx, 429, connection trouble: retry later) and ``Permanent`` (any other
refusal: retrying the same request cannot help). Each carries the code, reason, message and
details the server sent.
What it must never do: hide the server's message, or classify a refusal as transient (a
permanent error retried forever is a stuck service).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

JsonObj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Cause:
    """One field-level reason of an ``Invalid`` answer (``details.causes`` of the Status)."""

    field: str
    reason: str
    message: str


class KubeError(Exception):
    """Base of every failure of a Kubernetes request."""

    transient = False

    def __init__(
        self, code: int, reason: str, message: str, details: JsonObj | None = None
    ) -> None:
        super().__init__(f"{code} {reason}: {message}" if code else f"{reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    @property
    def name(self) -> str | None:
        """The object the server said this is about, when it said."""
        value = self.details.get("name")
        return value if isinstance(value, str) else None


class NotFound(KubeError):
    """404: the object (or the route: a resource the server does not serve) does not exist."""


class Conflict(KubeError):
    """409: the object changed since it was read (optimistic concurrency); re-read and retry."""


class AlreadyExists(Conflict):
    """409 AlreadyExists: a create found an object of that name."""


class Invalid(KubeError):
    """422: the server refused the object; ``causes`` name each bad field."""

    @property
    def causes(self) -> list[Cause]:
        raw = self.details.get("causes")
        if not isinstance(raw, list):
            return []
        return [
            Cause(
                field=str(item.get("field", "")),
                reason=str(item.get("reason", "")),
                message=str(item.get("message", "")),
            )
            for item in raw
            if isinstance(item, dict)
        ]


class WatchExpired(KubeError):
    """410 Gone/Expired: the resourceVersion (or continue token) is too old; list again."""


class Transient(KubeError):
    """5xx, 429 or a connection failure: the same request may well succeed later."""

    transient = True


class Permanent(KubeError):
    """Any other refusal (400, 401, 403, 405, 415...): retrying the same request cannot help."""


def error_from_status(code: int, status: object) -> KubeError:
    """The typed error for HTTP ``code`` and the ``Status`` body the server sent (if any)."""
    body: JsonObj = status if isinstance(status, dict) else {}
    code = int(body.get("code") or code)
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or "") or "no message"
    details = body.get("details") if isinstance(body.get("details"), dict) else None
    return _error_class(code, reason)(code, reason or _default_reason(code), message, details)


def error_from_body(code: int, raw: bytes) -> KubeError:
    """Like ``error_from_status`` for a raw response body that may not be JSON at all."""
    try:
        status = json.loads(raw or b"null")
    except ValueError:
        text = raw.decode("utf-8", "replace").strip()[:500]
        return _error_class(code, "")(code, _default_reason(code), text or "no message")
    return error_from_status(code, status)


def _error_class(code: int, reason: str) -> type[KubeError]:
    if code == 404:
        return NotFound
    if code == 409:
        return AlreadyExists if reason == "AlreadyExists" else Conflict
    if code == 410:
        return WatchExpired
    if code == 422:
        return Invalid
    if code == 429 or code >= 500 or code == 0:
        return Transient
    return Permanent


def _default_reason(code: int) -> str:
    return {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        410: "Expired",
        415: "UnsupportedMediaType",
        422: "Invalid",
        429: "TooManyRequests",
    }.get(code, "InternalError" if code >= 500 else "Unknown")
