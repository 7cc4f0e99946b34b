"""``python -m bench --profile``'s folding of py-spy's collapsed stacks into top frames.

The fixture is py-spy's raw output as captured from the bench client during a real
``python -m bench --suites stack --quick --profile`` run (it holds a sample with no Python
frame, a line py-spy writes as `` <count>``). Expected values are recomputed from the text.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.profile import (
    NO_FRAME,
    Profiler,
    frame_name,
    parse_collapsed,
    py_spy,
    top_frames,
    why_not,
)

CAPTURED = Path(__file__).parent / "fixtures" / "py-spy-raw-stack-client.txt"


def _lines() -> list[tuple[list[str], int]]:
    """The fixture split by hand: (frames, count) per line."""
    out = []
    for line in CAPTURED.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        out.append((stack.split(";") if stack else [], int(count)))
    return out


def test_every_sample_of_the_capture_is_counted() -> None:
    stacks = parse_collapsed(CAPTURED.read_text())
    assert sum(stacks.values()) == sum(count for _, count in _lines())
    frameless = sum(count for frames, count in _lines() if not frames)
    assert frameless > 0, "the capture holds a sample with no Python frame"
    assert stacks[(NO_FRAME,)] == frameless


def test_self_shares_of_the_capture_add_up_and_rank_by_self() -> None:
    stacks = parse_collapsed(CAPTURED.read_text())
    every = top_frames(stacks, limit=10_000)
    assert sum(f.self_pct for f in every) == pytest.approx(100)
    assert [f.self_pct for f in every] == sorted((f.self_pct for f in every), reverse=True)
    assert all(0 < f.self_pct <= f.total_pct <= 100 for f in every)
    top = top_frames(stacks)
    assert top == every[: len(top)] and len(top) == min(15, len(every))


def test_the_capture_s_top_frame_is_the_most_frequent_innermost_frame() -> None:
    innermost: Counter[str] = Counter()
    for frames, count in _lines():
        innermost[frame_name(frames[-1]) if frames else NO_FRAME] += count
    total = sum(innermost.values())
    (name, count), *_ = innermost.most_common(1)
    first = top_frames(parse_collapsed(CAPTURED.read_text()))[0]
    assert (first.name, first.self_pct) == (name, pytest.approx(100 * count / total))


@pytest.mark.parametrize(
    ("frame", "name"),
    [
        (
            "Ledger.commit (services/ledger/ledger.py:120)",
            "Ledger.commit (services/ledger/ledger.py)",
        ),
        ("Ledger.commit (services/ledger/ledger.py)", "Ledger.commit (services/ledger/ledger.py)"),
        (
            "_find_and_load (<frozen importlib._bootstrap>)",
            "_find_and_load (<frozen importlib._bootstrap>)",
        ),
        ("values (<sqlalchemy generated wrapper>:3)", "values (<sqlalchemy generated wrapper>)"),
        ("f (C:/x.py:7)", "f (C:/x.py)"),  # only the last :<digits> is a line number
        ("no location", "no location"),
    ],
)
def test_a_frame_s_line_number_is_dropped(frame: str, name: str) -> None:
    assert frame_name(frame) == name


@pytest.mark.parametrize("line", ["main (a.py);work (a.py)", "main (a.py) many", "12"])
def test_a_line_without_a_count_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_collapsed(line + "\n")


def test_a_torn_name_among_many_lines_is_skipped_not_fatal() -> None:
    """py-spy --nonblocking may read a name while the process rewrites it: one such line in
    hundreds (seen: a lone 'ð' between a U+0085 and a newline) costs its samples, not the
    suite; a Unicode line separator inside a name does not end the line."""
    good = "main (a.py);work (b.py) 3\n" * 150
    stacks = parse_collapsed(good + "\u00f0\n" + "main (a.py);lo\u2028op (c.py) 2\n")
    assert stacks[("main (a.py)", "work (b.py)")] == 450
    assert stacks[("main (a.py)", "lo\u2028op (c.py)")] == 2


FRAMES = st.sampled_from(["main (a.py)", "loop (b.py)", "work (c.py)", "dumps (json.py)"])


@given(
    st.lists(st.tuples(st.lists(FRAMES, min_size=1, max_size=6), st.integers(1, 50)), min_size=1)
)
def test_shares_match_a_count_by_hand(samples: list[tuple[list[str], int]]) -> None:
    text = "\n".join(f"{';'.join(frames)} {count}" for frames, count in samples)
    total = sum(count for _, count in samples)
    found = {f.name: f for f in top_frames(parse_collapsed(text), limit=100)}
    for name in {frame for frames, _ in samples for frame in frames}:
        own = sum(count for frames, count in samples if frames[-1] == name)
        anywhere = sum(count for frames, count in samples if name in frames)  # once per sample
        if own == 0:
            assert name not in found
            continue
        assert found[name].self_pct == pytest.approx(100 * own / total)
        assert found[name].total_pct == pytest.approx(100 * anywhere / total)


SPIN = """
import json, time
def spin_for_the_profiler():
    return sum(len(json.dumps({"n": i})) for i in range(500))
while True:
    spin_for_the_profiler()
"""


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (the bench extra)")
def test_a_sampled_process_shows_its_own_function() -> None:
    if (reason := why_not()) is not None:
        pytest.skip(reason)
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        profiler = Profiler(rate=100)
        with profiler.sampling({"spinner": child.pid}):
            time.sleep(2)
    finally:
        child.kill()
        child.wait()
    spinner = profiler.report()["processes"]["spinner"]
    assert spinner["samples"] > 0 and spinner["cpu_s"] > 0
    names = [frame["name"] for frame in spinner["top"]]
    assert any("spin_for_the_profiler" in name for name in names), names
    assert "error" not in spinner


def test_without_py_spy_the_report_says_why_and_still_counts_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    child = subprocess.Popen(["/bin/sleep", "30"])
    try:
        profiler = Profiler()
        with profiler.sampling({"sleeper": child.pid}):
            pass
    finally:
        child.kill()
        child.wait()
    report = profiler.report()
    assert report["skipped"] is not None and "not installed" in report["skipped"]
    assert report["processes"]["sleeper"]["error"] == report["skipped"]
    assert "cpu_s" in report["processes"]["bench-client"]
