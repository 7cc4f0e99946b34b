"""`usher console` from the command line: one line and an exit code when it cannot serve."""

from __future__ import annotations

from pathlib import Path

from tests.cli.stack_process import usher


def test_without_a_running_usher_it_says_how_to_start_one(tmp_path: Path) -> None:
    result = usher(tmp_path / "home", "console", "--port", "0")
    assert result.returncode == 4
    assert result.stderr.startswith("usher: no Usher is running")
    assert "usher up" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_bad_setting_is_a_usage_error(tmp_path: Path) -> None:
    nats = ("--nats", "nats://usher-console:pw@127.0.0.1:1")
    result = usher(tmp_path / "home", "console", *nats, "--policy", "Fair")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    port = usher(tmp_path / "home", "console", *nats, "--port", "70000")
    assert port.returncode == 2 and "--port" in port.stderr
