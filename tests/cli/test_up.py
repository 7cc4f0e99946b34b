"""`usher up` (what `make run` calls) starts the whole system, shows it live, leaves nothing.

The helpers that run `usher up` and `usher ...` as real processes live in
``tests.cli.stack_process``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.cli.stack_process import UpProcess, descendants, poll, usher, usher_json
from usher.local.processes import pid_alive
from usher.local.servers import pg_runtime_root

# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_up_shows_the_live_view_and_stops_every_process(tmp_path: Path, stop_signal: int) -> None:
    """From nothing: the system comes up, the demo plays, the live view shows queues, quota
    and decisions; a stop takes down every process it started, and stack.json goes."""
    up = UpProcess(tmp_path / "home", args=("--interval", "2")).start()
    try:
        info = up.stack()
        # People and scripts get read-only identities: the console user, the audit role.
        assert str(info["nats_url"]).startswith("nats://usher-console:")
        assert str(info["database_url"]).startswith("postgresql+asyncpg://usher_audit:")
        assert Path(info["kubeconfig"]).exists()
        assert info["zones"] == ["default", "a", "b"]
        assert set(info["service_pids"]) == {
            "ledger",
            "preemptor",
            "dequeuer-default",
            "dequeuer-a",
            "dequeuer-b",
            "watcher",
        }
        assert set(info["pids"]) == {"nats", "postgres", "kube-emulator", "webhook"}
        # The read-only web console: its own process, on loopback, its URL printed.
        assert str(info["console_url"]).startswith("http://127.0.0.1:")
        assert f"web console     {info['console_url']}" in up.wait_for_output("web console")
        # The first screen of the live view, then the demo's first decision and its reason.
        up.wait_for_output("== ")
        up.wait_for_output("admit user-a/pi-8k5pn root/Department-a")
        text = up.wait_for_output("queue root-department-a-user-a (root/Department-a, Round)")
        assert "quota root/Department-a: cpu" in text
        # The budget story (B1), played before the walkthrough's: the held job's reason, the spent
        # budget in usher budget's words and the queue below it marked.
        assert "demo: user-d/over-budget waits: BudgetExhausted: " in text
        text = up.wait_for_output("exhausted (hold)")
        assert "budget spent (hold: " in text
        assert up.proc is not None
        everything = descendants(up.proc.pid)
        pids = [int(p) for p in [*info["pids"].values(), *info["service_pids"].values()]]
        pids.append(int(info["console_pid"]))
        assert set(pids) <= set(everything)
        assert all(pid_alive(p) for p in pids)
        assert len(everything) > len(pids), "postgres runs its background workers"
        code = up.stop(stop_signal)
    finally:
        if up.proc is not None and up.proc.poll() is None:
            up.proc.kill()
    text = up.text
    assert code == (130 if stop_signal == signal.SIGINT else 0), text  # Ctrl-C: 128 + SIGINT
    assert "Traceback" not in text
    assert text.rstrip().endswith("Stopped.")
    for pid in everything:
        assert not pid_alive(pid), f"process {pid} outlived usher up"
    assert not (tmp_path / "home" / "stack.json").exists()


def test_up_resumes_from_the_log_and_the_saved_cluster(tmp_path: Path) -> None:
    """A second start reuses NATS, PostgreSQL and the emulator's saved objects: the same jobs
    in the same states, nothing published twice; a start while one runs is refused."""
    home = tmp_path / "home"
    tree = Path(__file__).resolve().parents[2] / "usher" / "demo" / "walkthrough-tree.yaml"
    with UpProcess(home, args=("--no-demo", "--interval", "1")) as up:
        up.stack()
        assert usher(home, "apply", "-f", str(tree)).returncode == 0
        job = ["submit", "--name", "first", "-n", "user-a", "--image", "busybox", "--cpu", "10"]
        assert usher(home, *job).returncode == 0
        before = poll(lambda: _states_if(home, {"user-a/first": "Admitted"}))
        time.sleep(1.5)  # one more summary line with the final sequence
        second = usher(home, "up", "--no-demo")
        assert second.returncode == 4
        assert "already running" in second.stderr and "Traceback" not in second.stderr
        assert up.stop() == 0
        log_seq = _log_seq(up.text)
    with UpProcess(home, args=("--no-demo", "--interval", "1")) as up:
        up.stack()
        up.wait_for_output("== ")
        after = poll(lambda: _states_if(home, {"user-a/first": "Admitted"}))
        assert after == before
        again = usher(home, "apply", "-f", str(tree))
        assert again.stdout.strip().endswith("unchanged")
        time.sleep(2)  # the watcher has re-listed everything by now
        assert up.stop() == 0
        assert _log_seq(up.text) == log_seq, "the restart published nothing new"
    # Each engine saved its snapshot on the first stop and restored it on the second start,
    # under its own NATS user (issue 26: no permission violation, no replay from sequence 1).
    for service in ("dequeuer-default", "dequeuer-a", "preemptor"):
        assert '"snapshot restored"' in (home / "logs" / f"{service}.log").read_text(), service
    assert "Permissions Violation" not in (home / "logs" / "nats.log").read_text()
    # As root, PostgreSQL's data lives with its unprivileged user (servers.pg_runtime_root).
    data = home / "postgres" / "data"
    if os.geteuid() == 0:
        instance = (home / "postgres" / "instance").read_text().strip()
        data = pg_runtime_root() / "postgres" / instance / "data"
    assert (data / "PG_VERSION").exists()
    assert (home / "nats" / "jetstream").exists()
    assert (home / "cluster" / "objects.json").exists()


def _states_if(home: Path, wanted: dict[str, str]) -> dict[str, str] | None:
    jobs = {j["job"]: j["state"] for j in usher_json(home, "jobs")}
    return jobs if all(jobs.get(k) == v for k, v in wanted.items()) else None


def _log_seq(text: str) -> int:
    seqs = [
        int(line.split("log seq ")[1].split(";")[0])
        for line in text.splitlines()
        if "log seq " in line
    ]
    return seqs[-1]


def test_every_process_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """Even SIGKILL of `usher up` leaves nothing behind: children die with their parent."""
    up = UpProcess(tmp_path / "home").start()
    info = up.stack()
    pids = [int(p) for p in [*info["pids"].values(), *info["service_pids"].values()]]
    assert up.proc is not None
    up.proc.kill()
    up.proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if pid_alive(p)]
    # The stale stack.json is no obstacle to the next start, and commands say it is down.
    down = usher(tmp_path / "home", "jobs")
    assert down.returncode == 4 and "cannot reach NATS" in down.stderr


def test_up_refuses_bad_options_before_starting_anything(tmp_path: Path) -> None:
    result = usher(tmp_path, "up", "--zones", "a,b c")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "usher: --zones: 'b c' is not a valid zone name (letters, digits, '-', '_', '.')"
    )
    assert not (tmp_path / "nats").exists()


def test_status_names_the_postgres_data_and_down_purge_removes_all_of_it(tmp_path: Path) -> None:
    """Issue 29: as root PostgreSQL's data lives outside $USHER_HOME; `usher status` says
    where, and `usher down --purge` stops the stack and deletes the home and that data."""
    home = tmp_path / "home"
    up = UpProcess(home, args=("--no-demo", "--no-console")).start()
    try:
        up.stack()
        data = Path(usher_json(home, "status")["postgres_data"])
        assert (data / "data" / "PG_VERSION").exists()
        if os.geteuid() == 0:  # PostgreSQL refuses root: its data is in the runtime folder
            assert data.parent == pg_runtime_root() / "postgres" and not data.is_relative_to(home)
        assert f"PostgreSQL data {data}" in usher(home, "status").stdout
        purged = usher(home, "down", "--purge")
        assert purged.returncode == 0, purged.stdout + purged.stderr
        assert purged.stdout.rstrip().endswith(f"Removed {data} and {home}.")
    finally:
        if up.proc is not None and up.proc.poll() is None:
            up.proc.kill()
    assert not home.exists() and not data.exists()
