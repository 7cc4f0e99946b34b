"""What the console's pages show, shaped from the projections: pages of a queue, quota bars,
who borrows from whom, filtered decisions and their pages, chart lines.

What it does: small pure functions the server hands their results to the templates: a page of
a long list (``paginate``, refusing a page that is not there with ``OutOfRange``), a pending
job's age (``age``, as ``usher jobs`` prints AGE), each quota node's used / min / max as bar
widths per resource (``quota_bars``), for every inner node which children borrow beyond their
guarantee and which leave theirs unused (``loans``), the decisions a filter keeps
(``keep_decision``; a filter naming nothing there is refused by ``filter_problem``) a page at
a time (``page_of_decisions``), and chart series as SVG points on one shared time span
(``line_chart``, ``dot_chart``).
What it must never do: read the log, the clock or the network, or decide anything: it only
rearranges what the projections say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Generic, TypeVar

import msgspec

from usher.client.state import FEED_SUSPENDED, DecisionInfo, QuotaInfo
from usher.core.history.replay import QuotaRow, to_datetime
from usher.core.model.quantity import format_quantity, parse_quantity

T = TypeVar("T")

PER_PAGE = 100
RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
"""Resources in the order the pages show them (others follow, sorted)."""
ACTIONS = ("admit", "preempt", "release", "inadmissible", "unmapped", FEED_SUSPENDED, "reject")


# --------------------------------------------------------------------------- pagination


class PageOf(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One page of a list: its items, which page of how many, and the whole list's size."""

    items: list[T]
    page: int
    pages: int
    total: int


class OutOfRange(ValueError):
    """A page or log position that is not there; the message says what is (never clamped:
    a link that silently shows something else misleads)."""


