"""`usher submit` reads its options with the core's parsers (issue 26): a loose value --
fullwidth digits, ``inf``, spaces, a zone that is no zone name -- is refused at once, one line
naming the option, exit 2, with no stack to ask (the home is empty)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.stack_process import usher

JOB = ["submit", "--image", "x", "-n", "user-a"]


@pytest.mark.parametrize(
    ("args", "option", "needle"),
    [
        (["--cpu", "\uff11\uff12"], "--cpu", "is not Kubernetes notation"),
        (["--cpu", "1e300"], "--cpu", "is too large"),
        (["--memory", " 4Gi"], "--memory", "without surrounding spaces"),
        (["--gpu", "nan"], "--gpu", "is not Kubernetes notation"),
        (["--duration", "inf"], "--duration", "seconds from 0 to 2592000"),
        (["--duration", "1e300"], "--duration", "seconds from 0 to 2592000"),
        (["--replicas", "\u0661"], "--replicas", "whole number from 1 to 1000000"),
        (["--replicas", "0"], "--replicas", "whole number from 1 to 1000000"),
        (["--zone", "<script>"], "--zone", "must be a zone name"),
    ],
)
def test_a_loose_option_is_refused_naming_it(
    tmp_path: Path, args: list[str], option: str, needle: str
) -> None:
    result = usher(tmp_path / "home", *JOB, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    err = result.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert f"Invalid value for '{option}'" in err and needle in err
    assert not (tmp_path / "home").exists()
