"""A service process freezes what its start built once it is ready, never before, and never
when it is stopped first; the thresholds are raised, not the collector turned off."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys

from services.common import collector


def _in_fresh_process(code: str) -> str:
    """Run ``code`` in a new interpreter (freezing is process-wide) and return its output."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_tune_raises_the_thresholds_and_keeps_the_collector_on() -> None:
    out = _in_fresh_process(
        "import gc; from services.common import collector; collector.tune();"
        " print(gc.isenabled(), gc.get_threshold())"
    )
    assert out == f"True {collector.THRESHOLDS}"


def test_what_start_built_is_frozen_once_ready() -> None:
    out = _in_fresh_process(
        "import asyncio, gc\n"
        "from services.common import collector\n"
        "async def main():\n"
        "    ready, stop = asyncio.Event(), asyncio.Event()\n"
        "    state = [{'job': i} for i in range(10_000)]\n"
        "    task = asyncio.ensure_future(collector.freeze_when_ready(ready, stop))\n"
        "    await asyncio.sleep(0.01)\n"
        "    before = gc.get_freeze_count()\n"
        "    ready.set()\n"
        "    await task\n"
        "    print(before, gc.get_freeze_count() >= len(state))\n"
        "asyncio.run(main())\n"
    )
    assert out == "0 True"


def test_a_service_stopped_before_it_is_ready_freezes_nothing() -> None:
    async def run() -> int:
        ready, stop = asyncio.Event(), asyncio.Event()
        task = asyncio.ensure_future(collector.freeze_when_ready(ready, stop))
        stop.set()
        await task
        return gc.get_freeze_count()

    frozen_before = gc.get_freeze_count()
    assert asyncio.run(run()) == frozen_before
