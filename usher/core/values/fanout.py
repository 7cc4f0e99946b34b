"""Fan-out values: one job per day of a range, or per value of a list (``usher submit --for-each``).

What it does: ``day`` reads one ``YYYY-MM-DD`` day, ``day_range`` a range ``FIRST..LAST`` (both
included), ``calendar`` the text of a calendar file (one day a line, ``#`` comments, blank lines),
and ``days`` turns a range (weekdays only, or only the calendar's days) into a ``FanOut``;
``for_each`` reads ``VAR=v1,v2,...`` into one. A ``FanOut`` holds the environment variable every
job gets, the values in order, and for each value its ``tag``: the name- and label-safe form
(``2026-01-05``, ``lr-0-1``) that ends the job's name and is its ``usher.io/fan-out-value``.
``member_name`` joins a base name and a tag within Kubernetes' 63 characters. Every count is
capped at ``MAX_FAN_OUT`` before anything is enumerated. Each raises ``ValueRefused`` naming the
field.
What it must never do: read a clock or a file, enumerate an unbounded range, guess a date format,
give two values the same tag, or do I/O.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Final

import msgspec

from usher.core.model.errors import ValueRefused
from usher.core.values.names import LABEL_RULE, MAX_LABEL, dns_label
from usher.core.values.shown import shown

MAX_FAN_OUT: Final = 10_000
"""The most jobs one fan-out creates. Wider work is one Indexed Job whose pods read
``JOB_COMPLETION_INDEX`` (docs/how-to/fan-out.md)."""
MAX_VALUE_CHARS: Final = 253
"""The longest value of ``--for-each`` (it goes into an environment variable)."""
MAX_CALENDAR_CHARS: Final = 1_000_000
"""The longest calendar file text read (a century of days is 400 KB)."""
MAX_TAG: Final = 40
"""The longest tag: a base name of up to 22 characters still fits Kubernetes' 63."""
DAY_VARIABLE: Final = "DAY"
"""The environment variable of ``--for-each-day`` when the option names none."""

_DAY: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_VARIABLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_TAG: Final = re.compile(r"[^a-z0-9]+")
MAX_VARIABLE: Final = 128
"""The longest environment variable name taken."""


class FanOut(msgspec.Struct, frozen=True, kw_only=True):
    """What one fan-out creates: one job per value, each with ``variable=value`` in its
    containers' environment and ``tag`` ending its name."""

    variable: str
    values: tuple[str, ...]
    tags: tuple[str, ...]
    """One per value, distinct: DNS-label characters, at most ``MAX_TAG``."""


def day(raw: object, path: str, *, name: str | None = None) -> date:
    """One day written ``YYYY-MM-DD`` (ISO 8601's calendar date, nothing else)."""
    label = name or path
    if not isinstance(raw, str):
        raise ValueRefused(
            path, "invalid-type", f"{label} must be a day YYYY-MM-DD, got {shown(raw)}"
        )
    if _DAY.fullmatch(raw) is None:
        message = f"{label} must be a day YYYY-MM-DD, got {shown(raw)}"
        raise ValueRefused(path, "invalid-value", message)
    try:
        return date(int(raw[:4]), int(raw[5:7]), int(raw[8:]))
    except ValueError as exc:
        raise ValueRefused(path, "invalid-value", f"{label}: {raw!r} is not a day: {exc}") from None


def day_range(raw: object, path: str, *, name: str | None = None) -> tuple[date, date]:
    """``FIRST..LAST``, both days included, FIRST not after LAST, at most ``MAX_FAN_OUT`` days."""
    label = name or path
    if not isinstance(raw, str) or raw.count("..") != 1:
        message = (
            f"{label} must be a range of days FIRST..LAST, e.g. 2026-01-01..2026-03-31,"
            f" got {shown(raw)}"
        )
        code = "invalid-type" if not isinstance(raw, str) else "invalid-value"
        raise ValueRefused(path, code, message)
    head, tail = raw.split("..")
    first, last = (
        day(head, path, name=f"{label} first day"),
        day(tail, path, name=f"{label} last day"),
    )
    if last < first:
        raise ValueRefused(path, "invalid-value", f"{label}: {raw!r} ends before it starts")
    if (last - first).days + 1 > MAX_FAN_OUT:
        message = (
            f"{label}: {raw!r} spans {(last - first).days + 1} days, more than {MAX_FAN_OUT} jobs"
            " (one Indexed Job runs wider work)"
        )
        raise ValueRefused(path, "out-of-range", message)
    return first, last


