"""``python -m bench --profile``: py-spy on every process of a suite, where each one's CPU goes.

What it does: while a suite measures, runs one ``py-spy record --format raw --nolineno
--nonblocking`` sampler per Python process of the stack (each service, the Kubernetes API
emulator, and this bench process itself, the client), stops them when the suite's measured
part ends, and folds each sampler's collapsed stacks into the process's top frames: a frame's
``self_pct`` is the share of the process's samples in which it was the innermost frame, its
``total_pct`` the share in which it was anywhere on the stack (counted once per sample). The
samples are of threads that were running (py-spy leaves idle threads out). NATS and PostgreSQL
are not Python: for them, and for every other process, the report has the CPU seconds it used
over the same span, read from ``/proc``. The samplers' own CPU is reported too (the cost of
looking).
What it must never do: signal a process it did not start (it stops only its own samplers, by
pid), pause the processes it samples (``--nonblocking``), or report nothing silently: when
py-spy is missing or may not attach (not root, ptrace refused), the report says why, and so
does a sampler that failed.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import cpu_seconds

NOT_PYTHON = frozenset({"nats", "postgres"})
"""Processes of the stack py-spy cannot read (Go and C): their CPU seconds only."""

CLIENT = "bench-client"
"""This process: the suite's client (its creations, subscriptions and log reads)."""

RATE = 50
"""Samples per second per process: enough for a top 15 over a minute, cheap on 2 cores."""

TOP = 15

NO_FRAME = "(no Python frame)"
"""The frame of a sample whose thread ran with no Python frame on its stack."""


# ---------------------------------------------------------------------- folding (pure)


@dataclass(frozen=True)
class Frame:
    """One function of a profile: where it is and how much of the samples it had."""

    name: str
    self_pct: float
    total_pct: float


def parse_collapsed(text: str) -> Counter[tuple[str, ...]]:
    """py-spy's raw (collapsed) output -> samples per stack, outermost frame first.

    A line is ``frame;frame;...;frame <count>``; a frame is ``function (file)`` (with
    ``--nolineno``) or ``function (file:line)``, and the line number is dropped so one function
    is one frame. A line with a count and no frames (`` 3``: a running thread with no Python
    frame on its stack) counts as ``NO_FRAME``. Blank lines are skipped. Lines end at ``\n``
    only: a name py-spy read torn (``--nonblocking`` races the process it samples) may hold
    any other line separator. A line without a count is such a torn read and is skipped when
    at most one line in a hundred is one; more is not py-spy's raw format: an error.
    """
    stacks: Counter[tuple[str, ...]] = Counter()
    lines = [line for line in text.split("\n") if line.strip()]
    torn: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        stack, space, count = line.rpartition(" ")
        if not space or not count.isdigit():
            torn.append((number, line))
            continue
        frames = tuple(frame_name(f) for f in stack.split(";")) if stack else (NO_FRAME,)
        stacks[frames] += int(count)
    if len(torn) * 100 > len(lines):
        number, line = torn[0]
        raise ValueError(f"line {number} is not 'frames count': {line[:120]!r}")
    return stacks


def frame_name(frame: str) -> str:
    """``function (file:line)`` -> ``function (file)``; other frames unchanged."""
    if frame.endswith(")") and " (" in frame:
        head, _, where = frame[:-1].rpartition(" (")
        path, colon, line = where.rpartition(":")
        if colon and line.isdigit():
            return f"{head} ({path})"
    return frame


def top_frames(stacks: Counter[tuple[str, ...]], limit: int = TOP) -> list[Frame]:
    """The ``limit`` frames with the most self samples (ties: most total, then name)."""
    samples = sum(stacks.values())
    if samples == 0:
        return []
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    for stack, count in stacks.items():
        if stack:
            own[stack[-1]] += count
        for name in set(stack):
            anywhere[name] += count
    ranked = sorted(anywhere, key=lambda n: (-own[n], -anywhere[n], n))
    return [
        Frame(name, 100 * own[name] / samples, 100 * anywhere[name] / samples)
        for name in ranked[:limit]
        if own[name] > 0
    ]


