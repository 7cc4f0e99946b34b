"""The console's web server: aiohttp routes, Jinja2 pages, a server-sent event stream.

What it does: ``make_app`` serves, from one ``ConsoleLog``, the pages (``/`` the quota tree and
the queues at a glance, ``/queues``, ``/queue/<name>`` a page of 100 jobs at a time,
``/job/<namespace>/<name>`` a job's story (an admitted one's topology domain, TP1),
``/clusters`` each cluster's state, zones and jobs (M1) and each topology domain's room (TP1),
``/decisions`` with filters, ``/charts``,
``/replay?seq=N`` the state at a past log position; a parameter that names nothing there or a
page or position out of range is refused with a 400 page saying what is allowed, never clamped
or shown as an empty list), ``/events`` (server-sent events: the log position and each
decision as it is folded in; the pages' script adds rows and refreshes itself) and ``/static``
(the one script, style sheet and icon, shipped in the package: no CDN). Errors are pages of
the site (``error_pages``), with its navigation.
Every answer carries a Content-Security-Policy (own script and style sheet only, no
framing), ``X-Frame-Options: DENY``, ``nosniff`` and ``Referrer-Policy: no-referrer``; a
request whose ``Host`` is not one of the console's own addresses (loopback or the configured
host, with its port) is refused with 421 (DNS rebinding). Numbers in the query are ASCII
digits only (``page=1_0`` is refused, not read as 10).
Pages are rendered on the server with Jinja2 (autoescaped) so they work with no script at all
and stay fast with 10,000 pending jobs (only one page of a queue is ever rendered).
``serve`` follows the log and listens until stopped (SIGTERM or Ctrl-C).
What it must never do: answer anything but GET (it changes nothing), listen beyond
127.0.0.1 unless told to, or put a secret in a page (no URL, no password, no environment).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import msgspec
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from schemas import Preempted, WorkloadKey
from usher.client import AsyncClient
from usher.client.durations import age, estimated_start
from usher.client.state import DecisionInfo, QueuedJob, StateView, now_ms
from usher.client.target import Target
from usher.console import pages
from usher.console.feed import KEEP_DECISIONS, ConsoleLog, Update
from usher.core.engine import queries
from usher.core.history import explain as explaining
from usher.core.history import replay as hist
from usher.core.history.estimate import describe
from usher.core.history.sim import pin_text
from usher.core.values.labels import level_noun

HERE = Path(__file__).resolve().parent
LOG_KEY: web.AppKey[ConsoleLog] = web.AppKey("log", ConsoleLog)
STOP_KEY: web.AppKey[asyncio.Event] = web.AppKey("stop", asyncio.Event)
TEMPLATES_KEY: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)
HOST_KEY: web.AppKey[str] = web.AppKey("host", str)
SHOWN_PER_QUEUE = 10
SHOWN_DECISIONS = 200
KEEPALIVE_S = 15.0

routes = web.RouteTableDef()


CODE_SPAN = re.compile(r"`([^`]+)`")


def code_spans(text: str) -> markupsafe.Markup:
    """``text`` escaped, its `backticked` commands shown as code (messages are written for
    terminals too, where backticks mark a command)."""
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(CODE_SPAN.sub(r"<code>\1</code>", escaped))


def templates() -> jinja2.Environment:
    """The pages' templates (autoescaped: job names and reasons come from users)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["clock"] = lambda when: when.strftime("%H:%M:%S") if when else ""
    env.filters["stamp"] = lambda when: hist.format_datetime(when) if when else "-"
    env.filters["code_spans"] = code_spans
    env.globals["age"] = age
    env.globals["estimated_start"] = estimated_start
    env.globals["pin_text"] = pin_text
    env.filters["level_noun"] = level_noun
    env.filters["moment"] = lambda ms: hist.format_datetime(hist.to_datetime(ms))
    return env


def make_app(
    log: ConsoleLog, stop: asyncio.Event | None = None, host: str = "127.0.0.1"
) -> web.Application:
    """The console over ``log`` (which someone else keeps folding), served on ``host``."""
    app = web.Application(middlewares=[only_its_own_hosts, error_pages])
    app[LOG_KEY] = log
    app[HOST_KEY] = host
    app.on_response_prepare.append(_security_headers)
    app[STOP_KEY] = stop or asyncio.Event()
    app[TEMPLATES_KEY] = templates()
    app.add_routes(routes)
    app.router.add_static("/static", HERE / "static")

    async def end_streams(app: web.Application) -> None:
        app[STOP_KEY].set()  # live streams end, so a graceful shutdown does not wait on them

    app.on_shutdown.append(end_streams)
    return app


