"""minSuccess: a job that declares that N succeeded pods mean success (Volcano's minSuccess).

What it does: reads the ``usher.io/min-success`` annotation of any job kind (``declared``),
says what is wrong with it (``problems``: not a positive integer, or more pods than the job
has), and, given how many of the job's pods succeeded, whether it has succeeded by it
(``reached``). A kind's ``outcome`` asks ``reached`` first: once N pods succeeded the job has
succeeded, whatever its other pods still do (they are stopped), so the answer never changes
afterwards.
What it must never do: do I/O, read a clock, or count pods itself (each kind's module says how
many of its pods succeeded).
"""

from __future__ import annotations

from typing import Any

from schemas import FieldError
from usher.core.kinds.family import Outcome
from usher.core.kinds.fields import annotation, annotations_of, error
from usher.core.values.registry import MIN_SUCCESS

MIN_SUCCESS_ANNOTATION = MIN_SUCCESS.key
MIN_SUCCESS_PATH = f"metadata.annotations.{MIN_SUCCESS_ANNOTATION}"


def _raw(obj: dict[str, Any]) -> object:
    return annotations_of(obj).get(MIN_SUCCESS_ANNOTATION)


def _number(obj: dict[str, Any], errors: list[FieldError]) -> int | None:
    return annotation(MIN_SUCCESS, obj, errors)


def declared(obj: dict[str, Any]) -> int | None:
    """N of a well-formed ``usher.io/min-success: "N"``; None when absent or malformed (a
    malformed one is rejected on the log: ``problems``)."""
    return _number(obj, [])


def problems(obj: dict[str, Any], most: int | None, kind: str) -> list[FieldError]:
    """What is wrong with the annotation of a job of ``kind`` of which at most ``most`` pods
    can succeed (None: the kind's pods are not counted, so it cannot declare one)."""
    if _raw(obj) is None:
        return []
    refused: list[FieldError] = []
    number = _number(obj, refused)
    if number is None:
        return refused
    if most is None:
        message = f"{MIN_SUCCESS_ANNOTATION} is not supported for kind {kind}"
        return [error(MIN_SUCCESS_PATH, "unsupported", message)]
    if number > most:
        message = (
            f"{MIN_SUCCESS_ANNOTATION} is {number} but at most {most} pod"
            f"{' of the job' if most == 1 else 's of the job'} can succeed: "
            "it could never succeed by it"
        )
        return [error(MIN_SUCCESS_PATH, "out-of-range", message)]
    return []


def reached(obj: dict[str, Any], succeeded: int) -> Outcome | None:
    """Succeeded by its declared minimum, once ``succeeded`` pods reach it."""
    wanted = declared(obj)
    if wanted is None or succeeded < wanted:
        return None
    # No finish time: the pods' own end times are not in the job's status; the log's is used.
    return Outcome(True, None, min_success=wanted)
