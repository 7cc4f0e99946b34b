"""``usher status`` and ``usher down``: the one-machine stack that ``usher up`` runs.

What it does: reads ``$USHER_HOME/stack.json``; ``status`` shows every process of the stack
(alive or not, how often ``usher up`` restarted it, crash-looping), its addresses with
passwords hidden, zones and settings; ``down`` asks the ``usher up`` that owns the stack to
stop (SIGTERM, as Ctrl-C would), waits until it and every process it started are gone, and
says so.
Each service's ``/healthz`` (port in ``stack.json``) is asked too: one whose NATS connection
is down past its limit, or keeps being lost, is "unhealthy" with the reason.
Exit codes: 0 done (status: every process alive and well); 1 status: some process is not
alive (being restarted, or the stack is stale), unhealthy, was restarted less than
``STABLE_S`` ago, or is crash-looping (``CRASH_LOOP_RESTARTS`` restarts in a row), each named
on stderr; 4 no stack in that folder, or ``down`` could not stop it.
What it must never do: signal a process that is not the ``usher up`` named in
``stack.json``, or print a secret.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import click
import msgspec

from usher.adapters.logs import redact_url
from usher.adapters.stack_file import STABLE_S, Restarts, StackInfo, read_stack_info, usher_home
from usher.cli import EXIT_DIFFERENCES, EXIT_UNAVAILABLE, cli, fail, home_option
from usher.cli.people import emit, output_option, render_table
from usher.local.processes import pid_alive

UP = "usher up"


class ProcessStatus(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    pid: int
    alive: bool
    restarts: int = 0
    """Times ``usher up`` restarted it."""
    restarts_in_a_row: int = 0
    """Restarts since it last stayed up ``STABLE_S`` (0: well)."""
    crash_looping: bool = False
    unhealthy: str = ""
    """Why its ``/healthz`` fails (NATS connection down too long...), empty while it passes."""

    @property
    def well(self) -> bool:
        return self.alive and self.restarts_in_a_row == 0 and not self.unhealthy

    @property
    def state(self) -> str:
        if not self.alive:
            return "not running"
        if self.crash_looping:
            return f"crash-looping ({self.restarts_in_a_row} restarts in a row)"
        if self.restarts_in_a_row:  # its /healthz may not listen yet
            return f"restarted, not yet up {STABLE_S:g}s"
        if self.unhealthy:
            return f"unhealthy: {self.unhealthy}"
        return "running"


class StackStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What ``usher status -o json`` prints (no password anywhere)."""

    home: str
    started_at: datetime
    processes: list[ProcessStatus]
    nats_url: str
    database_url: str
    kubeconfig: str
    zones: list[str]
    policy: str
    oversell_rate: str
    within_quota: str
    min_runtime_s: float
    durable: bool
    console_url: str = ""
    postgres_data: str = ""
    """Where PostgreSQL keeps this home's data (outside the home when run as root)."""


def _stack_of(home: Path) -> StackInfo:
    try:
        return read_stack_info(home)
    except FileNotFoundError:
        fail(f"no Usher is running in {home} (no stack.json): start one with `usher up`", 4)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        fail(f"{home / 'stack.json'} is unreadable ({exc}); remove it", EXIT_UNAVAILABLE)