def paginate(items: Sequence[T], page: int, per_page: int = PER_PAGE) -> PageOf[T]:
    """Page ``page`` (1-based) of ``items``; ``OutOfRange`` when there is no such page."""
    pages = max(1, -(-len(items) // per_page))
    if not 1 <= page <= pages:
        raise OutOfRange(
            f"page must be from 1 to {pages} ({len(items)} jobs, {per_page} a page); got {page}"
        )
    start = (page - 1) * per_page
    return PageOf(
        items=list(items[start : start + per_page]), page=page, pages=pages, total=len(items)
    )


# --------------------------------------------------------------------------- quota


class Bar(msgspec.Struct, frozen=True, kw_only=True):
    """One resource of one node: amounts in Kubernetes notation and widths in percent of max."""

    resource: str
    used: str
    min: str
    max: str
    used_pct: float
    min_pct: float
    state: str
    """``within`` (used <= min), ``borrowing`` (above min) or ``full`` (at max)."""


def resources_of(quota: Sequence[QuotaInfo]) -> list[str]:
    """Every resource some node limits, in ``RESOURCES`` order then sorted."""
    present = {r for node in quota for r in node.max_units}
    return [r for r in RESOURCES if r in present] + sorted(present - set(RESOURCES))


def quota_bars(node: QuotaInfo, resources: Sequence[str]) -> list[Bar | None]:
    """A bar per resource (None where the node does not limit it)."""
    out: list[Bar | None] = []
    for resource in resources:
        high = node.max_units.get(resource)
        if high is None:
            out.append(None)
            continue
        used = node.used_units.get(resource, 0)
        low = node.min_units.get(resource, 0)
        state = "full" if used >= high > 0 else "borrowing" if used > low else "within"
        out.append(
            Bar(
                resource=resource,
                used=_amount(resource, used),
                min=_amount(resource, low),
                max=_amount(resource, high),
                used_pct=_pct(used, high),
                min_pct=_pct(low, high),
                state=state,
            )
        )
    return out


def replay_quota(rows: Sequence[QuotaRow]) -> list[QuotaInfo]:
    """``usher replay``'s quota rows (quantities) as the tree page's nodes, so a past state
    shows the same bars; a node's queue and namespaces are not in a replay row, so none."""

    def units(amounts: dict[str, str], path: str) -> dict[str, int]:
        return {r: parse_quantity(q, r, path) for r, q in amounts.items()}

    paths = [row.path for row in rows]
    return [
        QuotaInfo(
            path=row.path,
            depth=row.path.count("/"),
            leaf=not any(p.startswith(row.path + "/") for p in paths),
            queue=None,
            namespaces=[],
            used=dict(row.used),
            min=dict(row.min),
            max=dict(row.max),
            used_units=units(row.used, row.path),
            min_units=units(row.min, row.path),
            max_units=units(row.max, row.path),
        )
        for row in rows
    ]


def _pct(part: int, whole: int) -> float:
    return round(min(100.0, part * 100 / whole), 1) if whole > 0 else 0.0


def _amount(resource: str, value: int) -> str:
    return format_quantity(resource, value) if value else "0"


class Loan(msgspec.Struct, frozen=True, kw_only=True):
    """Under one parent, for one resource: who uses more than its guarantee, and whose
    guarantee lies unused (what the borrowers run on)."""

    parent: str
    resource: str
    borrowers: list[str]
    """``Department-a (40 beyond its min 60)``."""
    lenders: list[str]
    """``Department-b (40 of its min 40 unused)``."""


def loans(quota: Sequence[QuotaInfo]) -> list[Loan]:
    """Who borrows from whom: per inner node and resource, children above their min and the
    siblings whose unused min they borrow."""
    children: dict[str, list[QuotaInfo]] = {}
    for node in quota:
        if "/" in node.path:
            children.setdefault(node.path.rsplit("/", 1)[0], []).append(node)
    out: list[Loan] = []
    for parent, kids in children.items():
        for resource in resources_of(kids):
            borrowers, lenders = [], []
            for kid in kids:
                used = kid.used_units.get(resource, 0)
                low = kid.min_units.get(resource, 0)
                name = kid.path.rsplit("/", 1)[-1]
                if used > low:
                    borrowers.append(
                        f"{name} ({_amount(resource, used - low)} beyond its min "
                        f"{_amount(resource, low)})"
                    )
                elif used < low:
                    lenders.append(
                        f"{name} ({_amount(resource, low - used)} of its min "
                        f"{_amount(resource, low)} unused)"
                    )
            if borrowers:
                out.append(
                    Loan(parent=parent, resource=resource, borrowers=borrowers, lenders=lenders)
                )
    return out


# --------------------------------------------------------------------------- decisions


class DecisionFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What the decision stream shows: empty fields keep everything."""

    queue: str = ""
    namespace: str = ""
    action: str = ""


def keep_decision(decision: DecisionInfo, wanted: DecisionFilter, queues: dict[str, str]) -> bool:
    """Whether ``wanted`` keeps ``decision``."""
    if wanted.action and decision.action != wanted.action:
        return False
    if wanted.namespace and decision.job.partition("/")[0] != wanted.namespace:
        return False
    return not wanted.queue or queues.get(decision.quota or "") == wanted.queue


def filter_problem(
    wanted: DecisionFilter, queues: Sequence[str], namespaces: Sequence[str]
) -> str | None:
    """What in ``wanted`` names nothing there is (None when every field is known): an unknown
    filter would show an empty list, which reads as "no such decisions"."""
    choices = (
        ("queue", wanted.queue, queues, "queues of the tree in force"),
        ("namespace", wanted.namespace, namespaces, "namespaces with a queue or a decision"),
        ("action", wanted.action, ACTIONS, "actions"),
    )
    for name, value, allowed, what in choices:
        if value and value not in allowed:
            known = ", ".join(allowed) if allowed else "none yet"
            return f"{name}: no {name} {value!r} ({what}: {known})"
    return None


class DecisionPage(msgspec.Struct, frozen=True, kw_only=True):
    """Up to ``per_page`` kept decisions, newest first, and where the neighbouring pages start."""

    items: list[DecisionInfo]
    total: int
    """How many decisions the filter keeps in all."""
    newer: int
    """How many kept decisions are newer than this page's first."""
    older_before: int | None
    """``before`` for the next older page (None on the oldest)."""
    newer_before: int | None
    """``before`` for the next newer page (None when that is the newest, which takes none)."""


def page_of_decisions(
    kept: Sequence[DecisionInfo], before: int | None, per_page: int
) -> DecisionPage:
    """The ``per_page`` newest of ``kept`` (oldest first, as folded) with a seq below
    ``before`` (all when None), newest first."""
    end = len(kept) if before is None else sum(1 for d in kept if d.seq < before)
    start = max(0, end - per_page)
    upper = end + per_page
    return DecisionPage(
        items=list(reversed(kept[start:end])),
        total=len(kept),
        newer=len(kept) - end,
        older_before=kept[start].seq if start > 0 else None,
        newer_before=kept[upper].seq if end < len(kept) and upper < len(kept) else None,
    )


# --------------------------------------------------------------------------- charts

WIDTH, HEIGHT, PAD = 640, 180, 28
COLOURS = ("#2f6fb3", "#d9822b", "#3a9d5d", "#b33f62", "#7e57c2", "#8d6e63", "#00838f")


class Unit(msgspec.Struct, frozen=True):
    """A chart's unit, singular and plural (``job``/``jobs``; ``s``/``s``)."""

    one: str
    many: str

    def of(self, value: float) -> str:
        return f"{value:g} {self.one if value == 1 else self.many}"


class Line(msgspec.Struct, frozen=True, kw_only=True):
    """One series: its name, colour and SVG points (``x,y x,y ...``)."""

    name: str
    colour: str
    points: str


class Dot(msgspec.Struct, frozen=True, kw_only=True):
    """One value drawn as a dot; ``title`` is what hovering it says."""

    x: float
    y: float
    colour: str
    title: str


class Chart(msgspec.Struct, frozen=True, kw_only=True):
    """An SVG chart's lines and dots and its axis labels; the y axis runs from 0 to ``y_top``
    and ``y_max`` labels exactly that top."""

    title: str
    lines: list[Line]
    dots: list[Dot]
    y_max: str
    y_zero: str
    x_from: str
    x_to: str
    width: int = WIDTH
    height: int = HEIGHT
    pad: int = PAD


Series = dict[str, list[tuple[int, float]]]


def _clock(ms: int) -> str:
    return to_datetime(ms).strftime("%H:%M:%S UTC")


def time_span(*charts: Series) -> tuple[int, int] | None:
    """The log time every chart shares: from the earliest value of any to the latest."""
    times = [t for series in charts for values in series.values() for t, _ in values]
    return (min(times), max(times)) if times else None


def _top(series: Series) -> float:
    """The y axis's top: the largest value rounded up to a whole number, at least 1."""
    return float(max(1, math.ceil(max(v for values in series.values() for _, v in values))))


def _xy(t: int, v: float, span: tuple[int, int], top: float) -> tuple[float, float]:
    t_from, t_to = span
    x = PAD + (t - t_from) * (WIDTH - 2 * PAD) / max(1, t_to - t_from)
    y = HEIGHT - PAD - v * (HEIGHT - 2 * PAD) / top
    return round(x, 1), round(y, 1)


def _changes(values: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The points where a line's value changes (and its ends): enough dots to hover every
    step without one per sample."""
    return [
        (t, v)
        for i, (t, v) in enumerate(values)
        if i in (0, len(values) - 1) or v != values[i - 1][1]
    ]


def _empty(title: str) -> Chart:
    return Chart(title=title, lines=[], dots=[], y_max="", y_zero="", x_from="", x_to="")


def line_chart(
    title: str, series: Series, unit: Unit, span: tuple[int, int] | None = None
) -> Chart:
    """A polyline per series over log time ``span`` (all of ``series`` when None), with a
    dot where a value changes (a single sample is a dot); the y axis runs from 0."""
    span = span or time_span(series)
    if span is None or not any(series.values()):
        return _empty(title)
    top = _top(series)
    lines, dots = [], []
    for i, (name, values) in enumerate(sorted(series.items())):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{x},{y}" for x, y in (_xy(t, v, span, top) for t, v in values))
        lines.append(Line(name=name, colour=colour, points=points))
        for t, v in _changes(values):
            x, y = _xy(t, v, span, top)
            dots.append(Dot(x=x, y=y, colour=colour, title=f"{name}: {unit.of(v)} at {_clock(t)}"))
    return Chart(
        title=title,
        lines=lines,
        dots=dots,
        y_max=unit.of(top),
        y_zero="0",  # the unit is on the top label: the left margin has room for a digit
        x_from=_clock(span[0]),
        x_to=_clock(span[1]),
    )


def dot_chart(title: str, series: Series, unit: Unit, span: tuple[int, int] | None = None) -> Chart:
    """A dot per value (wait times), coloured by series; the legend names the series."""
    span = span or time_span(series)
    if span is None or not any(series.values()):
        return _empty(title)
    chart = line_chart(title, series, unit, span)
    top = _top(series)
    dots = [
        Dot(
            x=x,
            y=y,
            colour=COLOURS[i % len(COLOURS)],
            title=f"{name}: {unit.of(v)} at {_clock(t)}",
        )
        for i, (name, values) in enumerate(sorted(series.items()))
        for t, v in values
        for x, y in [_xy(t, v, span, top)]
    ]
    legend = [Line(name=line.name, colour=line.colour, points="") for line in chart.lines]
    return msgspec.structs.replace(chart, lines=legend, dots=dots)
