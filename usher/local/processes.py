"""Child server processes that can never outlive the process that started them.

What it does: starts a server as a child with ``PR_SET_PDEATHSIG`` (Linux) so that even a
SIGKILL of the parent takes the server down, and umask 077 (its files are its owner's only;
its log under ``logs/`` is 0600 in a 0700 folder), waits for its TCP port, and stops it politely
(then firmly) by its own process id.
What it must never do: signal a process group or any pid it did not start itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from usher.local.credentials import open_private_log

_PR_SET_PDEATHSIG = 1
PRIVATE_UMASK = 0o077


class ServerStartError(RuntimeError):
    """A server did not become ready; ``log`` holds the tail of what it printed."""

    def __init__(self, name: str, reason: str, log: str) -> None:
        self.name = name
        self.reason = reason
        self.log = log
        super().__init__(f"{name} did not start: {reason}\n--- last output ---\n{log}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host`` (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def _die_with_parent(sig: int) -> Callable[[], None]:
    """A ``preexec_fn`` asking the kernel to send ``sig`` to the child when we die; the
    child's umask 077: whatever it creates (a server's store, the cluster's state, a service's
    files) is its owner's only."""

    def arm() -> None:
        os.umask(PRIVATE_UMASK)
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, sig)

    return arm


@dataclass
class ManagedProcess:
    """A server child process, its log file and how it wants to be stopped."""

    name: str
    argv: Sequence[str]
    log_path: Path
    stop_signal: int = signal.SIGTERM
    run_as: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] | None = None
    pass_fds: tuple[int, ...] = ()
    """Descriptors the child inherits (the console's listening socket, held by ``usher up``)."""
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> None:
        """Start the child; its stdout/stderr go to ``log_path``."""
        with os.fdopen(open_private_log(self.log_path), "ab") as log:
            self.popen = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent(self.stop_signal),
                **self.run_as,
                env=self.env,
                pass_fds=self.pass_fds,
                # A new session: Ctrl-C in the terminal reaches only `usher up`, which then
                # stops its children in order (PostgreSQL must not see SIGINT twice).
                start_new_session=True,
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_for_port(self, host: str, port: int, timeout: float) -> None:
        """Block until the server accepts connections, or raise ``ServerStartError``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen is not None and self.popen.poll() is not None:
                raise ServerStartError(
                    self.name, f"exited with code {self.popen.returncode}", self.log_tail()
                )
            if port_open(host, port):
                return
            time.sleep(0.05)
        raise ServerStartError(
            self.name, f"no listener on {host}:{port} after {timeout}s", self.log_tail()
        )

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """Ask the child to stop with its preferred signal; SIGKILL it if it does not."""
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(self.stop_signal)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
            self.popen.wait(timeout=5)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (and is not a zombie we could reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
