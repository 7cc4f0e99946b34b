"""What the console's pages show, shaped from the projections: pages of a queue, quota bars,
who borrows from whom, filtered decisions, chart lines.

What it does: small pure functions the server hands their results to the templates: a page of
a long list (``paginate``), each quota node's used / min / max as bar widths per resource
(``quota_bars``), for every inner node which children borrow beyond their guarantee and which
leave theirs unused (``loans``), the decisions a filter keeps (``keep_decision``), and chart
series as SVG polyline points (``line_chart``, ``dot_chart``).
What it must never do: read the log, the clock or the network, or decide anything: it only
rearranges what the projections say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

import msgspec

from usher.client.state import DecisionInfo, QuotaInfo
from usher.core.history import to_datetime
from usher.core.quantity import format_quantity

T = TypeVar("T")

PER_PAGE = 100
RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
"""Resources in the order the pages show them (others follow, sorted)."""
ACTIONS = ("admit", "preempt", "release", "inadmissible", "unmapped", "reject")


# --------------------------------------------------------------------------- pagination


class PageOf(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One page of a list: its items, which page of how many, and the whole list's size."""

    items: list[T]
    page: int
    pages: int
    total: int


def paginate(items: Sequence[T], page: int, per_page: int = PER_PAGE) -> PageOf[T]:
    """Page ``page`` (1-based, clamped to the pages there are) of ``items``."""
    pages = max(1, -(-len(items) // per_page))
    page = min(max(1, page), pages)
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


# --------------------------------------------------------------------------- charts

WIDTH, HEIGHT, PAD = 640, 180, 28
COLOURS = ("#2f6fb3", "#d9822b", "#3a9d5d", "#b33f62", "#7e57c2", "#8d6e63", "#00838f")


class Line(msgspec.Struct, frozen=True, kw_only=True):
    """One series: its name, colour and SVG points (``x,y x,y ...``)."""

    name: str
    colour: str
    points: str


class Chart(msgspec.Struct, frozen=True, kw_only=True):
    """An SVG chart's lines or dots and its axis labels."""

    title: str
    lines: list[Line]
    dots: list[tuple[float, float, str]]
    y_max: str
    x_from: str
    x_to: str
    width: int = WIDTH
    height: int = HEIGHT
    pad: int = PAD


def _clock(ms: int) -> str:
    return to_datetime(ms).strftime("%H:%M:%S UTC")


def _frame(series: dict[str, list[tuple[int, float]]]) -> tuple[int, int, float] | None:
    points = [p for values in series.values() for p in values]
    if not points:
        return None
    return min(t for t, _ in points), max(t for t, _ in points), max(v for _, v in points)


def _xy(t: int, v: float, frame: tuple[int, int, float]) -> tuple[float, float]:
    t_from, t_to, y_max = frame
    x = PAD + (t - t_from) * (WIDTH - 2 * PAD) / max(1, t_to - t_from)
    y = HEIGHT - PAD - v * (HEIGHT - 2 * PAD) / max(1.0, y_max)
    return round(x, 1), round(y, 1)


def line_chart(title: str, series: dict[str, list[tuple[int, float]]], unit: str) -> Chart:
    """A polyline per series over log time; ``unit`` follows the y axis maximum."""
    frame = _frame(series)
    if frame is None:
        return Chart(title=title, lines=[], dots=[], y_max="", x_from="", x_to="")
    lines = []
    for i, (name, values) in enumerate(sorted(series.items())):
        xy = (_xy(t, v, frame) for t, v in values)
        points = " ".join(f"{x},{y}" for x, y in xy)
        lines.append(Line(name=name, colour=COLOURS[i % len(COLOURS)], points=points))
    return Chart(
        title=title,
        lines=lines,
        dots=[],
        y_max=f"{frame[2]:g} {unit}",
        x_from=_clock(frame[0]),
        x_to=_clock(frame[1]),
    )


def dot_chart(title: str, series: dict[str, list[tuple[int, float]]], unit: str) -> Chart:
    """A dot per value (wait times), coloured by series; the legend names the series."""
    chart = line_chart(title, series, unit)
    frame = _frame(series)
    if frame is None:
        return chart
    dots = [
        (*_xy(t, v, frame), COLOURS[i % len(COLOURS)])
        for i, (_, values) in enumerate(sorted(series.items()))
        for t, v in values
    ]
    legend = [Line(name=line.name, colour=line.colour, points="") for line in chart.lines]
    return msgspec.structs.replace(chart, lines=legend, dots=dots)
