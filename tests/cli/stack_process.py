"""`usher up` and `usher ...` run as real processes with a clean environment: the helpers the
CLI tests (and the README test) share to start a whole stack, run commands against it and wait
for what they show. Never imports a test module and never keeps a process past its block.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

USHER = [sys.executable, "-m", "usher"]
T = TypeVar("T")


def clean_env(home: Path) -> dict[str, str]:
    """This process's environment without any Usher or Kubernetes address, plus the home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("USHER_")}
    env.pop("KUBECONFIG", None)
    env["USHER_HOME"] = str(home)
    return env


def usher(home: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``python -m usher.cli ARGS`` against the stack in ``home``."""
    return subprocess.run(
        [*USHER, *args], env=clean_env(home), capture_output=True, text=True, timeout=timeout
    )


def usher_json(home: Path, *args: str) -> Any:
    result = usher(home, *args, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def poll(check: Callable[[], T | None], timeout: float = 30.0, every: float = 0.3) -> T:
    """Call ``check`` until it returns something other than None (or time runs out)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last is not None:
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout}s")


def next_second() -> None:
    """Kubernetes stamps creation in whole seconds: the next job must be in a later one."""
    time.sleep(1.0 - time.time() % 1.0 + 0.05)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children...)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                kids = [int(p) for p in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


@dataclass
class UpProcess:
    """`usher up ARGS` as a child process, its output in a file (plain lines: not a TTY)."""

    home: Path
    args: tuple[str, ...] = ("--no-demo",)
    env: dict[str, str] = field(default_factory=dict)
    """Added to the clean environment (e.g. a USHER_* setting every service reads)."""
    proc: subprocess.Popen[bytes] | None = None
    output: Path = field(init=False)

    def __post_init__(self) -> None:
        self.output = self.home.parent / f"{self.home.name}-up.out"

    def start(self) -> UpProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(
                [*USHER, "up", *self.args],
                env={**clean_env(self.home), **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    @property
    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def stack(self, timeout: float = 60.0) -> dict[str, Any]:
        """``stack.json`` once the system is up."""
        path = self.home / "stack.json"

        def ready() -> dict[str, Any] | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"usher up exited early:\n{self.text}")
            try:
                return dict(json.loads(path.read_text()))
            except (FileNotFoundError, json.JSONDecodeError):
                return None

        return poll(ready, timeout=timeout, every=0.1)

    def wait_for_output(self, needle: str, timeout: float = 60.0) -> str:
        return poll(lambda: self.text if needle in self.text else None, timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def __enter__(self) -> UpProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
