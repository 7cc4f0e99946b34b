"""What the console's pages show, shaped from the projections: pages of a queue, quota bars,
who borrows from whom, filtered decisions and their pages, chart lines.

What it does: small pure functions the server hands their results to the templates: a page of
a long list (``paginate``, refusing a page that is not there with ``OutOfRange``), a pending
job's age (``age``, as ``usher jobs`` prints AGE), each quota node's used / min / max as bar
widths per resource (``quota_bars``), for every inner node which children borrow beyond their
guarantee and which leave theirs unused (``loans``), the decisions a filter keeps
(``keep_decision``; a filter naming nothing there is refused by ``filter_problem``) a page at
a time (``page_of_decisions``), chart series as SVG points on one shared time span
(``line_chart``, ``dot_chart``), and each topology domain's room in Kubernetes notation
(``domain_rows``, from the core's ``domain_use``).
What it must never do: read the log, the clock or the network, or decide anything: it only
rearranges what the projections say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Generic, TypeVar

import msgspec

from usher.client.state import FEED_SUSPENDED, DecisionInfo, QuotaInfo
from usher.core.engine.queries import DomainUse
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

WIDTH, HEIGHT, PAD = 1200, 240, 56
"""The SVG's own units: the page scales it to the width of its column (CSS), so these set the
proportions and the room for the axis labels, not the size on screen."""
COLOURS = ("#2f6fb3", "#d9822b", "#3a9d5d", "#b33f62", "#7e57c2", "#8d6e63", "#00838f")
Y_INTERVALS = 4
"""About this many steps up the value axis (fewer when the values are small counts)."""
X_INTERVALS = 6
"""At most this many steps along the time axis."""
DAY_MS = 86_400_000
TIME_STEPS_MS = tuple(
    s * 1000 for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 10800, 21600)
)
"""Steps of the time axis, on round clock times: 1 s to 6 h; longer spans step in days."""


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


class Tick(msgspec.Struct, frozen=True, kw_only=True):
    """One mark of an axis scale: where it is (x or y in the SVG) and what it reads."""

    at: float
    label: str


class Chart(msgspec.Struct, frozen=True, kw_only=True):
    """An SVG chart's lines and dots and its axis scales; the y axis runs from 0 to ``y_top``
    in round steps (``y_ticks``, the top labelled ``y_max`` with its unit), the time axis has a
    tick at each round clock time of the span (``x_ticks``)."""

    title: str
    lines: list[Line]
    dots: list[Dot]
    y_max: str
    y_zero: str
    x_from: str
    x_to: str
    y_ticks: list[Tick] = msgspec.field(default_factory=list)
    x_ticks: list[Tick] = msgspec.field(default_factory=list)
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


def nice_step(rough: float) -> float:
    """The smallest of 1, 2, 5 x 10^k (k >= 0) that is at least ``rough``: counts and
    seconds go up in whole, round steps."""
    magnitude = 1.0
    while True:
        for multiple in (1, 2, 5):
            if multiple * magnitude >= rough:
                return multiple * magnitude
        magnitude *= 10


def _y_step(series: Series) -> float:
    return nice_step(max(v for values in series.values() for _, v in values) / Y_INTERVALS)


def _top(series: Series) -> float:
    """The y axis's top: the largest value rounded up to a whole step, at least one step."""
    step = _y_step(series)
    largest = max(v for values in series.values() for _, v in values)
    return max(step, math.ceil(largest / step) * step)


def y_ticks(series: Series, unit: Unit) -> list[Tick]:
    """The value scale: 0, one step, ... the top (which carries the unit)."""
    step, top = _y_step(series), _top(series)
    count = round(top / step)
    ticks = []
    for i in range(count + 1):
        value = i * step
        label = unit.of(value) if i == count else f"{value:g}"
        ticks.append(Tick(at=_xy(0, value, (0, 1), top)[1], label=label))
    return ticks


def x_ticks(span: tuple[int, int]) -> list[Tick]:
    """The time scale: a tick at each round clock time (UTC) of the span, at most
    ``X_INTERVALS`` steps (a span with fewer than two: its ends); one instant is one tick."""
    t_from, t_to = span
    length = t_to - t_from
    step = next(
        (s for s in TIME_STEPS_MS if length / s <= X_INTERVALS),
        DAY_MS * int(nice_step(length / DAY_MS / X_INTERVALS)),
    )
    pattern = "%H:%M:%S" if step < 60_000 else "%H:%M" if step < DAY_MS else "%Y-%m-%d"
    first = -(-t_from // step) * step
    times: Sequence[int] = range(first, t_to + 1, step) if length else [t_from]
    if length and len(times) < 2:  # no round second inside: its two ends, to the millisecond
        ends = (t_from, t_to)
        return [
            Tick(at=_xy(t, 0, span, 1)[0], label=f"{_clock(t)[:8]}.{t % 1000:03d}") for t in ends
        ]
    return [Tick(at=_xy(t, 0, span, 1)[0], label=to_datetime(t).strftime(pattern)) for t in times]


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
        y_ticks=y_ticks(series, unit),
        x_ticks=x_ticks(span),
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


# --------------------------------------------------------------------------- topology


class DomainRow(msgspec.Struct, frozen=True, kw_only=True):
    """One topology domain as the clusters page shows it: per resource, what its nodes
    allocate, what pinned admissions use there and what is free, in Kubernetes notation."""

    zone: str
    level: str
    domain: str
    cells: list[tuple[str, str, str] | None]
    """Per resource of the page: ``(used, allocatable, free)``; None where it has none."""
    full: bool
    """Nothing of some resource is free (a pinned gang asking it fits no more)."""


def domain_rows(domains: Sequence[DomainUse]) -> tuple[list[str], list[DomainRow]]:
    """The resources any domain allocates (in ``RESOURCES`` order, then sorted) and a row per
    domain, as the core counted them (no number is worked out here but the notation)."""
    present = {r for d in domains for r in d.allocatable}
    resources = [r for r in RESOURCES if r in present] + sorted(present - set(RESOURCES))
    rows = []
    for d in domains:
        cells: list[tuple[str, str, str] | None] = [
            (
                format_quantity(r, d.used.get(r, 0)),
                format_quantity(r, d.allocatable[r]),
                format_quantity(r, d.free.get(r, 0)),
            )
            if r in d.allocatable
            else None
            for r in resources
        ]
        full = any(d.free.get(r, 0) <= 0 for r in d.allocatable)
        rows.append(DomainRow(zone=d.zone, level=d.level, domain=d.domain, cells=cells, full=full))
    return resources, rows
