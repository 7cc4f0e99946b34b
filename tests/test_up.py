"""`usher up` (what `make run` calls) starts the embedded stack and leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from usher.adapters.embedded.processes import pid_alive

USHER = [sys.executable, "-m", "usher.cli"]


def _wait_for(path: Path, proc: subprocess.Popen[Any], timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"usher up exited early: {proc.communicate()}")
        if path.exists():
            try:
                return dict(json.loads(path.read_text()))
            except json.JSONDecodeError:
                pass  # caught while being written
        time.sleep(0.1)
    raise AssertionError(f"{path} did not appear within {timeout}s")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split()]


def _start(home: Path, **kwargs: Any) -> subprocess.Popen[Any]:
    env = {**os.environ, "USHER_HOME": str(home)}
    return subprocess.Popen([*USHER, "up"], env=env, **kwargs)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_up_prints_urls_and_stops_every_process(tmp_path: Path, stop_signal: int) -> None:
    proc = _start(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = _wait_for(tmp_path / "stack.json", proc)
        pids = [int(p) for p in info["pids"].values()]
        assert str(info["nats_url"]).startswith("nats://127.0.0.1:")
        assert str(info["database_url"]).startswith("postgresql+asyncpg://usher@127.0.0.1:")
        assert all(pid_alive(p) for p in pids)
        postgres_workers = _children(int(info["pids"]["postgres"]))
        assert postgres_workers, "postgres runs its background workers"
        proc.send_signal(stop_signal)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert info["nats_url"] in out
    assert "Stopped." in out
    for pid in [*pids, *postgres_workers]:
        assert not pid_alive(pid), f"process {pid} outlived usher up"
    assert not (tmp_path / "stack.json").exists()


def test_up_resumes_from_existing_data(tmp_path: Path) -> None:
    """A second start reuses the data folder (no initdb again; migrations are a no-op)."""
    for _ in range(2):
        proc = _start(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for(tmp_path / "stack.json", proc)
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
    assert (tmp_path / "postgres" / "data" / "PG_VERSION").exists()
    assert (tmp_path / "nats" / "jetstream").exists()


def test_servers_die_with_a_killed_parent(tmp_path: Path) -> None:
    """Even SIGKILL of `usher up` leaves no server behind: children die with their parent."""
    proc = _start(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    info = _wait_for(tmp_path / "stack.json", proc)
    pids = [int(p) for p in info["pids"].values()]
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in pids)
