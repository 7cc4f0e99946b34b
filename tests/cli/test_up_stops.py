"""Ctrl-C of `usher up` and `usher down` leave the same state (issue 29).

`usher up 2>&1 | tee up.log` is how people keep its output: Ctrl-C in the terminal signals the
whole pipeline, so `tee` dies with it and `usher up` stops with nobody left to read its stdout.
It must stop everything and forget `stack.json` all the same, as `usher down` does: the same
files left in the home, the same `usher status` answer and exit code.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.cli.stack_process import USHER, UpProcess, clean_env, descendants, usher
from usher.local.processes import pid_alive

SERVER_STORES = ("nats/jetstream", "postgres")
"""What NATS and PostgreSQL keep inside the home: their own business, compared by presence."""


def _files(home: Path) -> set[str]:
    """Every path under ``home``, a server's store counted once by its folder."""
    left = set()
    for path in home.rglob("*"):
        relative = path.relative_to(home).as_posix()
        store = next((s for s in SERVER_STORES if relative.startswith(f"{s}/")), None)
        left.add(store or relative)
    return left


def _after(home: Path) -> tuple[set[str], int, str, int]:
    """What a stop left: the files, `usher status`'s exit code and words, `usher jobs`'s code."""
    status = usher(home, "status")
    words = (status.stdout + status.stderr).replace(str(home), "HOME")
    return _files(home), status.returncode, words, usher(home, "jobs").returncode


def _ctrl_c_with_tee_gone(home: Path) -> tuple[int, list[int]]:
    """`usher up | tee`, then Ctrl-C: `tee` is gone (its pipe closed) as `usher up` gets
    SIGINT. Returns usher up's exit code and every process it had started."""
    home.mkdir(parents=True)
    up = subprocess.Popen(
        [*USHER, "up", "--no-demo", "--no-console", "--interval", "1"],
        env=clean_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert up.stdout is not None
        for line in up.stdout:  # the summaries that follow come once a second
            if line.startswith(b"== "):
                break
        started = descendants(up.pid)
        up.stdout.close()
        up.send_signal(signal.SIGINT)
        return up.wait(timeout=120), started
    finally:
        if up.poll() is None:
            up.kill()


def test_ctrl_c_with_its_reader_gone_leaves_what_usher_down_leaves(tmp_path: Path) -> None:
    by_ctrl_c = tmp_path / "ctrl-c"
    code, started = _ctrl_c_with_tee_gone(by_ctrl_c)
    assert code == 130  # stopped on the user's request, as a Ctrl-C on a terminal
    assert started and not [p for p in started if pid_alive(p)]

    by_down = tmp_path / "down"
    with UpProcess(by_down, args=("--no-demo", "--no-console", "--interval", "1")) as up:
        up.stack()
        up.wait_for_output("== ")
        down = usher(by_down, "down")
        assert down.returncode == 0, down.stderr
        assert up.proc is not None and up.proc.wait(timeout=60) == 0

    files, status_code, status_words, jobs_code = _after(by_ctrl_c)
    assert "stack.json" not in files
    assert (files, status_code, status_words, jobs_code) == _after(by_down)
    assert status_code == 4
    assert status_words.strip() == (
        "usher: no Usher is running in HOME (no stack.json): start one with `usher up`"
    )
