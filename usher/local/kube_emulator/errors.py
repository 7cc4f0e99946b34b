"""The failures of the Kubernetes API emulator, as the real API server reports them.

What it does: ``ApiError`` carries an HTTP code, a reason and a message and renders the
``Status`` object; the constructors build the ones the server sends (NotFound, AlreadyExists,
Conflict, Invalid, BadRequest, Expired) with the real server's wording and details.
What it must never do: decide when a request fails (the store and the server do) or do I/O.
"""

from __future__ import annotations

from typing import Any

from usher.local.kube_emulator.resources import ResourceType
from usher.local.kube_emulator.wire import JsonObj


class ApiError(Exception):
    """A failure the API server reports as a ``Status`` object with an HTTP code."""

    def __init__(
        self, code: int, reason: str, message: str, details: JsonObj | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> JsonObj:
        body: JsonObj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    """The ``details`` of a Status about one named object, as the real server fills them."""
    return {"name": name, "group": rt.group, "kind": rt.plural}


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{rt.group_resource} "{name}" not found',
        _details(rt, name),
    )


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{rt.group_resource} "{name}" already exists',
        _details(rt, name),
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
        _details(rt, name),
    )


def stale_conflict(rt: ResourceType, name: str) -> ApiError:
    return conflict(
        rt,
        name,
        "the object has been modified; please apply your changes to the latest version "
        "and try again",
    )


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422: ``causes`` are (reason, field, message) like ``FieldValueRequired``."""
    text = ", ".join(f"{f}: {m}" for _, f, m in causes)
    if len(causes) > 1:  # an aggregate of several field errors, as apimachinery prints one
        text = f"[{text}]"
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes],
        },
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
