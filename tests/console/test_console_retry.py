"""The console's job page lists every attempt of a job with retries (R12) and why each ended."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from tests.console.test_console_pages import folded, page, reclaim_log
from tests.core.test_retry import retry_log
from usher.console.server import make_app


async def test_the_job_page_lists_every_attempt() -> None:
    async with TestClient(TestServer(make_app(folded(retry_log())))) as client:
        text = await page(client, "/job/user-a/train-retry-1")
    attempts = text.split('id="attempts"')[1].split("</ol>")[0]
    assert '<a href="/job/user-a/train">user-a/train</a> (attempt 1): failed' in attempts
    assert "<b>OOMKilled</b>" in attempts
    assert "(attempt 2): succeeded" in attempts


async def test_a_job_without_retries_has_no_attempts() -> None:
    async with TestClient(TestServer(make_app(folded(reclaim_log())))) as client:
        text = await page(client, "/job/user-a/big")
    assert 'id="attempts"' not in text