def _is_usher_up(pid: int) -> bool:
    """Whether ``pid`` still is an ``usher up`` (not a stranger that reused the number)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return pid_alive(pid) and b"up" in argv and any(b"usher" in part for part in argv)


def status_of(info: StackInfo) -> StackStatus:
    from usher.local.servers import postgres_data_dir

    pids = {UP: info.up_pid} if info.up_pid else {}
    pids.update(info.all_pids())
    return StackStatus(
        home=info.home,
        started_at=info.started_at,
        processes=[_process_status(info, name, pid) for name, pid in pids.items()],
        nats_url=redact_url(info.nats_url),
        database_url=redact_url(info.database_url),
        kubeconfig=info.kubeconfig,
        zones=list(info.zones),
        policy=info.policy,
        oversell_rate=info.oversell_rate,
        within_quota=info.within_quota,
        min_runtime_s=info.min_runtime_s,
        durable=info.durable,
        console_url=info.console_url,
        postgres_data=str(postgres_data_dir(Path(info.home))),
    )


HEALTH_TIMEOUT_S = 2.0


def health_problem(port: int) -> str:
    """What a service's ``/healthz`` on 127.0.0.1:``port`` says is wrong; empty when it
    answers 200. A process that does not answer at all is wedged (or its port was taken)."""
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as answer:
            answer.read()
            return ""
    except urllib.error.HTTPError as refused:
        return refused.read().decode(errors="replace").strip() or f"HTTP {refused.code}"
    except (OSError, TimeoutError) as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return f"/healthz does not answer ({getattr(cause, 'strerror', None) or cause})"


def _process_status(info: StackInfo, name: str, pid: int) -> ProcessStatus:
    restarts = info.restarts.get(name, Restarts())
    alive = bool(pid) and pid_alive(pid)
    port = info.health_ports.get(name)
    return ProcessStatus(
        name=name,
        pid=pid,
        alive=alive,
        restarts=restarts.count,
        restarts_in_a_row=restarts.in_a_row,
        crash_looping=restarts.crash_looping,
        unhealthy=health_problem(port) if alive and port else "",
    )


@cli.command("status")
@output_option
@home_option()
def status_command(output: str, home: Path | None) -> None:
    """The running stack: every process (alive or not), its addresses, zones and settings."""
    status = status_of(_stack_of(home or usher_home()))

    def table() -> str:
        rows = [[p.name, str(p.pid), p.state, str(p.restarts)] for p in status.processes]
        return "\n".join(
            [
                f"Usher in {status.home}, started {status.started_at:%Y-%m-%d %H:%M:%S %Z}",
                render_table(["PROCESS", "PID", "STATE", "RESTARTS"], rows),
                f"NATS JetStream  {status.nats_url}",
                f"PostgreSQL      {status.database_url}",
                f"PostgreSQL data {status.postgres_data}",
                f"Kubernetes API  kubeconfig {status.kubeconfig}",
                f"Web console     {status.console_url or '(not started)'}",
                f"Zones           {', '.join(status.zones)}",
                f"Settings        policy {status.policy}, oversell rate {status.oversell_rate}, "
                f"within quota {status.within_quota}, min runtime {status.min_runtime_s:g}s"
                f"{', durable' if status.durable else ''}",
            ]
        )

    emit(status, output, table)
    unwell = [p for p in status.processes if not p.well]
    if unwell:
        said = "; ".join(f"{p.name} {p.state}" for p in unwell)
        click.echo(f"not well: {said} (see {status.home}/logs/<name>.log)", err=True)
        raise SystemExit(EXIT_DIFFERENCES)


@cli.command("down")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds to wait for everything to stop.",
)
@click.option(
    "--purge",
    is_flag=True,
    help="Then delete all its data: the folder and PostgreSQL's data (also when stopped).",
)
@home_option()
def down_command(timeout: float, purge: bool, home: Path | None) -> None:
    """Stop the `usher up` running in the data folder, as Ctrl-C would, and wait for it."""
    folder = home or usher_home()
    if purge and not (folder / "stack.json").exists():
        _purge(folder)  # nothing running: only the data is left
        return
    info = _stack_of(folder)
    if purge and not (info.up_pid and _is_usher_up(info.up_pid)):
        alive = [f"{n} (pid {p})" for n, p in info.all_pids().items() if p and pid_alive(p)]
        if alive:
            fail(f"not purging {folder}: still alive: {', '.join(alive)}", EXIT_UNAVAILABLE)
        _purge(folder)
        return
    if not info.up_pid or not _is_usher_up(info.up_pid):
        alive = [f"{n} (pid {p})" for n, p in info.all_pids().items() if p and pid_alive(p)]
        left = f"; still alive: {', '.join(alive)}" if alive else ""
        fail(f"no `usher up` is running in {folder} (stale stack.json){left}", EXIT_UNAVAILABLE)
    others = [p for p in info.all_pids().values() if p]
    click.echo(f"Stopping Usher in {folder} (usher up pid {info.up_pid}) ...")
    os.kill(info.up_pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in [info.up_pid, *others]):
        if time.monotonic() >= deadline:
            fail(f"Usher in {folder} is still stopping after {timeout:g}s", EXIT_UNAVAILABLE)
        time.sleep(0.2)
    click.echo(f"Stopped: usher up and its {len(others)} processes.")
    if purge:
        _purge(folder)


def _purge(folder: Path) -> None:
    """Delete a stopped home and its PostgreSQL data (outside it when run as root)."""
    from usher.local.servers import postgres_data_dir

    data = postgres_data_dir(folder)
    removed = [p for p in (data, folder) if p.exists()]
    for path in removed:
        shutil.rmtree(path)
    if not removed:
        fail(f"nothing to purge: {folder} does not exist", EXIT_UNAVAILABLE)
    click.echo(f"Removed {' and '.join(str(p) for p in removed)}.")
