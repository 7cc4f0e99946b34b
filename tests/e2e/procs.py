"""The services as real processes (``python -m usher run <service>``), for crash tests.

What it does: starts, SIGKILLs and restarts each service process with the installation's
settings in its environment, and the Kubernetes API emulator with its fake kubelet.
What it must never do: leave a process behind (every child also dies with the test process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from usher.local.cluster import WALKTHROUGH_NAMESPACES
from usher.local.processes import ManagedProcess


@dataclass
class ServiceProcesses:
    """One process per service; ``kill`` is a SIGKILL, ``start`` starts it again."""

    env: dict[str, str]
    logs: Path
    zones: tuple[str, ...] = ("a", "b")
    watchers: tuple[str, ...] = ("watcher",)
    """One watcher per cluster (M1): ``watcher``, ``watcher-<cluster>``..."""
    per_service: dict[str, dict[str, str]] = field(default_factory=dict)
    """Environment of one service on top of ``env`` (a cluster's watcher's kubeconfig)."""
    procs: dict[str, ManagedProcess] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return ["ledger", "preemptor", *(f"dequeuer-{z}" for z in self.zones), *self.watchers]

    def _command(self, name: str) -> list[str]:
        if name.startswith("dequeuer-"):
            return [sys.executable, "-m", "usher", "run", "dequeuer", "--zone", name[9:]]
        if name.startswith("watcher"):
            return [sys.executable, "-m", "usher", "run", "watcher"]
        return [sys.executable, "-m", "usher", "run", name]

    def start(self, name: str) -> None:
        self.starts[name] = self.starts.get(name, 0) + 1
        log = self.logs / f"{name}.{self.starts[name]}.log"
        env = {**os.environ, **self.env, **self.per_service.get(name, {})}
        proc = ManagedProcess(name, self._command(name), log, env=env)
        proc.start()
        self.procs[name] = proc

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.popen is not None and proc.popen.poll() is None:
            os.kill(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(timeout=10)

    def alive(self) -> dict[str, bool]:
        return {n: p.running() for n, p in self.procs.items()}

    def stop_all(self) -> None:
        for name in reversed(self.names):
            proc = self.procs.get(name)
            if proc is not None:
                proc.stop(timeout=10)


def start_emulator(
    kubeconfig: Path, log: Path, namespaces: Iterable[str] = WALKTHROUGH_NAMESPACES
) -> ManagedProcess:
    """The emulator with its fake kubelet, as its own process, with ``namespaces`` made (as a
    cluster would have them before jobs are put there); waits for the kubeconfig."""
    proc = ManagedProcess(
        "kube-emulator",
        [
            sys.executable,
            "-m",
            "usher.local.kube_emulator",
            "--kubeconfig",
            str(kubeconfig),
            "--kubelet",
            "--history",
            "200000",
            *(f"--namespace={name}" for name in namespaces),
        ],
        log,
    )
    proc.start()
    deadline = time.monotonic() + 20
    while not kubeconfig.exists():
        if time.monotonic() > deadline or not proc.running():
            raise RuntimeError(f"emulator did not start: {proc.log_tail()}")
        time.sleep(0.05)
    return proc


__all__ = ["ServiceProcesses", "start_emulator", "subprocess"]
