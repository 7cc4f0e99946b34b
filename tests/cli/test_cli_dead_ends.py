"""No dead ends (issue 14 items 6, 7, 9, 10, 11): every mistake or interruption is one line
and an exit code, the stack can be inspected and stopped from another terminal, jobs can be
deleted, and every command and the client speak one vocabulary."""

from __future__ import annotations

import inspect
import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.builders.log import walkthrough_reclaim
from tests.cli.history_cli import export
from tests.cli.stack_process import UpProcess, descendants, poll, usher
from usher.client import AsyncClient, Client
from usher.local.processes import ManagedProcess, ServerStartError, pid_alive

TREE = Path(__file__).resolve().parents[2] / "usher" / "demo" / "walkthrough-tree.yaml"


def one_line(result: object, code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    err: str = result.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


# ------------------------------------------------------------------ item 9: homes, usage


@pytest.mark.parametrize("command", [["up", "--no-demo"], ["jobs"], ["status"], ["replay"]])
def test_a_home_that_is_a_file_is_one_line_and_exit_2(tmp_path: Path, command: list[str]) -> None:
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    err = one_line(usher(a_file, *command), 2)
    assert err == f"usher: USHER_HOME: {a_file} is a file, not a folder"
    below = one_line(usher(tmp_path / "home", *command, "--home", str(a_file / "sub")), 2)
    assert below.startswith(f"usher: --home: {a_file} is a file, not a folder")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["jobs", "--bogus"], "No such option"),
        (["jobs", "-o", "xml"], "'xml' is not one of"),
        (["submit", "--replicas", "many", "--image", "x"], "whole number from 1 to 1000000"),
        (["nosuch"], "No such command"),
    ],
)
def test_click_usage_errors_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    err = one_line(usher(tmp_path, *args), 2)
    assert needle in err and "--help" in err


# ------------------------------------------------------------------ item 10: settings first


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--oversell-rate", "-1"], "usher: --oversell-rate: must be positive, got '-1'"),
        (["--oversell-rate", "0"], "usher: --oversell-rate: must be positive, got '0'"),
        (
            ["--min-runtime", "-5"],
            "usher: Invalid value for '--min-runtime': --min-runtime must be a decimal number"
            " of seconds from 0 to 2592000 with at most 3 decimals (ASCII digits, e.g. 1.5),"
            " got '-5' (see usher up --help)",
        ),
        (["--interval", "0"], "usher: --interval: must be positive, got 0"),
    ],
)
def test_up_validates_every_setting_before_starting_anything(
    tmp_path: Path, args: list[str], message: str
) -> None:
    home = tmp_path / "home"
    assert one_line(usher(home, "up", "--no-demo", *args), 2) == message
    assert not home.exists(), "nothing may start (not even the data folder) for a bad setting"


def test_a_service_that_dies_at_start_is_named_with_its_last_error(tmp_path: Path) -> None:
    from usher.cli import _start_failure

    script = "import sys; print('starting'); sys.exit('usher: oversell-rate: must be positive')"
    process = ManagedProcess("ledger", [sys.executable, "-c", script], tmp_path / "ledger.log")
    process.start()
    assert process.popen is not None and process.popen.wait(timeout=30) == 1
    failure = ServerStartError("ledger", "exited with code 1", process.log_tail())
    assert _start_failure(failure, tmp_path) == (
        "ledger did not start: exited with code 1: usher: oversell-rate: must be positive "
        f"(logs in {tmp_path / 'logs'})"
    )


# ------------------------------------------------------------------ item 9: Ctrl-C


@pytest.mark.parametrize("after_s", [0.2, 4.0], ids=["while-importing", "while-starting"])
def test_ctrl_c_at_any_time_of_up_stops_cleanly_with_130(tmp_path: Path, after_s: float) -> None:
    up = UpProcess(tmp_path / "home").start()
    assert up.proc is not None
    time.sleep(after_s)
    seen = descendants(up.proc.pid)
    code = up.stop(signal.SIGINT)
    text = up.text
    assert code == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    for pid in [*seen, *descendants(up.proc.pid)]:
        assert not pid_alive(pid), f"process {pid} outlived usher up"
    assert not (tmp_path / "home" / "stack.json").exists()


# ------------------------------------------------------------------ item 11: history, client