def render(profiles: Mapping[str, Mapping[str, Any]]) -> str:
    """The report as text: per process its CPU seconds, samples and top frames."""
    lines: list[str] = []
    for name, found in profiles.items():
        head = f"{name}: cpu {found.get('cpu_s', float('nan')):,.1f} s"
        if "samples" in found:
            head += f", {found['samples']:,} samples"
        lines.append(head)
        if "error" in found:
            lines.append(f"    not profiled: {found['error']}")
        for frame in found.get("top", []):
            lines.append(
                f"    self {frame['self_pct']:5.1f}%  total {frame['total_pct']:5.1f}%  "
                f"{frame['name']}"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------- sampling


def py_spy() -> str | None:
    """The py-spy executable: beside this Python (a venv's bin) or on ``PATH``."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def why_not() -> str | None:
    """Why py-spy cannot profile here (None when it can): missing, or refused to attach.

    Tries for real: ``py-spy dump`` of this process (ptrace rules apply to it as to any).
    """
    exe = py_spy()
    if exe is None:
        return "py-spy is not installed (pip install -e '.[bench]')"
    probe = subprocess.run(
        [exe, "dump", "--nonblocking", "--pid", str(os.getpid())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        said = (probe.stderr or probe.stdout).strip().splitlines()
        return f"py-spy cannot attach (uid {os.getuid()}): {said[-1] if said else probe.returncode}"
    return None


@dataclass
class Sampler:
    """One ``py-spy record`` child and the file it writes."""

    process: str
    pid: int
    output: Path
    log: Path
    child: subprocess.Popen[bytes]


@dataclass
class Profiler:
    """Samples every process of one suite; ``profiles`` holds the report once stopped."""

    rate: int = RATE
    keep: Path | None = None
    """A folder to keep each process's raw stacks in (``<process>.txt``, for flamegraph.pl)."""
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: str | None = None
    sampler_cpu_s: float = 0.0
    span_s: float = 0.0

    @contextlib.contextmanager
    def sampling(self, pids: Mapping[str, int]) -> Iterator[None]:
        """Sample ``pids`` (by process name; this process is added as the client) while the
        block runs, then fold what was sampled into ``profiles``."""
        self.skipped = why_not()
        if self.skipped is not None:
            print(f"profile skipped: {self.skipped}", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="usher-bench-profile-") as scratch:
            folder = Path(scratch) if self.keep is None else self.keep
            folder.mkdir(parents=True, exist_ok=True)
            targets = {**pids, CLIENT: os.getpid()}
            cpu_before = {name: _cpu(name, pid) for name, pid in targets.items()}
            samplers = [] if self.skipped else self._start(targets, folder)
            began = time.monotonic()
            try:
                yield
            finally:
                self.span_s = time.monotonic() - began
                cpu = {name: _cpu(name, pid) - cpu_before[name] for name, pid in targets.items()}
                self.sampler_cpu_s = _stop(samplers)
                for name in targets:
                    self.profiles[name] = {"cpu_s": cpu[name]}
                    if self.skipped is not None:
                        self.profiles[name]["error"] = self.skipped
                    elif name in NOT_PYTHON:
                        self.profiles[name]["error"] = "not Python: CPU seconds only"
                for sampler in samplers:
                    self.profiles[sampler.process].update(_fold(sampler))

    def _start(self, targets: Mapping[str, int], folder: Path) -> list[Sampler]:
        exe = py_spy()
        assert exe is not None
        samplers: list[Sampler] = []
        for name, pid in targets.items():
            if name in NOT_PYTHON:
                continue
            output, log = folder / f"{name}.txt", folder / f"{name}.log"
            argv = [exe, "record", "--format", "raw", "--nolineno", "--nonblocking"]
            argv += ["--rate", str(self.rate), "--output", str(output), "--pid", str(pid)]
            with log.open("wb") as sink:
                child = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
            samplers.append(Sampler(name, pid, output, log, child))
        return samplers

    def report(self) -> dict[str, Any]:
        """What goes into the results file under ``profiles.<suite>``."""
        return {
            "command": "py-spy record --format raw --nolineno --nonblocking"
            f" --rate {self.rate} --pid <pid>",
            "span_s": self.span_s,
            "sampler_cpu_s": self.sampler_cpu_s,
            "skipped": self.skipped,
            "processes": self.profiles,
        }


def _cpu(name: str, pid: int) -> float:
    # This process's children are the stack: its own CPU only, not theirs.
    return time.process_time() if pid == os.getpid() else cpu_seconds(pid)


def _stop(samplers: list[Sampler]) -> float:
    """SIGINT each sampler (py-spy then writes its file), wait; their CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for sampler in samplers:
        if sampler.child.poll() is None:
            sampler.child.send_signal(signal.SIGINT)
    for sampler in samplers:
        try:
            sampler.child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sampler.child.kill()
            sampler.child.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def _fold(sampler: Sampler) -> dict[str, Any]:
    if not sampler.output.exists():
        said = sampler.log.read_text(errors="replace").strip().splitlines()
        return {"error": f"py-spy wrote nothing (exit {sampler.child.returncode}): {said[-3:]}"}
    stacks = parse_collapsed(sampler.output.read_text(errors="replace"))
    return {
        "samples": sum(stacks.values()),
        "top": [vars(frame) for frame in top_frames(stacks)],
    }
