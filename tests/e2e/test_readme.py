"""Every command the README and the docs pages show runs as shown, from the repository's
root, and prints what the page pasted.

Each page (README.md, then every page under docs/ with a command to run) is one session: its
fenced blocks are read in order. A ``$ command`` line is run with bash (so
``$USHER_HOME`` and pipes work as a person's shell does them) in a folder that looks like a
fresh clone (``usher/``, ``tests/`` and ``docs/`` of this checkout, nothing else, so files a
command writes land there), with the ``usher`` of this checkout first on PATH; the lines after
it, up to the next ``$``, are what it must print. Both sides are compared after masking what differs
from run to run (clock times, ages and durations, ports, uids, resourceVersions, generated
names, the data folder) and runs of spaces. A command that only reads is retried for a while:
the README's outputs were taken once the system had caught up, as a person reads them.

An HTML comment just before a block tells what the block needs (``<!-- readme-test: ... -->``):
``skip: <why>`` (a real cluster, or ``make``), ``restart <usher up args>`` (Ctrl-C, then
``usher up`` again on the same data), ``fresh <home> <usher up args>`` (a new data folder),
``python`` (run the block with this checkout's Python; the next block is its output),
``progress`` (a "fits now" progress line, or a state ``usher wait`` passes through, may be
missed by a fast run: left out on both sides;
``usher wait`` commands are always read so, as a slow run may catch one any time).
``$ usher up ...`` in a block starts the system itself; its banner is compared. Commands before
any ``usher up`` (``usher sim``, which needs no servers) run with a data folder of their own.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli.stack_process import UpProcess, clean_env
from tests.conftest import REPO

pytestmark = pytest.mark.e2e

README = REPO / "README.md"
DOCS = REPO / "docs"
MARKER = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")
READ_ONLY = ("usher jobs", "usher queues", "usher queue ", "usher quota", "usher explain")
READ_ONLY_PREFIXES = (*READ_ONLY, "usher replay", "usher audit", "usher what-if", "kubectl")
RETRY_S = 30.0

BANNER_END = "Press Ctrl-C to stop (or run `usher down`)."
"""The last line of ``usher up``'s banner."""


@dataclass
class Command:
    text: str
    output: list[str]


@dataclass
class Block:
    line: int
    lang: str
    marker: str
    body: list[str]
    commands: list[Command] = field(default_factory=list)


def read_blocks(text: str) -> list[Block]:
    """Fenced blocks in order, each with the marker written just before it (if any)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    marker, i = "", 0
    while i < len(lines):
        found = MARKER.search(lines[i])
        if found:
            marker = found.group(1)
        if lines[i].startswith("```") and len(lines[i]) > 3:
            start, lang, body = i + 1, lines[i][3:].strip(), []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append(Block(start, lang, marker, body, _commands(body)))
            marker = ""
        i += 1
    return blocks


def _commands(body: list[str]) -> list[Command]:
    out: list[Command] = []
    for line in body:
        if line.startswith("$ "):
            out.append(Command(_without_comment(line[2:]), []))
        elif out and not line.lstrip().startswith("# "):
            out[-1].output.append(line)
    for command in out:
        while command.output and not command.output[-1].strip():
            command.output.pop()
    return out


def _without_comment(command: str) -> str:
    """``cmd   # why``: the command (a ``#`` after two spaces starts a comment)."""
    return re.split(r"\s{2,}#\s", command, maxsplit=1)[0].strip()


MASKS = (
    # UIDs first: a part of one can look like a duration (4d5s).
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<UID>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?"), "<TS>"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<TIME>"),
    (re.compile(r"[+-]?\b\d+(\.\d+)?(ms|s|m|h|d)\b"), "<DUR>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<PORT>"),
    # Inputs within the what-if window are grouped: the zone announcements' timing varies.
    (re.compile(r"\bin \d+ groups \(window"), "in <N> groups (window"),
    (re.compile(r'resourceVersion: "\d+"'), 'resourceVersion: "<RV>"'),
    (re.compile(r"\b(python|pi)-[a-z0-9]{5}\b(?<!pi-8k5pn)(?<!pi-2xtcj)(?<!pi-6nsc7)"), r"\1-<N>"),
    # What-if's per-department usage: resource-seconds and shares follow how long the
    # walkthrough's jobs happened to run.
    (re.compile(r"\b\d+\.\d{3}\b"), "<RS>"),
    (re.compile(r"\b\d+\.\d%"), "<PCT>"),
    (re.compile(r" {2,}"), " "),
    # (After the spaces are collapsed.) Where the watcher's observation of a pod's start
    # lands on the log depends on how fast the kubelet and the watcher ran (a busy machine
    # puts it after other entries): the decisions' positions stay compared.
    (re.compile(r"\bseq \d+ <TS> observed running"), "seq <N> <TS> observed running"),
)


_WAITING = re.compile(r" Pending #\d+ in ")
"""A state ``usher wait`` passes through on its way (``Pending #1 in <queue>: VictimsStopping
...``): a slow run catches it, a fast one does not, so it is left out on both sides."""


ORPHAN_NOTE = "Removed orphaned PostgreSQL data "
"""The start of the line `usher up` prints for each data folder of a stack whose home is gone."""


def normalise(lines: list[str], progress: bool = False) -> list[str]:
    out = []
    for line in lines:
        if progress and ("fits now" in line or _WAITING.search(line)):
            continue
        for pattern, replacement in MASKS:
            line = pattern.sub(replacement, line)
        out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


