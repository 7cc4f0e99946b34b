"""The live terminal view of ``usher up``: queues, the quota tree and the latest decisions.

What it does: follows the log (ordered consumer, pure-core projection: ``usher.client.state``)
and, on a terminal, redraws a rich ``Live`` screen about once a second: every queue with its
pending jobs in order (position, priority, estimated start as ``usher jobs --start`` words it
and why when it is unknown, reason), the quota tree with used/min/max bars per resource, the
budgets as ``usher budget`` prints them (B1; each queue below a spent one is marked), each
queue's decayed usage per weight as ``usher explain`` gives it when fair share is on (F1), and
the latest decisions with their reasons. When stdout is not a terminal it prints plain lines
instead: one per decision as it happens, and a summary every
``interval_s``. ``run_up`` is the asyncio part of ``usher up``: the view, the demo driver,
and the watch over the system's processes, until a stop is requested.
What it must never do: decide or publish anything, block the event loop for long, or print
a secret (the database URL is shown redacted).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from usher.adapters.stack_file import StackInfo
from usher.client import AsyncClient, ClientError
from usher.client.durations import estimated_start
from usher.client.state import (
    FEED_SUSPENDED,
    PeopleProjection,
    QueueInfo,
    QuotaInfo,
    StateView,
    catch_up,
    now_ms,
)
from usher.client.target import target_of_stack
from usher.core.model.quantity import format_quantity
from usher.core.protocol.log import BadEntry, LogEntry
from usher.core.state.indexed import JobState
from usher.demo import DemoDriver
from usher.local.system import EmbeddedSystem

BAR_WIDTH = 14
SHOWN_PER_QUEUE = 6
SHOWN_DECISIONS = 10
RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
ACTION_STYLE = {
    "admit": "green",
    "preempt": "bold red",
    "requeue": "red",
    "retry": "yellow",
    "release": "dim",
    "inadmissible": "magenta",
    "unmapped": "yellow",
    FEED_SUSPENDED: "yellow",
    "reject": "magenta",
}


# --------------------------------------------------------------------------- pieces


def bar(used: int, low: int, high: int, width: int = BAR_WIDTH) -> Text:
    """``█████░░│░░`` : used out of max, ``│`` marks min; green within min, yellow borrowing,
    red at max."""
    if high <= 0:
        return Text("-".ljust(width), style="dim")
    filled = min(width, round(used / high * width))
    marker = min(width - 1, round(low / high * width)) if 0 < low < high else None
    style = "red" if used >= high else "yellow" if used > low else "green"
    text = Text()
    for i in range(width):
        if i < filled:
            text.append("█", style=style)
        elif i == marker:
            text.append("│", style="bold")
        else:
            text.append("░", style="dim")
    return text


def _amount(resource: str, value: int) -> str:
    return format_quantity(resource, value) if value else "0"


def summary_line(view: StateView) -> str:
    counts: dict[str, int] = {}
    for job in view.jobs:
        counts[job.state] = counts.get(job.state, 0) + 1
    states = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no jobs yet"
    return f"log seq {view.seq}; {states}; policy {view.policy}"


def starts_of(view: StateView, now: datetime) -> dict[str, str]:
    """Each pending job's estimated start from ``now``, as ``usher jobs --start`` words it, and
    why when it is unknown (the screen has room for the reason; the START column has not)."""
    return {
        job.job: estimated_start(job.estimate, now, why=True)
        for job in view.jobs
        if job.state == JobState.PENDING
    }


def queue_lines(queue: QueueInfo, starts: Mapping[str, str] | None = None) -> list[str]:
    """The plain lines of one queue: its head line, then its first pending jobs (with their
    estimated start where ``starts``, from ``starts_of``, gives one)."""
    head = f"queue {queue.name} ({queue.quota}, {queue.policy}): "
    head += f"{len(queue.pending)} pending, {len(queue.admitted)} admitted"
    if queue.hold:
        head += f"; held: {queue.hold}"
    if queue.budget:
        head += f"; budget spent ({queue.budget})"
    fair = queue.fair_words()
    if fair is not None:
        head += f"; {fair}"
    lines = [head]
    for entry in queue.pending[:SHOWN_PER_QUEUE]:
        line = (
            f"  #{entry.position} {entry.job} prio {entry.priority}: "
            f"{entry.reason_code or ''} {entry.reason or ''}".rstrip()
        )
        start = (starts or {}).get(entry.job)
        lines.append(line if start is None else f"{line}; starts {start}")
    if len(queue.pending) > SHOWN_PER_QUEUE:
        lines.append(f"  ... {len(queue.pending) - SHOWN_PER_QUEUE} more")
    return lines


def budget_lines(view: StateView) -> list[str]:
    """``usher budget``'s table under a ``budgets`` head, or nothing when no node carries a
    budget (B1)."""
    lines = view.budget_lines()
    if not lines:
        return []
    return ["budgets (spent, limit and left per node, as usher budget prints them):"] + [
        line for line, _ in lines
    ]


def quota_line(node: QuotaInfo) -> str:
    parts = []
    for resource in RESOURCES:
        if resource in node.max_units:
            used = _amount(resource, node.used_units.get(resource, 0))
            parts.append(f"{resource} {used}/{node.min.get(resource, '0')}/{node.max[resource]}")
    return f"quota {node.path}: " + "  ".join(parts)


# --------------------------------------------------------------------------- rich screen


def render(view: StateView, header: str, notes: list[str]) -> RenderableType:
    """The whole screen for one state."""
    top = Text(header, style="bold")
    top.append(f"\n{summary_line(view)}", style="")
    for note in notes[-3:]:
        top.append(f"\n{note}", style="yellow")
    if view.tree_rejection is not None:
        top.append(f"\n{view.tree_rejection.describe()}", style="red")
    if view.tree_deleted is not None:
        top.append(f"\n{view.tree_deleted.describe()}", style="yellow")
    for head in view.skipped_heads:
        top.append(f"\n{head.describe()}", style="magenta")
    return Group(
        Panel(top, box=box.ROUNDED, padding=(0, 1)),
        _queues_table(view),
        _quota_table(view),
        *_budgets_panel(view),
        _decisions_table(view),
    )


def _queues_table(view: StateView) -> RenderableType:
    starts = starts_of(view, datetime.now(UTC))
    table = Table(title="Queues", box=box.SIMPLE_HEAD, expand=True, title_justify="left")
    for column, kwargs in (
        ("queue", {"no_wrap": True}),
        ("#", {"justify": "right"}),
        ("job", {"no_wrap": True}),
        ("prio", {"justify": "right"}),
        ("starts", {"max_width": 32}),
        ("why it waits", {"ratio": 1}),
    ):
        table.add_column(column, **kwargs)
    if not view.queues:
        table.add_row("(no quota tree yet)", "", "", "", "", "")
    for queue in view.queues:
        name = f"{queue.name}\n[dim]{len(queue.admitted)} admitted, {queue.policy}[/dim]"
        if queue.hold:
            name += "\n[yellow]held[/yellow]"  # the reasons say by whom and why (R14)
        if queue.budget:
            name += "\n[yellow]budget spent[/yellow]"  # the reasons give the numbers (B1)
        if not queue.pending:
            table.add_row(name, "", "[dim](empty)[/dim]", "", "", "")
        for i, entry in enumerate(queue.pending[:SHOWN_PER_QUEUE]):
            reason = f"[bold]{entry.reason_code or ''}[/bold] {entry.reason or ''}"
            table.add_row(
                name if i == 0 else "",
                str(entry.position),
                entry.job,
                str(entry.priority),
                Text(starts.get(entry.job, "-")),  # Text: the words are not markup
                reason,
            )
        hidden = len(queue.pending) - SHOWN_PER_QUEUE
        if hidden > 0:
            table.add_row("", "", f"[dim]... {hidden} more[/dim]", "", "", "")
        fair = queue.fair_words()
        if fair is not None:  # in the wide column: the queue's own does not wrap
            table.add_row("", "", "", "", "", Text(fair, style="dim"))
    return table


def _quota_table(view: StateView) -> RenderableType:
    table = Table(
        title="Quota (used / min / max)", box=box.SIMPLE_HEAD, expand=True, title_justify="left"
    )
    table.add_column("node", no_wrap=True)
    shown = [r for r in RESOURCES if any(r in node.max_units for node in view.quota)]
    for resource in shown:
        table.add_column(resource, no_wrap=True)
    for node in view.quota:
        cells: list[RenderableType] = ["  " * node.depth + node.path.rsplit("/", 1)[-1]]
        for resource in shown:
            if resource not in node.max_units:
                cells.append("")
                continue
            used = node.used_units.get(resource, 0)
            cell = bar(used, node.min_units.get(resource, 0), node.max_units[resource])
            cell.append(
                f" {_amount(resource, used)}/{node.min.get(resource, '0')}/{node.max[resource]}"
            )
            cells.append(cell)
        table.add_row(*cells)
    return table


def _budgets_panel(view: StateView) -> list[RenderableType]:
    """``usher budget``'s table (its words, B1), a spent budget's line in red; nothing when no
    node carries a budget."""
    lines = view.budget_lines()
    if not lines:
        return []
    text = Text(overflow="fold")  # a narrow screen folds the table, never drops a number
    for i, (line, spent) in enumerate(lines):
        text.append(
            ("\n" if i else "") + line, style="bold red" if spent else "bold" if i == 0 else ""
        )
    return [Panel(text, title="Budgets", title_align="left", box=box.SIMPLE_HEAD, padding=(0, 0))]


def _decisions_table(view: StateView) -> RenderableType:
    table = Table(title="Latest decisions", box=box.SIMPLE_HEAD, expand=True, title_justify="left")
    for column in ("time", "decision", "job", "quota"):
        table.add_column(column, no_wrap=True)
    table.add_column("reason", ratio=1)
    for decision in list(view.decisions)[-SHOWN_DECISIONS:][::-1]:
        style = ACTION_STYLE.get(decision.action, "")
        reason = decision.reason or ""
        if decision.preemptor:
            reason = f"by {decision.preemptor}: {reason}"
        table.add_row(
            decision.time.strftime("%H:%M:%S"),
            Text(decision.action, style=style),
            decision.job,
            decision.quota or "",
            reason,
        )
    return table


# --------------------------------------------------------------------------- the loop


class LiveView:
    """Follows the log and shows it (rich on a terminal, plain lines otherwise)."""

    def __init__(
        self,
        client: AsyncClient,
        console: Console,
        *,
        header: str,
        plain: bool,
        interval_s: float = 10.0,
    ) -> None:
        self.client = client
        self.console = console
        self.header = header
        self.plain = plain
        self.interval_s = interval_s
        self.state = PeopleProjection(client.target.engine, track_skips=True)
        self.notes: deque[str] = deque(maxlen=20)
        self._printed_seq = 0
        self._pending = 0

    def note(self, line: str) -> None:
        """Something to tell (demo steps, restarts): a line now, or on the screen."""
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        self.notes.append(stamped)
        if self.plain:
            print(stamped, flush=True)

    def backlog(self) -> int:
        """Jobs waiting now (for the demo's pacing)."""
        return self._pending

    def quota(self) -> list[QuotaInfo]:
        """The quota tree's usage now (for the demo's reclaim bursts)."""
        return self.state.view(now_ms(), reasons_too=False).quota

    async def run(self, stop: asyncio.Event) -> None:
        js = await self.client.jetstream()
        follower = await catch_up(self.state, js, self.client.subjects, timeout_s=60.0)
        self._printed_seq = self.state.applied_seq if self.plain else 0
        try:
            if self.plain:
                await self._plain(stop, follower.batches(stop, idle_s=lambda: 0.5))
            else:
                await self._screen(stop, follower.batches(stop, idle_s=lambda: 0.5))
        finally:
            await follower.stop()

    def _view(self) -> StateView:
        view = self.state.view(now_ms())
        self._pending = sum(1 for job in view.jobs if job.state == JobState.PENDING)
        return view

    async def _screen(
        self, stop: asyncio.Event, batches: AsyncIterator[list[LogEntry | BadEntry]]
    ) -> None:
        view = self._view()
        with Live(
            render(view, self.header, list(self.notes)),
            console=self.console,
            refresh_per_second=2,
            transient=False,
        ) as live:
            drawn = time.monotonic()
            async for batch in batches:
                for item in batch:
                    self.state.apply(item)
                if time.monotonic() - drawn >= 1.0 or not batch:
                    live.update(render(self._view(), self.header, list(self.notes)))
                    drawn = time.monotonic()
                if stop.is_set():
                    return

    async def _plain(
        self, stop: asyncio.Event, batches: AsyncIterator[list[LogEntry | BadEntry]]
    ) -> None:
        self._print_summary()
        summarised, shown = self.state.applied_seq, time.monotonic()
        async for batch in batches:
            for item in batch:
                self.state.apply(item)
            for decision in self.state.decisions:
                if decision.seq > self._printed_seq:
                    self._printed_seq = decision.seq
                    extra = f" by {decision.preemptor}" if decision.preemptor else ""
                    reason = f": {decision.reason}" if decision.reason else ""
                    print(
                        f"{decision.time.strftime('%H:%M:%S')} {decision.action} "
                        f"{decision.job} {decision.quota or ''}{extra}{reason}",
                        flush=True,
                    )
            if time.monotonic() - shown >= self.interval_s and self.state.applied_seq != summarised:
                self._print_summary()
                summarised, shown = self.state.applied_seq, time.monotonic()
            else:
                self._pending = sum(
                    1 for v in self.state.engine.jobs().values() if v.state == JobState.PENDING
                )
            if stop.is_set():
                return

    def _print_summary(self) -> None:
        view = self._view()
        lines = [f"== {time.strftime('%H:%M:%S')} {summary_line(view)}"]
        starts = starts_of(view, datetime.now(UTC))
        for queue in view.queues:
            lines.extend(queue_lines(queue, starts))
        lines.extend(quota_line(node) for node in view.quota)
        lines.extend(budget_lines(view))
        lines.extend(view.tree_notes())
        lines.extend(head.describe() for head in view.skipped_heads)
        print("\n".join(lines), flush=True)


async def run_up(
    system: EmbeddedSystem,
    info: StackInfo,
    stopping: threading.Event,
    *,
    demo: bool,
    seed: int,
    plain: bool,
    interval_s: float,
) -> str | None:
    """The running part of ``usher up``: view + demo + process watch until ``stopping``.

    Returns why it stopped on its own (a server keeps dying, the emulator died), or None when
    asked to stop.
    """
    stop = asyncio.Event()
    console = Console()
    header = (
        f"Usher on {info.home}: zones {', '.join(info.zones)}; "
        f"kubectl --kubeconfig {info.kubeconfig} get queue -n kube-queue; "
        "Ctrl-C stops everything"
    )
    # The view follows the log for as long as the system runs: through NATS restarts too.
    async with AsyncClient(target_of_stack(info), reconnect=True) as client:
        view = LiveView(client, console, header=header, plain=plain, interval_s=interval_s)
        tasks = [asyncio.create_task(_guard(view.run(stop), view.note), name="live-view")]
        if demo:
            driver = DemoDriver(
                client,
                seed=seed,
                zones=tuple(info.zones),
                burst_zones=tuple(info.burst_zones),
                say=view.note,
                backlog=view.backlog,
                quota=view.quota,
                fair_share=info.half_life_s is not None,
            )
            tasks.append(asyncio.create_task(_guard(driver.run(stop), view.note), name="demo"))
        reason: str | None = None
        try:
            while not stopping.is_set():
                await asyncio.sleep(0.2)
                for line in system.supervise():
                    view.note(line)
                reason = system.infrastructure_down()
                if reason is not None:
                    break
        finally:
            stop.set()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, timeout=5)
    return reason


async def _guard(work: Coroutine[Any, Any, None], note: Callable[[str], None]) -> None:
    """Run a task; a failure becomes a line, never a traceback."""
    try:
        await work
    except ClientError as exc:
        note(f"usher: {exc.message}")
    except Exception as exc:  # the outermost boundary of a view/demo task: a line, not a trace
        note(f"usher: {type(exc).__name__}: {exc}")
