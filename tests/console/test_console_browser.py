"""The web console in a real browser, against `usher up` playing the demo.

One `usher up` (kube-queue's walkthrough's scenarios, then the steady workload) and one headless
Chromium serve every test of the module: the tree page shows the demo tree's numbers, a queue page
the walkthrough's positions (the same as `usher replay` at the page's log position) and each job's
estimated start, a preempted job's page its preemptor, the live stream shows a decision within a
second of it, the time travel view at an old position is what `usher replay --seq N` prints, and no
page shows a password or a server's address. Every page is saved as a screenshot (see
``tests.console.browser.artefacts``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from playwright.sync_api import expect

from tests.cli.stack_process import UpProcess, poll, usher
from tests.console.browser import artefacts, chromium, skip_without_chromium
from usher.local.credentials import Credentials

skip_without_chromium()

pytestmark = pytest.mark.e2e

QUEUE_A = "root-department-a-user-a"
START = r"now|~\w+ \(\w+-\w+\)|unknown: .+"
"""A pending job's estimated start as the console words it (``estimated_start``)."""


class Console:
    """The running system, its console's URL, a browser page, and where screenshots go."""

    def __init__(self, up: UpProcess, url: str, page: Any, shots: Path) -> None:
        self.up = up
        self.url = url.rstrip("/")
        self.page = page
        self.shots = shots

    @property
    def home(self) -> Path:
        return self.up.home

    def open(self, path: str) -> Any:
        self.page.goto(self.url + path, wait_until="domcontentloaded")
        return self.page

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    home = tmp_path_factory.mktemp("console") / "home"
    up = UpProcess(home, args=("--console-port", "0", "--interval", "30")).start()
    try:
        info = up.stack()
        url = str(info["console_url"])
        assert url.startswith("http://127.0.0.1:"), url
        with chromium() as browser:
            page = browser.new_page()
            yield Console(up, url, page, artefacts(tmp_path_factory.getbasetemp()))
    finally:
        up.stop()


