"""`usher submit` reads its options with the core's parsers (issue 26): a loose value --
fullwidth digits, ``inf``, spaces, a zone that is no zone name -- is refused at once, one line
naming the option, exit 2, with no stack to ask (the home is empty)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.builders.manifests import sleeping_job
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


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["what-if", "--ready-timeout", "inf", "--file", "x.json"], "--ready-timeout"),
        (["what-if", "--min-runtime", "\uff11\uff12", "--file", "x.json"], "--min-runtime"),
        (["what-if", "--baseline-min-runtime", "1e300", "--file", "x.json"],
         "--baseline-min-runtime"),
        (["wait", "a/b", "--timeout", "nan"], "--timeout"),
    ],
)  # fmt: skip
def test_seconds_options_are_finite_and_bounded(
    tmp_path: Path, args: list[str], option: str
) -> None:
    result = usher(tmp_path / "home", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"Invalid value for '{option}'" in result.stderr
    assert "seconds from 0 to 2592000" in result.stderr


@pytest.mark.parametrize("command", [["submit", "--dry-run"], ["apply", "-f"]])
def test_a_manifest_with_a_loose_annotation_is_refused_naming_it(
    tmp_path: Path, command: list[str]
) -> None:
    """``\u00b2`` passes ``str.isdigit``: before issue 26, ``int()`` raised and a traceback
    was printed."""
    manifest = tmp_path / "job.yaml"
    annotation = {"usher.io/max-runtime-seconds": "\u00b2"}
    job = sleeping_job("sq", "user-a", cpu="1", memory="1Gi", annotations=annotation)
    manifest.write_text(yaml.safe_dump(job, allow_unicode=True), encoding="utf-8")
    result = usher(tmp_path / "home", *command, str(manifest))
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "metadata.annotations.usher.io/max-runtime-seconds" in result.stderr
    assert "ASCII digits only" in result.stderr


@pytest.mark.parametrize(
    ("args", "option", "needle"),
    [
        (["replay", "--half-life", "inf"], "--half-life", "seconds from 0 to 31622400"),
        (["explain", "a/b", "--half-life", "1e400"], "--half-life", "seconds from 0 to 31622400"),
        (["up", "--no-demo", "--half-life", "inf"], "--half-life", "seconds from 0 to 31622400"),
        (["up", "--no-demo", "--min-runtime", "nan"], "--min-runtime", "seconds from 0 to"),
        (["up", "--no-demo", "--interval", "nan"], "--interval", "seconds from 0 to"),
        (["replay", "--seq", "\uff15"], "--seq", "ASCII digits only"),
        (["replay", "--seq", "9" * 26], "--seq", "longer than 20 characters"),
    ],
)
def test_engine_and_history_options_are_read_strictly(
    tmp_path: Path, args: list[str], option: str, needle: str
) -> None:
    """Seconds and sequence numbers of `up`, `replay` and `explain`: ``inf`` was a
    traceback (OverflowError in the settings), a fullwidth five was read as seq 5, and a
    26-digit seq as the last one."""
    result = usher(tmp_path / "home", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    err = result.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"Invalid value for '{option}'" in err and needle in err


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "--group", "a,b!=c"],
        ["wait", "--group", "a b"],
        ["delete", "--group", "\uff11\uff12"],
        ["submit", "--image", "x", "-n", "user-a", "--for-each", "X=1,2", "--group", "Ab"],
    ],
)
def test_a_group_that_is_no_group_name_is_refused_before_any_label_selector(
    tmp_path: Path, args: list[str]
) -> None:
    result = usher(tmp_path / "home", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Invalid value for '--group'" in result.stderr
    assert "must be a group name" in result.stderr
    assert not (tmp_path / "home").exists()
