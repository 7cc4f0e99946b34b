"""``usher run SERVICE``: clear one-line errors, and SIGTERM stops a service at any moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nats.js import JetStreamContext

from tests.conftest import Infra
from usher.adapters.nats.subjects import Subjects
from usher.local.processes import free_port

USHER = [sys.executable, "-m", "usher.cli", "run"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("USHER_")}
    env.update(USHER_HOME=str(tmp_path), **extra)
    return env


def test_unreachable_nats_is_one_line_and_exit_4(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [*USHER, "dequeuer", "--nats", url],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path, USHER_STARTUP_TIMEOUT_SECONDS="1"),
    )
    assert done.returncode == 4, done.stderr
    assert f"usher: dequeuer: cannot reach nats: {url} not reachable" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_settings_are_usage_errors(tmp_path: Path) -> None:
    for service, needle in (("ledger", "needs PostgreSQL"), ("watcher", "needs a Kubernetes")):
        done = subprocess.run(
            [*USHER, service, "--nats", "nats://127.0.0.1:4222"],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(tmp_path),
        )
        assert done.returncode == 2 and needle in done.stderr, done.stderr
    done = subprocess.run(
        [*USHER, "dequeuer"], capture_output=True, text=True, timeout=60, env=_env(tmp_path)
    )
    assert done.returncode == 2 and "no NATS URL" in done.stderr
    done = subprocess.run(
        [*USHER, "dequeuer", "--nats", "nats://x", "--oversell-rate", "abc"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path),
    )
    assert done.returncode == 2 and "oversell-rate: not a number: 'abc'" in done.stderr


def test_sigterm_stops_a_running_service_promptly(
    tmp_path: Path, infra: Infra, subjects: Subjects, js: JetStreamContext
) -> None:
    proc = subprocess.Popen(
        [*USHER, "preemptor", "--nats", infra.nats_url, "--prefix", subjects.prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    try:
        deadline = time.monotonic() + 30
        assert proc.stderr is not None
        for line in proc.stderr:
            if "service starting" in line or time.monotonic() > deadline:
                break
        time.sleep(0.5)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - began < 10
    finally:
        if proc.poll() is None:
            proc.kill()