def _replay_json(home: Path, seq: int) -> dict[str, Any]:
    result = usher(home, "replay", "--seq", str(seq), "-o", "json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_the_tree_page_shows_the_walkthrough_trees_numbers(console: Console) -> None:
    page = console.open("/")
    page.wait_for_selector('tr[data-path="root/Department-b"]', timeout=30_000)

    def amounts(path: str, resource: str) -> tuple[str, str]:
        cell = page.locator(f'tr[data-path="{path}"] [data-resource="{resource}"]')
        return cell.locator(".min").inner_text(), cell.locator(".max").inner_text()

    # walkthrough-tree.yaml: 100 cpu / 100Gi / 4 GPUs in all; Department-a is guaranteed 60 cpu,
    # 60Gi, 3 GPUs, Department-b 40 cpu, 40Gi, 1 GPU; each may borrow up to the whole.
    assert amounts("root", "cpu") == ("100", "100")
    assert amounts("root", "memory") == ("100Gi", "100Gi")
    assert amounts("root/Department-a", "cpu") == ("60", "100")
    assert amounts("root/Department-a", "nvidia.com/gpu") == ("3", "4")
    assert amounts("root/Department-b", "cpu") == ("40", "100")
    assert amounts("root/Department-b", "memory") == ("40Gi", "100Gi")
    assert page.locator(f'a[href="/queue/{QUEUE_A}"]').count() >= 1
    console.shot("tree")


def test_a_queue_page_shows_the_walkthroughs_positions(console: Console) -> None:
    """Scenario 2: pi-6nsc7 (priority 2) heads pi-2xtcj; the page's positions are the
    replay's at the log position the page shows."""

    def shown() -> tuple[int, dict[str, int]] | None:
        page = console.open(f"/queue/{QUEUE_A}")

        def seq() -> int:
            return int(page.locator("[data-view-seq]").first.inner_text())

        # The page refreshes itself when the log moves: rows read between two reads of the
        # same log position belong to that position, otherwise read again.
        before = seq()
        rows = page.locator("tr[data-job]")
        positions = {
            rows.nth(i).get_attribute("data-job") or "": int(
                rows.nth(i).locator(".position").inner_text()
            )
            for i in range(rows.count())
        }
        if seq() != before or not {"user-a/pi-6nsc7", "user-a/pi-2xtcj"} <= set(positions):
            return None
        return before, positions

    seq, positions = poll(shown, timeout=60, every=0.5)
    assert positions["user-a/pi-6nsc7"] < positions["user-a/pi-2xtcj"]
    # Each row's estimated start in usher jobs --start's words, or unknown with the reason.
    starts = console.page.locator("tr[data-job] td.start").all_inner_texts()
    assert starts and all(re.fullmatch(START, text.strip()) for text in starts), starts
    replay = _replay_json(console.home, seq)
    [queue] = [q for q in replay["queues"] if q["queue"] == QUEUE_A]
    assert positions == {entry["job"]: entry["position"] for entry in queue["jobs"]}
    console.shot("queue")
    console.open("/queues")
    console.shot("queues")


def test_a_preempted_jobs_page_names_its_preemptor(console: Console) -> None:
    """Scenario 3: Department-b's urgent job reclaims its guarantee from user-b/borrow."""

    def preemptor() -> str | None:
        page = console.open("/job/user-b/borrow")
        link = page.locator("#timeline li.preempted a.preemptor")
        return link.first.inner_text() if link.count() else None

    assert poll(preemptor, timeout=60, every=0.5) == "user-c/urgent"
    page = console.page
    assert "Reclaim" in page.locator("#timeline li.preempted .reason").first.inner_text()
    page.locator("#timeline li.preempted a.preemptor").first.click()
    page.wait_for_url("**/job/user-c/urgent")
    assert "preempts" in page.locator("#timeline").inner_text()
    console.open("/job/user-b/borrow")
    console.shot("job")
    console.open("/").wait_for_selector('tr[data-path="root/Department-b"]')
    console.shot("tree-after-reclaim")


def test_the_live_stream_shows_a_decision_within_a_second(console: Console) -> None:
    page = console.open("/decisions")
    # A selector-based wait: the console's CSP forbids wait_for_function's eval.
    expect(page.locator("#seq")).to_have_attribute("data-seq", re.compile(r"^[1-9][0-9]*$"))
    time.sleep(0.5)  # the stream is connected (its first event came): what follows is live
    probe = ["submit", "--name", "live-probe", "-n", "user-c", "--image", "busybox"]
    assert usher(console.home, *probe, "--cpu", "1", "--duration", "5").returncode == 0
    row = page.wait_for_selector("#decision-rows tr.fresh", timeout=60_000)
    assert row is not None
    decided = int(row.get_attribute("data-time") or 0)
    shown = int(row.get_attribute("data-received") or 0)
    assert 0 <= shown - decided < 1000, f"shown {shown - decided} ms after the decision"
    console.shot("decisions")


def test_time_travel_at_an_old_position_equals_usher_replay(console: Console) -> None:
    page = console.open("/replay")
    last = int(page.locator("#travel-seq").get_attribute("max") or 0)
    assert last > 10
    old = last // 2
    page.locator("#travel-seq").fill(str(old))
    page.locator("#travel button").click()
    page.wait_for_url(f"**/replay?seq={old}")
    assert int(page.locator("#replay-seq").inner_text()) <= old
    text = page.locator("#replay-text").inner_text()
    cli = usher(console.home, "replay", "--seq", str(old))
    assert cli.returncode == 0, cli.stderr
    assert text.rstrip("\n") == cli.stdout.rstrip("\n")
    replay = _replay_json(console.home, old)
    rows = page.locator("#replay-jobs tbody tr")
    shown = [
        (
            rows.nth(i).locator("td").nth(0).inner_text(),
            rows.nth(i).locator("td").nth(1).inner_text(),
        )
        for i in range(rows.count())
    ]
    assert shown == [(job["job"], job["state"]) for job in replay["jobs"]]
    console.shot("replay")
    console.open("/charts")
    console.shot("charts")


def test_no_page_shows_a_secret_or_an_address(console: Console) -> None:
    creds = msgspec.json.decode((console.home / "credentials.json").read_bytes(), type=Credentials)
    secrets = [*creds.nats.values(), creds.pg_superuser, creds.pg_ledger, creds.pg_audit]
    pages = ("/", "/queues", f"/queue/{QUEUE_A}", "/job/user-b/borrow", "/decisions", "/charts")
    for path in (*pages, "/replay"):
        html = console.open(path).content()
        assert not [s for s in secrets if s in html], path
        assert "nats://" not in html and "postgresql" not in html, path


def test_the_charts_fill_a_wide_window_and_show_their_scales(console: Console) -> None:
    """Issue 29: in a 1400 px window each chart spans its column (it was 640 px wide) and
    reads off a value scale up the side and clock times along the bottom."""
    page = console.page
    page.set_viewport_size({"width": 1400, "height": 900})
    try:
        first = "section.chart svg >> nth=0 >> text.x-tick"  # a span longer than one sample
        poll(lambda: console.open("/charts").locator(first).count() >= 2 or None, timeout=90)
        column = page.locator("main").evaluate(
            "m => m.clientWidth - parseFloat(getComputedStyle(m).paddingLeft)"
            " - parseFloat(getComputedStyle(m).paddingRight)"
        )
        charts = page.locator("section.chart svg")
        for i in range(charts.count()):
            chart = charts.nth(i)
            box = chart.bounding_box()
            assert box is not None and box["width"] >= column - 4, (box, column)
            for scale in ("y-tick", "x-tick"):
                labels = chart.locator(f"text.{scale}")
                assert labels.count() >= 2, scale
                first = labels.first.bounding_box()
                assert first is not None and first["height"] >= 9, (scale, first)  # legible
        console.shot("charts-1400")
    finally:
        page.set_viewport_size({"width": 1280, "height": 860})
