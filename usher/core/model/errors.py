"""Typed errors of the pure core: every rejected input says exactly what is wrong and where.

What it does: exceptions that carry ``schemas.FieldError`` lists; all are *permanent* (the same
input fails the same way again), so callers park or report them instead of retrying.
What it must never do: be raised for a transient condition, or carry only a formatted string.
"""

from __future__ import annotations

from schemas import FieldError, WorkloadKey


class InputError(Exception):
    """Base of every rejected input. ``errors`` names each problem with its field path."""

    transient = False

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e.path}: {e.message}" for e in errors))


class QuantityError(InputError):
    """A Kubernetes quantity is malformed, negative or not exact in canonical units."""

    def __init__(self, path: str, value: object, message: str) -> None:
        self.path = path
        self.value = value
        super().__init__([FieldError(path=path, code="invalid-quantity", message=message)])


class TreeInvalid(InputError):
    """An ElasticQuotaTree broke one or more rules of T1 (docs/admission-rules.md); rejected."""


class WorkloadInvalid(InputError):
    """A job manifest is malformed or of a kind Usher does not support."""

    def __init__(self, workload: WorkloadKey, kind: str, errors: list[FieldError]) -> None:
        self.workload = workload
        self.kind = kind
        super().__init__(errors)


class ScenarioError(InputError):
    """A scenario file is malformed (bad structure, unknown action, bad reference)."""


class ValueRefused(InputError):
    """One value at a boundary (a tree attribute, a job annotation, a CLI option) is malformed
    or out of its bounds (``usher.core.values``); ``path`` names the field."""

    def __init__(self, path: str, code: str, message: str) -> None:
        self.path = path
        self.code = code
        self.message = message
        super().__init__([FieldError(path=path, code=code, message=message)])
