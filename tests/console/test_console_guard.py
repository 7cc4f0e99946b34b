"""The console answers only for its own addresses, with headers that keep other sites out, and
reads numbers in the query strictly (a real aiohttp server on 127.0.0.1, issue 26 item 8)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.builders.log import QA, Log
from tests.console.test_console_pages import folded, reclaim_log
from usher.console.server import BAD_REQUESTS, SECURITY_HEADERS, allowed_hosts, make_app

PAGES = ("/", "/queues", f"/queue/{QA}", "/job/user-a/big", "/decisions", "/charts", "/replay")


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(make_app(folded(reclaim_log())))) as test_client:
        yield test_client


async def test_a_host_that_is_not_the_consoles_own_is_refused(client: TestClient) -> None:
    port = client.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        response = await client.get("/", headers={"Host": host})
        assert response.status == 200, host
    # A rebinding page sends its own name; a name without the port is another origin too.
    for host in (f"evil.example:{port}", "evil.example", "localhost", f"127.0.0.1:{port + 1}"):
        response = await client.get("/", headers={"Host": host})
        assert response.status == 421, host
        assert "Quota tree" not in await response.text()
        response = await client.get("/events", headers={"Host": host})
        assert response.status == 421, host


def test_the_allowed_hosts_are_loopback_the_configured_host_and_the_local_address() -> None:
    hosts = allowed_hosts("usher.internal", "192.0.2.7", 8470)
    assert hosts == {
        "127.0.0.1:8470", "localhost:8470", "[::1]:8470", "usher.internal:8470",
        "192.0.2.7:8470",
    }  # fmt: skip
    assert "[::1]:80" in allowed_hosts("::1", "::1", 80) and "[::1]" in allowed_hosts("", "", 80)


async def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    for path in (*PAGES, "/static/console.js", "/nowhere", "/queue/nope"):
        response = await client.get(path)
        for name, value in SECURITY_HEADERS.items():
            assert response.headers.get(name) == value, (path, name)
    policy = SECURITY_HEADERS["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self';" in policy
    assert SECURITY_HEADERS["X-Frame-Options"] == "DENY"


async def test_the_pages_need_nothing_the_policy_forbids(client: TestClient) -> None:
    """script-src 'self': every script is a file of /static, no inline code or handler."""
    for path in PAGES:
        text = await (await client.get(path)).text()
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", text, flags=re.S)
        assert scripts, path
        for attributes, body in scripts:
            assert 'src="/static/' in attributes and not body.strip(), path
        assert not re.search(r"\son[a-z]+\s*=", text), path
        assert "javascript:" not in text, path


async def test_numbers_in_the_query_are_ascii_digits_only(client: TestClient) -> None:
    log = Log().tree(0)
    for n in range(150):
        log.job(1 + n / 1000, f"user-a/job-{n:03d}", 70)
    async with TestClient(TestServer(make_app(folded(log)))) as many:
        assert (await many.get(f"/queue/{QA}?page=2")).status == 200
        for raw in ("1_0", "+2", " 2", "2 ", "\uff12", "\u0662", "2.0", "0x2", "", "1" * 19):
            response = await many.get(f"/queue/{QA}", params={"page": raw})
            assert response.status == 400, raw
            assert "page must be a whole number; got" in await response.text(), raw
    for path, name in (("/replay", "seq"), ("/decisions", "before")):
        response = await client.get(path, params={name: "1_0"})
        assert response.status == 400
        assert f"{name} must be a whole number; got &#39;1_0&#39;" in (await response.text())


async def test_a_malformed_request_is_one_log_line_not_a_traceback(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A 10 KB request line (aiohttp's LineTooLong) used to log a traceback each time: any
    local user could fill the console's log. With the filter ``serve`` installs: one line."""
    logger = logging.getLogger("aiohttp.server")
    logger.addFilter(BAD_REQUESTS)
    try:
        with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
            reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
            writer.write(b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            answer = await reader.read(100)
            writer.close()
            await asyncio.sleep(0.1)
    finally:
        logger.removeFilter(BAD_REQUESTS)
    assert answer.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400"))
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert records and all(r.exc_info is None for r in records)
    assert any("refused a malformed request: LineTooLong" in r.getMessage() for r in records)
