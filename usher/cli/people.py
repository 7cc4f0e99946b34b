"""``usher apply | submit | wait | jobs | queues | queue | quota``: the commands people type.

What it does: talks to the running ``usher up`` (``$USHER_HOME/stack.json``) or, with
``--kubeconfig`` and ``--nats``, to any installation, through ``usher.client``: applies
manifest files (create or update, like kubectl), submits suspended jobs built from a few
options (Arena/jobctl style) and follows them with ``--wait``, and shows jobs, queues and the
quota tree as tables for people or ``-o json|yaml`` for scripts.

Exit codes: 0 done; 1 a waited-for job failed, was rejected or can never run; 2 usage; 3 bad
input (missing file, invalid YAML or manifest, unknown job, queue or namespace, refused by the
API); 4 nothing to talk to (no stack running, a server unreachable); 5 ``--wait`` timed out.
What it must never do: print a traceback or a secret, or decide anything itself.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import msgspec

from usher.cli import (
    EXIT_BAD_INPUT,
    EXIT_DIFFERENCES,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    cli,
    fail,
    home_option,
    import_nats_without_websockets,
)
from usher.cli.fanout import fan_out_of, report_group, submit_group
from usher.cli.values import (
    DURATION,
    GROUP,
    QUANTITY_CPU,
    QUANTITY_GPU,
    QUANTITY_MEMORY,
    REPLICAS,
    ZONE,
)
from usher.client.durations import age, estimated_start
from usher.client.errors import (
    BadInput,
    ClientError,
    GroupIncomplete,
    NotFound,
    NotRunning,
    Refused,
    WaitTimeout,
)
from usher.client.target import resolve_target
from usher.client.timing import UNKNOWN_GRACE_S
from usher.core.state.indexed import ENGINE_STATES, JobState

if TYPE_CHECKING:
    # Imported where used (``_client``): a command's start-up is what it imports.
    from usher.client import AsyncClient, JobInfo, QueueInfo, QuotaInfo, StateView

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

EXIT_JOB_FAILED = EXIT_DIFFERENCES
"""1: the job ended otherwise than asked (failed, rejected, inadmissible)."""
EXIT_TIMEOUT = 5
"""5: ``--wait`` ran out of time; the job may still finish."""
OUTPUTS = ("table", "json", "yaml")


# --------------------------------------------------------------------------- plumbing


def target_options(command: F) -> F:
    """``--home``, ``--kubeconfig``, ``--nats``, ``--prefix``: which Usher to talk to."""
    for option in reversed(
        (
            home_option("Folder of the running `usher up` (default $USHER_HOME)."),
            click.option(
                "--kubeconfig",
                default=None,
                help="Kubernetes API of a real installation (default: the stack's).",
            ),
            click.option(
                "--nats",
                "nats_url",
                default=None,
                help="NATS of a real installation (default: the stack's).",
            ),
            click.option("--prefix", default=None, help="Subject prefix (default usher)."),
        )
    ):
        command = option(command)
    return command


def output_option(command: F) -> F:
    return click.option(
        "-o",
        "--output",
        type=click.Choice(OUTPUTS),
        default="table",
        show_default=True,
        help="table for people, json or yaml for scripts.",
    )(command)


def _client(options: dict[str, Any]) -> AsyncClient:
    target = resolve_target(
        home=options.get("home"),
        kubeconfig=options.get("kubeconfig"),
        nats_url=options.get("nats_url"),
        prefix=options.get("prefix"),
    )
    import_nats_without_websockets(target.nats_url)
    from usher.client.client import AsyncClient  # NATS and the core: imported when used

    return AsyncClient(target)


def run(options: dict[str, Any], work: Callable[[AsyncClient], Coroutine[Any, Any, T]]) -> T:
    """Run ``work`` with a client; every ``ClientError`` becomes lines and an exit code."""

    async def main() -> T:
        async with _client(options) as client:
            return await work(client)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except ClientError as exc:
        for line in exc.lines[:-1]:
            click.echo(f"usher: {line}", err=True)
        fail(exc.lines[-1], _exit_code(exc))


def _exit_code(exc: ClientError) -> int:
    if isinstance(exc, GroupIncomplete):  # the lines say what was created and what not
        if exc.interrupted:
            return EXIT_INTERRUPTED
        return _exit_code(exc.cause) if exc.cause is not None else EXIT_BAD_INPUT
    if isinstance(exc, NotRunning):
        return EXIT_UNAVAILABLE
    if isinstance(exc, WaitTimeout):
        return EXIT_TIMEOUT
    if isinstance(exc, BadInput | NotFound | Refused):
        return EXIT_BAD_INPUT
    return EXIT_BAD_INPUT


def emit(data: object, output: str, table: Callable[[], str]) -> None:
    """Print ``data`` as JSON/YAML, or the table ``table()`` builds."""
    if output == "json":
        click.echo(msgspec.json.format(msgspec.json.encode(data), indent=2).decode())
    elif output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(msgspec.to_builtins(data), sort_keys=False).rstrip())
    else:
        click.echo(table())


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned like kubectl's (3 spaces apart), the last one left ragged."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *[list(r) for r in rows]]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


def _reason(job: JobInfo) -> str:
    if job.state == JobState.FINISHED:
        return "succeeded" if job.succeeded is not False else "failed"
    text = f"{job.reason_code}: {job.reason}" if job.reason_code else (job.reason or "")
    if job.preemptions:
        text = f"{text} (preempted {job.preemptions}x)".lstrip()
    return text


# --------------------------------------------------------------------------- apply


@cli.command()
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    required=True,
    type=click.Path(path_type=Path),
    help="Manifest file (multi-document YAML).",
)
@target_options
def apply(files: tuple[Path, ...], **options: Any) -> None:
    """Create or update the manifests of FILES (like kubectl apply).

    Handles ElasticQuotaTree, PriorityClass, Namespace, Node, ConfigMap and the job kinds
    Usher admits. Every document is checked first (quota trees and jobs by Usher's own
    rules): a file with a mistake changes nothing. A job with generateName is created anew.
    """
    for path in files:  # read and check every file before anything is sent
        run_checks = _check_file(path)
        if run_checks is not None:
            for line in run_checks[:-1]:
                click.echo(f"usher: {line}", err=True)
            fail(run_checks[-1], EXIT_BAD_INPUT)

    async def work(client: AsyncClient) -> None:
        for path in files:
            for applied in await client.apply(path):
                if applied.warning:
                    click.echo(f"warning: {applied.warning}", err=True)
                click.echo(f"{applied.label}/{applied.name} {applied.action}")

    run(options, work)


def _check_file(path: Path) -> list[str] | None:
    from usher.client.manifests import load_documents

    try:
        load_documents(path)
    except BadInput as exc:
        return exc.lines
    return None


# --------------------------------------------------------------------------- submit / wait


def _show_progress(job: JobInfo) -> None:
    stamp = datetime.now().strftime("%H:%M:%S")
    if job.state == JobState.PENDING:
        where = f"#{job.position} in {job.queue}" if job.position else (job.queue or "")
        detail = f"{where}: {_reason(job)}"
    elif job.state == JobState.ADMITTED:
        detail = f"in {job.quota} (queue {job.queue}, zone {job.zone or 'default'})"
        if job.preemptions:
            detail += f", after {job.preemptions} preemption(s)"
    else:
        detail = _reason(job)
    click.echo(f"{stamp}  {job.job}  {job.state}  {detail}".rstrip())


def _finish_wait(job: JobInfo, until: str) -> None:
    if until == "admitted" and job.state == JobState.ADMITTED:
        return
    if job.state == JobState.FINISHED and job.succeeded is not False:
        return
    what = "failed" if job.state == JobState.FINISHED else f"is {job.state}: {_reason(job)}"
    fail(f"job {job.job} {what}", EXIT_JOB_FAILED)


@cli.command()
@click.argument("args", nargs=-1)
@click.option("--name", default=None, help="Job name (default: generated from the image).")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("--image", default=None, help="Container image (builds the job from options).")
@click.option("--cpu", type=QUANTITY_CPU, default=None, help="Per pod, e.g. 2 or 500m.")
@click.option("--memory", type=QUANTITY_MEMORY, default=None, help="Per pod, e.g. 4Gi.")
@click.option("--gpu", type=QUANTITY_GPU, default=None, help="nvidia.com/gpu per pod.")
@click.option(
    "--replicas",
    type=REPLICAS,
    default=1,
    show_default=True,
    help="Pods, all admitted together (parallelism = completions).",
)
@click.option("--priority-class", default=None)
@click.option(
    "--zone", type=ZONE, default=None, help="Label usher.io/zone (default: zone default)."
)
@click.option(
    "--any-zone",
    is_flag=True,
    help="Accept a zone no dequeuer serves yet (the job waits ZoneNotServed until one does).",
)
@click.option(
    "--duration",
    type=DURATION,
    default=None,
    help="Seconds the emulator runs it (annotation usher.io/sim-duration).",
)
@click.option("--label", "labels", multiple=True, help="KEY=VALUE, repeatable.")
@click.option(
    "--for-each-day",
    default=None,
    metavar="[VAR=]FIRST..LAST",
    help="One job per day (e.g. 2026-01-01..2026-03-31, at most 10000), named NAME-DAY, the"
    " day in $VAR (default DAY); all of one group.",
)
@click.option("--weekdays", is_flag=True, help="With --for-each-day: Monday to Friday only.")
@click.option(
    "--calendar",
    default=None,
    metavar="FILE",
    help="With --for-each-day: only the days FILE lists (one YYYY-MM-DD a line, # comments).",
)
@click.option(
    "--for-each",
    default=None,
    metavar="VAR=V1,V2,...",
    help="One job per value, named NAME-VALUE, the value in $VAR; all of one group.",
)
@click.option(
    "--group",
    type=GROUP,
    default=None,
    help="With a fan-out: the group's name (label usher.io/group; default: --name).",
)
@click.option("--wait", is_flag=True, help="Follow the job (or group) until it finishes.")
@click.option("--timeout", type=DURATION, default=None, help="Seconds --wait waits at most.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Create nothing: say where it would go, whether the next pass admits it, whom it "
    "would preempt and when it likely starts.",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(OUTPUTS),
    default="table",
    show_default=True,
    help="With --dry-run: table for people, json or yaml for scripts.",
)
@target_options
def submit(
    args: tuple[str, ...],
    name: str | None,
    namespace: str,
    image: str | None,
    cpu: str | None,
    memory: str | None,
    gpu: str | None,
    replicas: int,
    priority_class: str | None,
    zone: str | None,
    any_zone: bool,
    duration: float | None,
    labels: tuple[str, ...],
    for_each_day: str | None,
    weekdays: bool,
    calendar: str | None,
    for_each: str | None,
    group: str | None,
    wait: bool,
    timeout: float | None,
    dry_run: bool,
    output: str,
    **options: Any,
) -> None:
    """Submit a suspended job: `usher submit FILE`, or build one from options:

    usher submit --name pi -n user-a --image perl:5.34.0 --cpu 10 --memory 10Gi
    --replicas 6 -- sleep 1d

    Usher admits it when its quota allows; --wait follows it (position and reason while
    pending, then admitted, then finished) and exits 0 only when it succeeded. --dry-run
    creates nothing and says what would happen (each job of a file tried alone).

    --for-each-day and --for-each submit one job per day or value, all of one group
    (usher jobs/wait/delete --group); --wait then follows the group and exits 1 if any job
    failed, naming each. Ctrl-C or an API failure part-way says which jobs were created.
    """
    fan_out = fan_out_of(for_each_day, weekdays, calendar, for_each)
    if fan_out is None and group is not None:
        fail("--group goes with --for-each-day or --for-each", EXIT_USAGE)
    if fan_out is not None and (image is None or dry_run):
        fail("--for-each-day and --for-each build jobs from --image (no FILE, no --dry-run)",
             EXIT_USAGE)  # fmt: skip
    if dry_run and wait:
        fail("--dry-run creates nothing to --wait for", EXIT_USAGE)
    if output != "table" and not dry_run:
        fail("-o is for --dry-run (submit prints what it created)", EXIT_USAGE)
    label_map: dict[str, str] = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--label {item!r}: expected KEY=VALUE", EXIT_USAGE)
        label_map[key] = value
    if image is None:
        if len(args) != 1:
            fail("give a manifest FILE, or --image (and the command after --)", EXIT_USAGE)
        manifests = workload_manifests(Path(args[0]))

    if dry_run:
        request = {
            "name": name,
            "namespace": namespace,
            "image": image,
            "cpu": cpu,
            "memory": memory,
            "gpu": gpu,
            "replicas": replicas,
            "priority_class": priority_class,
            "zone": zone,
            "duration": duration,
            "command": args,
            "labels": label_map,
        }
        source = None if image is not None else (args[0], manifests)
        _submit_dry_run(options, request, source, output)
        return

    async def work(client: AsyncClient) -> None:
        if fan_out is not None and image is not None:
            from usher.client.manifests import JobRequest

            request = JobRequest(
                namespace=namespace,
                image=image,
                name=name,
                cpu=cpu,
                memory=memory,
                gpu=gpu,
                replicas=replicas,
                priority_class=priority_class,
                zone=zone,
                duration_s=duration,
                command=args,
                labels=label_map,
            )
            made = await submit_group(
                client, fan_out, request, group=group, check_zone=not any_zone
            )
            if wait:
                done = await client.wait_group(
                    made, namespace, timeout=timeout, on_change=_show_progress
                )
                report_group(done, "done")
            return
        if image is not None:
            submitted = [
                await client.submit(
                    name,
                    namespace=namespace,
                    image=image,
                    cpu=cpu,
                    memory=memory,
                    gpu=gpu,
                    replicas=replicas,
                    priority_class=priority_class,
                    zone=zone,
                    duration=duration,
                    command=args,
                    labels=label_map,
                    check_zone=not any_zone,
                )
            ]
        else:
            submitted = [
                await client.submit_manifest(m, source=args[0], index=i, check_zone=not any_zone)
                for i, m in enumerate(manifests, start=1)
            ]
        for item in submitted:
            click.echo(f"{item.label} created")
        if wait:
            for item in submitted:
                final = await client.wait(item.job, timeout=timeout, on_change=_show_progress)
                _finish_wait(final, "done")

    run(options, work)


def _submit_dry_run(
    options: dict[str, Any],
    request: dict[str, Any],
    source: tuple[str, list[dict[str, Any]]] | None,
    output: str,
) -> None:
    """``submit --dry-run``: the job built from ``request`` (options), or each of ``source``."""
    from usher.client.manifests import workload_document
    from usher.core.history.dryrun import DryRun, render_dry_runs_json, render_dry_runs_table

    if source is not None:  # a mistake in the file is named before anything is asked
        path, manifests = source
        for index, manifest in enumerate(manifests, 1):
            try:
                workload_document(manifest, source=path, index=index)
            except BadInput as exc:
                for line in exc.lines[:-1]:
                    click.echo(f"usher: {line}", err=True)
                fail(exc.lines[-1], EXIT_BAD_INPUT)

    async def work(client: AsyncClient) -> list[DryRun]:
        if source is None:
            return [await client.dry_run_job(**request)]
        path, manifests = source
        return [await client.dry_run(m, source=path, index=i) for i, m in enumerate(manifests, 1)]

    results = run(options, work)
    if output == "table":
        click.echo(render_dry_runs_table(results), nl=False)
    elif output == "json":
        click.echo(render_dry_runs_json(results), nl=False)
    else:
        import json

        import yaml

        loaded = json.loads(render_dry_runs_json(results))
        click.echo(yaml.safe_dump(loaded, sort_keys=False), nl=False)


def workload_manifests(path: Path) -> list[dict[str, Any]]:
    from usher.client.manifests import KINDS, read_yaml_documents

    try:
        documents = read_yaml_documents(path)
    except BadInput as exc:
        fail(exc.message, EXIT_BAD_INPUT)
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(documents, start=1):
        if not isinstance(doc, dict):
            fail(f"{path}: document {index}: expected a job manifest", EXIT_BAD_INPUT)
        kind = KINDS.get((str(doc.get("apiVersion")), str(doc.get("kind"))))
        if kind is None or not kind.is_workload:
            what = doc.get("kind") or "a manifest without kind"
            fail(
                f"{path}: document {index}: usher submit takes jobs, not {what} "
                "(use usher apply -f)",
                EXIT_BAD_INPUT,
            )
        out.append(doc)
    if not out:
        fail(f"{path}: no manifests in the file", EXIT_BAD_INPUT)
    return out


@cli.command("wait")
@click.argument("job", required=False)
@click.option("-n", "--namespace", default=None, help="When JOB is a bare name.")
@click.option(
    "--group",
    type=GROUP,
    default=None,
    help="Instead of JOB: every job of this group (a fan-out); exit 1 if any failed.",
)
@click.option(
    "--for",
    "until",
    type=click.Choice(["done", "admitted"]),
    default="done",
    show_default=True,
    help="Until the job finishes, or until it is admitted.",
)
@click.option("--timeout", type=DURATION, default=None, help="Seconds to wait at most.")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=UNKNOWN_GRACE_S,
    show_default=True,
    help="Seconds to wait for a job Usher has not seen yet before saying it is unknown (exit 3).",
)
@target_options
def wait_command(
    job: str | None,
    namespace: str | None,
    group: str | None,
    until: str,
    timeout: float | None,
    grace: float,
    **options: Any,
) -> None:
    """Follow JOB (namespace/name), or every job of --group, and exit 0 when it succeeded (or
    was admitted); for a group, exit 1 naming every job that did not."""
    if (job is None) == (group is None):
        fail("give a JOB or --group (one of them)", EXIT_USAGE)
    if group is not None:
        result = run(
            options,
            lambda client: client.wait_group(
                group,
                namespace,
                until=until,
                timeout=timeout,
                on_change=_show_progress,
                grace=grace,
            ),
        )
        report_group(result, until)
        return
    assert job is not None

    async def work(client: AsyncClient) -> JobInfo:
        return await client.wait(
            job,
            namespace,
            until=until,
            timeout=timeout,
            on_change=_show_progress,
            grace=grace,
        )

    _finish_wait(run(options, work), until)


@click.command("delete")
@click.argument("job", metavar="NS/NAME", required=False)
@click.option("-n", "--namespace", default=None, help="When JOB is a bare name.")
@click.option(
    "--kind", default=None, help="Job, TFJob, PyTorchJob... (only when two kinds share NAME)."
)
@click.option(
    "--group", type=GROUP, default=None, help="Instead of JOB: every job of this group (fan-out)."
)
@target_options
def delete_command(
    job: str | None, namespace: str | None, kind: str | None, group: str | None, **options: Any
) -> None:
    """Delete (cancel) a job of any kind Usher admits, or every job of --group; Usher releases
    their quota.

    Like kubectl delete: a pending job leaves its queue, a running one stops.
    """
    if (job is None) == (group is None):
        fail("give a JOB or --group (one of them)", EXIT_USAGE)
    if group is not None:
        gone = run(
            options,
            lambda client: client.delete_group(
                group, namespace, on_deleted=lambda d: click.echo(f"{d.label} deleted")
            ),
        )
        click.echo(f"group {group}: {len(gone)} jobs deleted")
        return
    assert job is not None
    deleted = run(options, lambda client: client.delete(job, namespace, kind=kind))
    click.echo(f"{deleted.label} deleted")


cli.add_command(delete_command)
cli.add_command(delete_command, "cancel")


# --------------------------------------------------------------------------- reading


@cli.command()
@click.option("-n", "--namespace", default=None, help="Only this namespace.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([state.value for state in (*ENGINE_STATES, JobState.REJECTED)]),
    help="Only jobs in this state (repeatable).",
)
@click.option(
    "--start",
    "show_start",
    is_flag=True,
    help="Add START: a pending job's estimated start from now (p50, with p25-p75).",
)
@click.option("--group", type=GROUP, default=None, help="Only the jobs of this group (a fan-out).")
@output_option
@target_options
def jobs(
    namespace: str | None,
    states: tuple[str, ...],
    show_start: bool,
    group: str | None,
    output: str,
    **options: Any,
) -> None:
    """Every job Usher knows: state, queue, position, priority, zone, the topology domain an
    admitted one is pinned to (DOMAIN, when some is) and why it waits (-o json and --start:
    when a pending one likely starts)."""

    async def work(client: AsyncClient) -> list[JobInfo]:
        found = await client.list_jobs(namespace, states=states or None, group=group)
        if namespace is not None and not found:
            taken = await client.namespaces()
            if taken and namespace not in taken:
                raise NotFound(
                    f"no namespace {namespace!r} in Usher: no job there, and no leaf of the "
                    f"quota tree takes it (namespaces with a queue: {', '.join(sorted(taken))})"
                )
        return found

    found = run(options, work)

    def table() -> str:
        if not found:
            which = f"{' or '.join(states)} jobs" if states else "jobs"
            which += f" of group {group}" if group else ""
            return f"No {which}{f' in namespace {namespace}' if namespace else ''}."
        rows = [
            [
                j.namespace,
                j.name,
                j.state,
                j.queue or "-",
                str(j.position) if j.position else "-",
                str(j.priority),
                j.zone or "-",
                age(j.created, datetime.now(UTC)),
                _reason(j),
            ]
            for j in found
        ]
        headers = ["NAMESPACE", "NAME", "STATE", "QUEUE", "POS", "PRIO", "ZONE", "AGE", "REASON"]
        if any(j.topology for j in found):
            # Only while some job is pinned to a topology domain (TP1), like HOLD in queues.
            from usher.core.history.sim import pin_text

            for row, j in zip(rows, found, strict=True):
                row.insert(-2, pin_text(j.topology) if j.topology else "-")
            headers.insert(-2, "DOMAIN")
        if show_start:
            now = datetime.now(UTC)
            for row, j in zip(rows, found, strict=True):
                row.insert(-1, estimated_start(j.estimate, now))
            headers.insert(-1, "START")
        return render_table(headers, rows)

    emit(found, output, table)


@cli.command()
@output_option
@target_options
def queues(output: str, **options: Any) -> None:
    """One queue per leaf of the quota tree: how many wait, how many run, who is next."""
    found: list[QueueInfo] = run(options, lambda client: client.queues())

    def table() -> str:
        if not found:
            return "No queues: no quota tree is in force (usher apply -f a tree)."
        rows = [
            [
                q.name,
                q.quota,
                q.policy,
                str(len(q.pending)),
                str(len(q.admitted)),
                ",".join(q.namespaces),
                q.pending[0].job if q.pending else "-",
            ]
            for q in found
        ]
        headers = ["NAME", "QUOTA", "POLICY", "PENDING", "ADMITTED", "NAMESPACES", "NEXT"]
        if any(q.hold for q in found):
            # Only while something is held (R14): the usual table stays as it always was.
            headers.append("HOLD")
            for row, q in zip(rows, found, strict=True):
                row.append(q.hold or "-")
        if any(q.budget for q in found):
            # Only while a budget is spent (B1), like HOLD.
            headers.append("BUDGET")
            for row, q in zip(rows, found, strict=True):
                row.append(q.budget or "-")
        return render_table(headers, rows)

    emit(found, output, table)


@cli.command()
@click.argument("name")
@output_option
@target_options
def queue(name: str, output: str, **options: Any) -> None:
    """One queue in order: position, job, priority and why each waits."""
    found: QueueInfo = run(options, lambda client: client.queue(name))

    def table() -> str:
        head = (
            f"Queue {found.name}: quota {found.quota}, policy {found.policy}, "
            f"namespaces {', '.join(found.namespaces) or '-'}"
        )
        if found.hold:
            head += f"\nHeld: {found.hold}"
        if found.budget:
            head += f"\nBudget spent: {found.budget}"
        running = f"Admitted ({len(found.admitted)}): {', '.join(found.admitted) or '-'}"
        if not found.pending:
            return f"{head}\n{running}\nNo job waits."
        rows = [
            [
                str(e.position),
                e.job,
                str(e.priority),
                f"{e.reason_code}: {e.reason}" if e.reason_code else (e.reason or ""),
            ]
            for e in found.pending
        ]
        return f"{head}\n{running}\n" + render_table(["POS", "JOB", "PRIO", "REASON"], rows)

    emit(found, output, table)


@cli.command()
@output_option
@target_options
def quota(output: str, **options: Any) -> None:
    """The quota tree in force: used / min / max of every node and resource."""
    view: StateView = run(options, lambda client: client.view())
    found: list[QuotaInfo] = view.quota
    notes = [
        event.describe() for event in (view.tree_rejection, view.tree_deleted) if event is not None
    ]
    if output != "table":
        for note in notes:
            click.echo(f"usher: {note}", err=True)  # stdout stays the documented list

    def table() -> str:
        if not found:
            return "\n".join([*notes, "No quota tree is in force (usher apply -f a tree)."])
        note = notes
        resources: list[str] = []
        for node in found:
            resources.extend(r for r in node.max if r not in resources)
        rows = []
        for node in found:
            cells = ["  " * node.depth + node.path.rsplit("/", 1)[-1]]
            for r in resources:
                if r in node.max:
                    used = node.used.get(r, "0")
                    cells.append(f"{used}/{node.min.get(r, '0')}/{node.max[r]}")
                else:
                    cells.append("-")
            cells.append(node.queue or "")
            rows.append(cells)
        headers = ["NODE", *[f"{r.upper()} used/min/max" for r in resources], "QUEUE"]
        return "\n".join([*note, render_table(headers, rows)])

    emit(found, output, table)