@dataclass
class Session:
    """The folder commands run in, the running ``usher up`` and the README's name for its home."""

    work: Path
    root: Path
    up: UpProcess | None = None
    readme_home: str = ""
    homes: int = 0

    @property
    def env(self) -> dict[str, str]:
        env = clean_env(self.up.home if self.up is not None else self.root / "no-stack")
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    def start(self, args: list[str], *, fresh: bool) -> str:
        """``usher up ARGS``; its banner (up to its last line) with the README's home."""
        if self.up is not None:
            assert self.up.stop() == 0, self.up.text
        home = self.up.home if self.up is not None and not fresh else None
        if home is None:
            self.homes += 1
            home = self.root / f"home{self.homes}"
        self.up = UpProcess(home, tuple(args))
        before = len(self.up.text) if self.up.output.exists() else 0
        self.up.start()
        self.up.stack()
        self.up.wait_for_output(BANNER_END)
        return self.up.text[before:].split(BANNER_END)[0] + BANNER_END

    def local(self, text: str) -> str:
        """The actual data folder written as the README writes it."""
        if self.up is not None and self.readme_home:
            return text.replace(str(self.up.home), self.readme_home)
        return text

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        if command.startswith("usher submit"):
            time.sleep(1.05 - time.time() % 1.0)  # Kubernetes stamps creation in whole seconds
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def stop(self) -> None:
        if self.up is not None:
            self.up.stop()


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    work = tmp_path / "clone"
    work.mkdir()
    for name in ("usher", "tests", "docs"):
        (work / name).symlink_to(REPO / name)
    state = Session(work=work, root=tmp_path)
    try:
        yield state
    finally:
        state.stop()


def check_output(session: Session, block: Block, command: Command, progress: bool) -> str | None:
    """None when ``command`` prints what the README shows, else what differs."""
    expected = normalise(command.output, progress)
    retry = command.text.startswith(READ_ONLY_PREFIXES)
    deadline = time.monotonic() + (RETRY_S if retry else 0)
    while True:
        done = session.run(command.text)
        actual = normalise(session.local(done.stdout + done.stderr).splitlines(), progress)
        if actual == expected or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if actual == expected:
        return None
    return (
        f"line {block.line}: `{command.text}` (exit {done.returncode}) printed\n"
        + "\n".join(actual)
        + "\n--- but the README shows\n"
        + "\n".join(expected)
    )


def runnable(blocks: list[Block]) -> int:
    """How many commands (and Python examples) of a page's blocks are run (skipped ones not)."""
    return sum(
        1 if b.marker == "python" else len(b.commands)
        for b in blocks
        if not b.marker.startswith("skip:")
    )


def pages() -> list[Path]:
    """README.md, then every docs page with something to run, in path order."""
    docs = sorted(DOCS.rglob("*.md"))
    return [README, *(p for p in docs if runnable(read_blocks(p.read_text())))]


MIN_RUN = {"README.md": 6, "docs/getting-started/walkthrough.md": 30}
"""The least a page must run: its walkthrough, not an empty match."""


def test_the_docs_pages_with_commands_are_all_run() -> None:
    names = [str(p.relative_to(REPO)) for p in pages()]
    assert set(MIN_RUN) <= set(names)
    assert "docs/concepts/borrowing-and-reclaim.md" in names  # usher sim examples


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_runs_as_shown(session: Session, page: Path) -> None:
    blocks = read_blocks(page.read_text())
    ran = 0
    skip_next = False
    differences: list[str] = []
    for index, block in enumerate(blocks):
        if skip_next:
            skip_next = False
            continue
        marker = block.marker
        if marker.startswith("skip:"):
            continue
        if marker.startswith("restart "):
            session.start(shlex.split(marker.removeprefix("restart "))[2:], fresh=False)
        elif marker.startswith("fresh "):
            home, *up = shlex.split(marker.removeprefix("fresh "))
            session.readme_home = home
            session.start(up[2:], fresh=True)
        if marker == "python":
            done = subprocess.run(
                [sys.executable, "-c", "\n".join(block.body)],
                cwd=session.work,
                env=session.env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            wanted = normalise(blocks[index + 1].body, progress=True)
            printed = normalise(done.stdout.splitlines(), progress=True)
            if printed != wanted:
                differences.append(f"line {block.line}: the Python example printed\n")
                differences[-1] += "\n".join(printed) + "\n--- but the README shows\n"
                differences[-1] += "\n".join(wanted)
            skip_next, ran = True, ran + 1
            continue
        for command in block.commands:
            ran += 1
            if command.text.startswith("export USHER_HOME="):
                session.readme_home = command.text.split("=", 1)[1]
                continue
            if command.text.startswith("usher up"):
                banner = session.start(shlex.split(command.text)[2:], fresh=True)
                # What `usher up` says about this machine's leftovers (data of stacks whose
                # homes are gone, left by other tests) is not the README's business.
                said = [
                    line
                    for line in session.local(banner).splitlines()
                    if not line.startswith(ORPHAN_NOTE)
                ]
                actual = normalise(said)
                assert actual == normalise(command.output), "\n".join(actual)
                continue
            # ``usher wait`` prints each state it sees: whether it catches the job in the instant
            # before its pass ("fits now") is timing, in any block.
            progress = marker == "progress" or command.text.startswith("usher wait")
            difference = check_output(session, block, command, progress=progress)
            if difference is not None:
                differences.append(difference)
    assert ran >= MIN_RUN.get(str(page.relative_to(REPO)), 1)
    assert not differences, f"{page.relative_to(REPO)}:\n" + "\n\n".join(differences)