def render(request: web.Request, name: str, status: int = 200, **context: Any) -> web.Response:
    log = request.app[LOG_KEY]
    page = request.app[TEMPLATES_KEY].get_template(name)
    text = page.render(seq=log.seq, catching_up=not log.caught_up.is_set(), **context)
    return web.Response(status=status, text=text, content_type="text/html")


class Refusal(Exception):
    """A request the console answers with an error page: its status, what is wrong (naming
    the parameter and what it may be) and links that help (the queues there are, ...)."""

    def __init__(self, status: int, message: str, links: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.links = links or []


@web.middleware
async def error_pages(
    request: web.Request, handler: Callable[[web.Request], Any]
) -> web.StreamResponse:
    """Every error as a page of the site (its navigation, the message escaped), not bare
    text: a ``Refusal``, and aiohttp's own 404 and 405."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except Refusal as exc:
        return _error_page(request, exc.status, exc.message, exc.links)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        what = f"{request.method} {request.path}: {exc.reason}"
        page = _error_page(request, exc.status, what, [])
        for header in ("Allow",):  # a 405 still says what is allowed
            if header in exc.headers:
                page.headers[header] = exc.headers[header]
        return page


def _error_page(
    request: web.Request, status: int, message: str, links: list[tuple[str, str]]
) -> web.Response:
    return render(request, "error.html", status=status, code=status, message=message, links=links)


WHOLE_NUMBER = re.compile(r"-?[0-9]{1,18}")
"""A page or log position as written: ASCII digits only (Python's ``int`` also reads
``1_0``, `` 5 ``, ``+5`` and other scripts' digits), at most 18 of them."""


def _int(request: web.Request, name: str, default: int) -> int:
    """The query parameter ``name`` as a whole number; its range is the caller's to check."""
    raw = request.query.get(name)
    if raw is None:
        return default
    if WHOLE_NUMBER.fullmatch(raw) is None:
        raise Refusal(400, f"{name} must be a whole number; got {raw!r}")
    return int(raw)


# --------------------------------------------------------------------------- who may ask

SECURITY_HEADERS = {
    # The pages use one script and one style sheet from /static; inline style attributes
    # (bar widths, tree indentation, chart colours) need 'unsafe-inline' for styles only.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def allowed_hosts(configured: str, local_address: str, port: int) -> frozenset[str]:
    """The ``Host`` values of the addresses the console serves: loopback by name and number,
    the configured host and the local address the connection came in on, with the port (and
    without it on port 80, as browsers send it)."""
    names = {*LOOPBACK_NAMES, configured, local_address}
    bracketed = {f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names if n}
    hosts = {f"{name}:{port}".lower() for name in bracketed}
    if port == 80:
        hosts |= {name.lower() for name in bracketed}
    return frozenset(hosts)


@web.middleware
async def only_its_own_hosts(
    request: web.Request, handler: Callable[[web.Request], Any]
) -> web.StreamResponse:
    """Refuse a request whose ``Host`` is not one of the console's own addresses (421): a
    page of another site whose name was made to resolve to 127.0.0.1 (DNS rebinding) sends
    its own name, and would otherwise read the console as if it were that site."""
    host = request.headers.get("Host")
    if host is None:
        return web.Response(status=400, text="a Host header is required\n")
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    address, port = (str(sockname[0]), int(sockname[1])) if sockname else ("", 0)
    if host.lower() not in allowed_hosts(request.app[HOST_KEY], address, port):
        return web.Response(status=421, text=f"this console does not serve the host {host!r}\n")
    response: web.StreamResponse = await handler(request)
    return response


# --------------------------------------------------------------------------- pages


@routes.get("/")
async def tree_page(request: web.Request) -> web.Response:
    """The quota tree with bars, the budgets as ``usher budget`` prints them (B1), who borrows
    from whom, each queue's head and why it waits (a held queue marked)."""
    view = request.app[LOG_KEY].view()
    resources = pages.resources_of(view.quota)
    return render(
        request,
        "tree.html",
        view=view,
        resources=resources,
        rows=[(node, pages.quota_bars(node, resources)) for node in view.quota],
        loans=pages.loans(view.quota),
        states=_state_counts(view),
        decisions=list(reversed(view.decisions[-10:])),
        jobs={job.job: job for job in view.jobs},
        now=datetime.now(UTC),
    )


def _state_counts(view: StateView) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for job in view.jobs:
        counts[job.state] = counts.get(job.state, 0) + 1
    return sorted(counts.items())


@routes.get("/queues")
async def queues_page(request: web.Request) -> web.Response:
    """Every queue in order, the first jobs of each."""
    view = request.app[LOG_KEY].view()
    return render(
        request,
        "queues.html",
        view=view,
        shown=SHOWN_PER_QUEUE,
        jobs={job.job: job for job in view.jobs},
        now=datetime.now(UTC),
        blockers=_blockers(
            request.app[LOG_KEY], [e for q in view.queues for e in q.pending[:SHOWN_PER_QUEUE]]
        ),
    )


def _blockers(log: ConsoleLog, entries: list[QueuedJob]) -> dict[str, str]:
    """Job -> the job in its way, for the shown rows whose reason names one as data
    (``Reason.blocker``: BlockedByHead, HeldForPreemptor, ...), never parsed from the text;
    only where the reason now has the row's code, so the link matches the words beside it."""
    out: dict[str, str] = {}
    for entry in entries:
        reason = log.people.engine.reason_now(WorkloadKey(entry.job))
        if reason is not None and reason.blocker and reason.code == entry.reason_code:
            out[entry.job] = reason.blocker
    return out


@routes.get("/queue/{name}")
async def queue_page(request: web.Request) -> web.Response:
    """One queue, a page of its pending jobs in order with their reasons."""
    log = request.app[LOG_KEY]
    view = log.view()
    name = request.match_info["name"]
    queue = next((q for q in view.queues if q.name == name), None)
    if queue is None:
        known = ", ".join(q.name for q in view.queues) or "none: no quota tree is in force"
        raise Refusal(
            404,
            f"no queue {name!r} in the tree in force (queues: {known})",
            [(f"/queue/{q.name}", q.name) for q in view.queues],
        )
    try:
        page = pages.paginate(queue.pending, _int(request, "page", 1))
    except pages.OutOfRange as exc:
        raise Refusal(400, f"queue {name}: {exc}") from exc
    return render(
        request,
        "queue.html",
        view=view,
        queue=queue,
        page=page,
        jobs={job.job: job for job in view.jobs},
        now=datetime.now(UTC),
        blockers=_blockers(log, page.items),
    )


@routes.get("/job/{namespace}/{name}")
async def job_page(request: web.Request) -> web.Response:
    """A job's whole story from the log, as ``usher explain`` tells it; a pending one's
    estimated start first as ``usher jobs --start`` words it, then as ``explain`` does."""
    log = request.app[LOG_KEY]
    key = WorkloadKey(f"{request.match_info['namespace']}/{request.match_info['name']}")
    history = log.history()
    try:
        story = explaining.explain(history, log.config, key, now_ms())
    except explaining.UnknownWorkload as exc:
        raise Refusal(
            404,
            f"no job {key} on the log: Usher has never seen it (the queues list every pending "
            f"job, the decisions every admitted one; `usher jobs` lists them all)",
            [("/queues", "Queues"), ("/decisions", "Decisions")],
        ) from exc
    info = log.people.job(key)
    return render(
        request,
        "job.html",
        story=story,
        info=info,
        others=_other_jobs(history, key),
        waited=age(info.created if info else None, datetime.now(UTC)),
        start=describe(story.estimate) if story.estimate is not None else None,
        start_words=estimated_start(story.estimate, datetime.now(UTC), why=True),
    )


def _other_jobs(history: hist.History, key: WorkloadKey) -> dict[int, str]:
    """Log position -> the other job of a preemption about ``key`` (its preemptor, or the
    job it preempted), for links on the timeline."""
    out: dict[int, str] = {}
    for item in history.items:
        event = item.event
        if isinstance(event, Preempted):
            if event.workload == key:
                out[item.seq] = event.preemptor
            elif event.preemptor == key:
                out[item.seq] = event.workload
    return out


@routes.get("/clusters")
async def clusters_page(request: web.Request) -> web.Response:
    """Each cluster the log spoke of (M1): its state since when and why, its zones, its
    admitted and waiting jobs; each domain of each topology level (TP1): what its nodes
    allocate, what pinned admissions use there, what is free. Both as the core folds them."""
    log = request.app[LOG_KEY]
    engine = log.people.engine
    resources, domains = pages.domain_rows(queries.domain_use(engine))
    return render(
        request,
        "clusters.html",
        clusters=queries.clusters(engine),
        resources=resources,
        domains=domains,
    )


@routes.get("/decisions")
async def decisions_page(request: web.Request) -> web.Response:
    """The decision stream, newest first, filtered by queue, namespace and action."""
    log = request.app[LOG_KEY]
    wanted = pages.DecisionFilter(
        queue=request.query.get("queue", ""),
        namespace=request.query.get("namespace", ""),
        action=request.query.get("action", ""),
    )
    names = log.queue_names()
    queues = sorted(set(names.values()))
    namespaces = sorted(
        {ns for node in log.view().quota for ns in node.namespaces}
        | {d.job.partition("/")[0] for d in log.people.decisions}
    )
    problem = pages.filter_problem(wanted, queues, namespaces)
    if problem is not None:
        raise Refusal(400, problem, [("/decisions", "every decision")])
    before = _int(request, "before", 0) if "before" in request.query else None
    if before is not None and before < 1:
        raise Refusal(400, f"before must be a log position of 1 or more; got {before}")
    kept = [d for d in log.people.decisions if pages.keep_decision(d, wanted, names)]
    shown = pages.page_of_decisions(kept, before, SHOWN_DECISIONS)
    return render(
        request,
        "decisions.html",
        wanted=wanted,
        shown=shown,
        decisions=shown.items,
        live=before is None,
        kept_at_most=KEEP_DECISIONS,
        query={k: v for k, v in request.query.items() if k != "before" and v},
        queues=queues,
        namespaces=namespaces,
        actions=pages.ACTIONS,
        names=names,
    )


@routes.get("/charts")
async def charts_page(request: web.Request) -> web.Response:
    """Pending and admitted jobs per queue, and wait times, over the last hours of the log."""
    log = request.app[LOG_KEY]
    samples = list(log.samples)
    if log.items:
        samples.append(log.sample_now(log.items[-1].time_ms))
    pending: dict[str, list[tuple[int, float]]] = {}
    admitted: dict[str, list[tuple[int, float]]] = {}
    for sample in samples:
        for queue in set(sample.pending) | set(sample.admitted):
            pending.setdefault(queue, []).append((sample.time_ms, sample.pending.get(queue, 0)))
            admitted.setdefault(queue, []).append((sample.time_ms, sample.admitted.get(queue, 0)))
    waits: dict[str, list[tuple[int, float]]] = {}
    for wait in log.waits:
        waits.setdefault(wait.queue, []).append((wait.time_ms, wait.wait_s))
    span = pages.time_span(pending, admitted, waits)  # one time axis for every chart
    jobs, seconds = pages.Unit("job", "jobs"), pages.Unit("s", "s")
    charts = [
        pages.line_chart("Pending jobs per queue", pending, jobs, span),
        pages.line_chart("Admitted jobs per queue", admitted, jobs, span),
        pages.dot_chart("Wait from creation to admission", waits, seconds, span),
    ]
    return render(request, "charts.html", charts=charts)


@routes.get("/replay")
async def replay_page(request: web.Request) -> web.Response:
    """Time travel: the state at log position ``seq``, rebuilt from the log alone exactly as
    ``usher replay --seq N`` rebuilds it (the same function, the same text)."""
    log = request.app[LOG_KEY]
    last = log.seq
    seq = _int(request, "seq", last)
    if not 0 <= seq <= last:
        raise Refusal(
            400, f"seq must be a log position from 0 to {last} (the last read); got {seq}"
        )
    state = hist.replay(log.history(), log.config, until_seq=seq)
    quota = pages.replay_quota(state.quota)
    resources = pages.resources_of(quota)
    return render(
        request,
        "replay.html",
        state=state,
        resources=resources,
        quota=[(node, pages.quota_bars(node, resources)) for node in quota],
        at=seq,
        last=last,
        text=hist.render_replay_table(state),
    )


@routes.get("/favicon.ico")
async def favicon(request: web.Request) -> web.FileResponse:
    """The site's icon where browsers look for it without asking the page."""
    return web.FileResponse(
        HERE / "static" / "favicon.svg", headers={"Content-Type": "image/svg+xml"}
    )


@routes.get("/healthz")
async def health(request: web.Request) -> web.Response:
    """200 once the log is read to the end seen at start, 503 before."""
    log = request.app[LOG_KEY]
    ready = log.caught_up.is_set()
    return web.Response(status=200 if ready else 503, text=f"seq {log.seq}\n")


# --------------------------------------------------------------------------- live stream


def decision_json(decision: DecisionInfo, names: dict[str, str]) -> bytes:
    """What the pages' script needs to draw a decision's row."""
    return msgspec.json.encode(
        {
            "seq": decision.seq,
            "time_ms": int(decision.time.timestamp() * 1000),
            "clock": decision.time.strftime("%H:%M:%S"),
            "action": decision.action,
            "job": decision.job,
            "namespace": decision.job.partition("/")[0],
            "quota": decision.quota or "",
            "queue": names.get(decision.quota or "", ""),
            "reason": decision.reason or "",
            "preemptor": decision.preemptor or "",
        }
    )


def _event(update: Update, names: dict[str, str]) -> bytes:
    if update.decision is None:
        return b"event: seq\ndata: %d\n\n" % update.seq
    return b"event: decision\ndata: " + decision_json(update.decision, names) + b"\n\n"


@routes.get("/events")
async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: ``seq`` (the log position) and ``decision`` (one row's data)."""
    log, stop = request.app[LOG_KEY], request.app[STOP_KEY]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    stream = log.stream()
    try:
        await response.write(b"retry: 1000\nevent: seq\ndata: %d\n\n" % log.seq)
        idle = 0.0
        while not stop.is_set():
            try:
                update = await asyncio.wait_for(stream.get(), timeout=1.0)
            except TimeoutError:
                idle += 1.0
                if idle >= KEEPALIVE_S:
                    await response.write(b": keepalive\n\n")
                    idle = 0.0
                continue
            idle = 0.0
            await response.write(_event(update, log.queue_names()))
    except (ConnectionResetError, ConnectionError):
        pass  # the page went away
    finally:
        log.close_stream(stream)
    return response


# --------------------------------------------------------------------------- running


class OneLineBadRequests(logging.Filter):
    """aiohttp logs a request it cannot parse (no ``Host``, a 10 KB URL) with its traceback:
    anyone who can reach the port could fill the console's log with them. Such a record keeps
    one line naming the error; every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg = "refused a malformed request: %s: %s"
            record.args = (type(exc).__name__, str(exc)[:200])
            record.exc_info, record.exc_text = None, None
        return True


BAD_REQUESTS = OneLineBadRequests()


async def serve(
    target: Target,
    host: str,
    port: int,
    *,
    say: Callable[[str], None] = print,
    startup_timeout_s: float = 30.0,
    listening: socket.socket | None = None,
) -> None:
    """Follow ``target``'s log and serve the console on ``host:port`` until SIGTERM/Ctrl-C;
    on ``listening`` instead when given (a socket ``usher up`` bound and holds, so that the
    port stays its own across the console's restarts)."""
    stop = asyncio.Event()
    logging.getLogger("aiohttp.server").addFilter(BAD_REQUESTS)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with AsyncClient(target, reconnect=True, timeout_s=startup_timeout_s) as client:
        js = await client.jetstream()
        log = ConsoleLog(target.engine)
        following = asyncio.create_task(log.follow(js, client.subjects, stop), name="follow")
        runner = web.AppRunner(make_app(log, stop, host), access_log=None)
        await runner.setup()
        try:
            site = (
                web.TCPSite(runner, host, port)
                if listening is None
                else web.SockSite(runner, listening)
            )
            await site.start()
            say(f"console on http://{host}:{port}/ (read-only; Ctrl-C stops it)")
            await asyncio.wait(
                {following, asyncio.ensure_future(stop.wait())},
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            stop.set()
            await runner.cleanup()
            with contextlib.suppress(asyncio.CancelledError):
                await following  # a follower that failed raises here: it says why