def test_history_commands_take_home_and_yaml_and_explain_speaks_job(tmp_path: Path) -> None:
    file = export(walkthrough_reclaim(), tmp_path / "reclaim.jsonl")
    empty_home = tmp_path / "home"
    for command in (["explain", "user-b/borrow"], ["replay"], ["audit", "--no-ledger"]):
        as_json = usher(empty_home, *command, "--file", str(file), "-o", "json")
        assert as_json.returncode in (0, 1), as_json.stderr
        as_yaml = usher(
            empty_home, *command, "--file", str(file), "-o", "yaml", "--home", str(empty_home)
        )
        assert as_yaml.returncode == as_json.returncode, as_yaml.stderr
        assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    doc = json.loads(
        usher(empty_home, "explain", "user-b/borrow", "--file", str(file), "-o", "json").stdout
    )
    assert doc["job"] == "user-b/borrow" and "workload" not in json.dumps(doc)
    amounts = [
        value
        for reason in [doc["reason"], *(line.get("reason") for line in doc["history"])]
        if reason and reason.get("resource")
        for key, value in reason.items()
        if key in ("used", "requested", "limit") and value is not None
    ]
    assert amounts and all(isinstance(a, str) for a in amounts), amounts


def test_the_client_has_explicit_signatures_and_takes_timeout() -> None:
    for cls in (Client, AsyncClient):
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            kinds = {p.kind for p in inspect.signature(method).parameters.values()}
            assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{cls.__name__}.{name}"
        assert "timeout" in inspect.signature(cls.wait).parameters
    assert "delete" in dir(Client) and "delete" in dir(AsyncClient)


# ------------------------------------------------------------------ items 6, 7, 11 on a stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UpProcess, Path]]:
    home = tmp_path_factory.mktemp("dead-ends") / "home"
    with UpProcess(home) as up:
        up.stack()
        assert usher(home, "apply", "-f", str(TREE)).returncode == 0
        yield up, home


def test_options_after_the_argument_and_delete_of_a_job(
    stack: tuple[UpProcess, Path], tmp_path: Path
) -> None:
    _, home = stack
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": "after",
                    "namespace": "user-a",
                    "annotations": {"usher.io/sim-duration": "1"},
                },
                "spec": {
                    "suspend": True,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "m",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": "1"}},
                                }
                            ],
                        }
                    },
                },
            }
        )
    )
    done = usher(home, "submit", str(manifest), "--wait", "--timeout", "60")
    assert done.returncode == 0, done.stderr
    assert "job.batch/after created" in done.stdout and "Finished" in done.stdout
    held = usher(
        home,
        "submit",
        "-n",
        "user-c",
        "--name",
        "held",
        "--image",
        "busybox",
        "--cpu",
        "1",
        "--duration",
        "3600",
        "--",
        "sleep",
        "1d",
    )
    assert held.returncode == 0, held.stderr
    assert (
        usher(home, "wait", "user-c/held", "--for", "admitted", "--timeout", "60").returncode == 0
    )
    none_admitted = usher(home, "jobs", "-n", "user-b", "--state", "Admitted")
    assert none_admitted.stdout.strip() == "No Admitted jobs in namespace user-b."
    deleted = usher(home, "cancel", "user-c/held")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == "job.batch/held deleted"
    poll(lambda: True if "held" not in usher(home, "jobs", "-n", "user-c").stdout else None)
    again = one_line(usher(home, "delete", "held", "-n", "user-c"), 3)
    assert "no job user-c/held" in again


def test_status_then_down_stop_the_stack_from_another_terminal(
    stack: tuple[UpProcess, Path],
) -> None:
    up, home = stack
    assert up.proc is not None
    info = json.loads((home / "stack.json").read_text())
    assert info["up_pid"] == up.proc.pid
    status = usher(home, "status")
    assert status.returncode == 0, status.stderr
    for name in ("usher up", "nats", "postgres", "kube-emulator", "ledger", "watcher"):
        assert name in status.stdout
    assert "not running" not in status.stdout
    assert "***" in status.stdout and "default, a, b" in status.stdout
    for secret in (info["nats_url"], info["database_url"]):
        password = secret.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
        assert password not in status.stdout
    as_json = json.loads(usher(home, "status", "-o", "json").stdout)
    assert {p["name"] for p in as_json["processes"] if p["alive"]} >= {"usher up", "nats"}
    everything = [up.proc.pid, *descendants(up.proc.pid)]
    down = usher(home, "down")
    assert down.returncode == 0, down.stderr
    assert down.stdout.strip().endswith("processes.")
    assert up.proc.wait(timeout=5) == 0
    assert all(not pid_alive(pid) for pid in everything)
    assert one_line(usher(home, "down"), 4).startswith("usher: no Usher is running in")
    assert one_line(usher(home, "status"), 4).startswith("usher: no Usher is running in")
