"""Fan-out for people: one job per day or per value, all of them one group.

What it does: ``for_each_day`` and ``for_each`` read what a person writes (``2026-01-01..
2026-03-31``, ``LR=0.1,0.01``) with the core's parsers (``usher.core.values.fanout``), turning a
refusal into ``BadInput``; ``member_requests`` turns one ``JobRequest`` and a ``FanOut`` into
the jobs of the group: each named ``BASE-TAG``, labelled ``usher.io/group`` (the group) and
``usher.io/fan-out-value`` (its tag), with ``VAR=value`` and ``USHER_GROUP`` in its
environment. ``GroupResult`` is what following a group ends with: every member's last state,
and which failed. The labels are how ``usher jobs/wait/delete --group`` find the members again.
What it must never do: talk to a server, decide anything, or build a job the client's own
``job_manifest`` would not (it goes through it).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

import msgspec

from usher.client.errors import BadInput
from usher.client.manifests import JobRequest, image_stem
from usher.client.state import JobInfo
from usher.core.model.errors import ValueRefused
from usher.core.state.indexed import JobState
from usher.core.values import fanout
from usher.core.values.fanout import FanOut

T = TypeVar("T")

GROUP_LABEL: Final = "usher.io/group"
"""Every job of one fan-out carries this label with the group's name."""
VALUE_LABEL: Final = "usher.io/fan-out-value"
"""Each job of a fan-out carries its value's tag (``2026-01-05``, ``lr-0-1``)."""
GROUP_VARIABLE: Final = "USHER_GROUP"
"""The environment variable holding the group's name in every job of it."""


def _parsed(parse: Callable[[], T]) -> T:
    """``parse()``, a core parser's refusal turned into ``BadInput`` (its message)."""
    try:
        return parse()
    except ValueRefused as refused:
        raise BadInput(refused.message) from None


def for_each_day(
    days: str,
    *,
    weekdays: bool = False,
    calendar: str | Path | None = None,
    option: str = "--for-each-day",
) -> FanOut:
    """One job per day of ``FIRST..LAST`` (``[VAR=]FIRST..LAST``; VAR defaults to ``DAY``):
    Monday to Friday with ``weekdays``, only the days the ``calendar`` file lists if given
    (one ``YYYY-MM-DD`` a line, ``#`` comments). ``BadInput`` names what is wrong."""
    variable = fanout.DAY_VARIABLE
    if "=" in days:
        head, days = days.split("=", 1)
        variable = _parsed(lambda: fanout.variable_name(head, option, name=f"{option} variable"))
    first, last = _parsed(lambda: fanout.day_range(days, option))
    only = None
    if calendar is not None:
        path = Path(calendar)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"--calendar {path}: cannot read ({type(exc).__name__})") from None
        only = _parsed(lambda: fanout.calendar(text, str(path)))
    return _parsed(
        lambda: fanout.days(first, last, option, variable=variable, weekdays=weekdays, only=only)
    )


def for_each(values: str, *, option: str = "--for-each") -> FanOut:
    """One job per value of ``VAR=v1,v2,...``; ``BadInput`` names what is wrong."""
    return _parsed(lambda: fanout.for_each(values, option))


def group_name(group: str | None, request: JobRequest) -> str:
    """The group's name: ``group``, else the job name, else the image's stem and a random
    suffix (so two unnamed fan-outs never share a group); ``BadInput`` if not a DNS label."""
    chosen = group or request.name or f"{image_stem(request.image)[:30]}-{secrets.token_hex(3)}"
    return checked_group(chosen)


def checked_group(group: str) -> str:
    """``group`` if it is a group name (``usher.core.values.fanout.group``), else ``BadInput``:
    it goes into a label selector, where anything else could select other jobs."""
    return _parsed(lambda: fanout.group(group, "group"))


def member_requests(request: JobRequest, fan_out: FanOut, group: str) -> list[JobRequest]:
    """One request per value: named ``BASE-TAG`` (BASE: the request's name, else the group),
    labelled with the group and the tag, with the value and the group in its environment."""
    base = request.name or group
    out = []
    for value, tag in zip(fan_out.values, fan_out.tags, strict=True):
        name = _parsed(lambda: fanout.member_name(base, tag, "name"))  # noqa: B023 (called now)
        out.append(
            dataclasses.replace(
                request,
                name=name,
                labels={**request.labels, GROUP_LABEL: group, VALUE_LABEL: tag},
                env={**request.env, fan_out.variable: value, GROUP_VARIABLE: group},
            )
        )
    return out


class GroupResult(msgspec.Struct, frozen=True, kw_only=True):
    """A group followed to its end: each member's last state (``missing``: deleted, or never
    seen by Usher within the grace)."""

    group: str
    jobs: list[JobInfo]
    missing: list[str] = msgspec.field(default_factory=list)

    @property
    def failed(self) -> list[JobInfo]:
        """Members that ended otherwise than succeeded (failed, rejected, inadmissible)."""
        return [j for j in self.jobs if not _succeeded(j)]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.missing


def _succeeded(job: JobInfo) -> bool:
    return job.state == JobState.FINISHED and job.succeeded is not False