def calendar(raw: object, path: str) -> frozenset[date]:
    """The days a calendar file lists: one ``YYYY-MM-DD`` a line; ``#`` starts a comment,
    blank lines are skipped; a line that is not a day is refused with its number."""
    if not isinstance(raw, str):
        raise ValueRefused(path, "invalid-type", f"{path} must be text, got {shown(raw)}")
    if len(raw) > MAX_CALENDAR_CHARS:
        message = f"{path} must be at most {MAX_CALENDAR_CHARS} characters, got {len(raw)}"
        raise ValueRefused(path, "too-long", message)
    out: set[date] = set()
    for number, line in enumerate(raw.splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if text:
            out.add(day(text, f"{path}:{number}"))
    return frozenset(out)


def days(
    first: date,
    last: date,
    path: str,
    *,
    variable: str = DAY_VARIABLE,
    weekdays: bool = False,
    only: frozenset[date] | None = None,
) -> FanOut:
    """Every day of ``first..last`` (at most ``MAX_FAN_OUT``; ``day_range`` checked that),
    Monday to Friday only with ``weekdays``, and only those in ``only`` (a calendar) if given;
    refused when none is left."""
    span = (last - first).days + 1
    if not 0 < span <= MAX_FAN_OUT:
        raise ValueRefused(path, "out-of-range", f"{path}: {span} days, not 1 to {MAX_FAN_OUT}")
    chosen = [
        d
        for d in (first + timedelta(days=i) for i in range(span))
        if (not weekdays or d.weekday() < 5) and (only is None or d in only)
    ]
    if not chosen:
        message = f"{path}: no day of {first}..{last} is left (weekdays or calendar)"
        raise ValueRefused(path, "invalid-value", message)
    texts = tuple(d.isoformat() for d in chosen)
    return FanOut(variable=variable, values=texts, tags=texts)


def variable_name(raw: object, path: str, *, name: str | None = None) -> str:
    """An environment variable's name: a letter or ``_``, then letters, digits and ``_``."""
    label = name or path
    if not isinstance(raw, str) or len(raw) > MAX_VARIABLE or _VARIABLE.fullmatch(raw) is None:
        message = (
            f"{label} must be an environment variable name (letters, digits and '_', not starting"
            f" with a digit, at most {MAX_VARIABLE}), got {shown(raw)}"
        )
        raise ValueRefused(path, "invalid-value", message)
    return raw


def for_each(raw: object, path: str, *, name: str | None = None) -> FanOut:
    """``VAR=v1,v2,...``: at most ``MAX_FAN_OUT`` distinct, non-empty, printable values of at
    most ``MAX_VALUE_CHARS`` each, whose tags (``tag``) are distinct too."""
    label = name or path
    if not isinstance(raw, str) or "=" not in raw:
        message = f"{label} must be VAR=v1,v2,... , got {shown(raw)}"
        raise ValueRefused(path, "invalid-value", message)
    if len(raw) > MAX_FAN_OUT * (MAX_VALUE_CHARS + 1) + MAX_VARIABLE:
        raise ValueRefused(path, "too-long", f"{label} is longer than {MAX_FAN_OUT} values")
    head, values_text = raw.split("=", 1)
    variable = variable_name(head, path, name=f"{label} variable")
    values = values_text.split(",")
    if len(values) > MAX_FAN_OUT:
        message = f"{label}: {len(values)} values, more than {MAX_FAN_OUT} jobs"
        raise ValueRefused(path, "out-of-range", message)
    for value in values:
        if not value or len(value) > MAX_VALUE_CHARS or not value.isprintable():
            message = (
                f"{label}: every value must be 1 to {MAX_VALUE_CHARS} printable characters,"
                f" got {shown(value)}"
            )
            raise ValueRefused(path, "invalid-value", message)
    if len(set(values)) != len(values):
        twice = next(v for v in values if values.count(v) > 1)
        raise ValueRefused(path, "invalid-value", f"{label}: {shown(twice)} is given twice")
    tags = tuple(tag(value, path, name=label) for value in values)
    if len(set(tags)) != len(tags):
        clash = [v for v, t in zip(values, tags, strict=True) if tags.count(t) > 1][:2]
        message = (
            f"{label}: {shown(clash[0])} and {shown(clash[1])} would name the same job"
            f" ({tags[values.index(clash[0])]!r})"
        )
        raise ValueRefused(path, "invalid-value", message)
    return FanOut(variable=variable, values=tuple(values), tags=tags)


def group(raw: object, path: str, *, name: str | None = None) -> str:
    """A fan-out group's name: a DNS-1123 label (it is the value of the ``usher.io/group``
    label and of a label selector, so nothing else may pass)."""
    return dns_label(raw, path, name=name, what="a group name")


def tag(value: str, path: str, *, name: str | None = None) -> str:
    """The name- and label-safe form of ``value``: lower case, every run of other characters
    one ``-``, none at the ends, at most ``MAX_TAG``; refused when nothing is left."""
    text = _NOT_TAG.sub("-", value.lower()).strip("-")
    if not text:
        message = f"{name or path}: {shown(value)} has no letter or digit to name a job with"
        raise ValueRefused(path, "invalid-value", message)
    return text[:MAX_TAG].strip("-")


def member_name(base: str, member_tag: str, path: str) -> str:
    """``base-tag``: a job's name (a DNS label of at most 63 characters), else refused."""
    joined = f"{base}-{member_tag}"
    if len(joined) > MAX_LABEL:
        message = (
            f"{path}: job name {joined!r} is longer than {MAX_LABEL} characters: shorten the"
            f" name ({len(base)} characters) to at most {MAX_LABEL - 1 - len(member_tag)}"
        )
        raise ValueRefused(path, "too-long", message)
    return dns_label(joined, path, what=f"a job name ({LABEL_RULE})")
