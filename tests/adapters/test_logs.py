"""Logging: JSON lines with bound ids, and no secret ever printed."""

from __future__ import annotations

import json

import pytest

from usher.adapters import logs


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+asyncpg://usher:s3cret@db:5432/usher",
            "postgresql+asyncpg://usher:***@db:5432/usher",
        ),
        ("nats://svc:tok%40en@nats:4222", "nats://svc:***@nats:4222"),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
    ],
    ids=["postgres-password", "nats-token", "no-credentials"],
)
def test_redact_url_hides_only_the_password(url: str, shown: str) -> None:
    assert logs.redact_url(url) == shown


def test_json_lines_carry_bound_ids_and_hide_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("INFO", json=True)
    log = logs.get_logger(service="ledger", workload="user-a/pi", quota="root/Department-a")
    log.info("reserved", database="postgresql://u:pw@h/d", password="hunter2")
    line = capsys.readouterr().err.strip().splitlines()[-1]
    record = json.loads(line)
    assert record["event"] == "reserved"
    assert record["service"] == "ledger"
    assert record["workload"] == "user-a/pi"
    assert record["quota"] == "root/Department-a"
    assert record["level"] == "info"
    assert record["database"] == "postgresql://u:***@h/d"
    assert record["password"] == "***"
    assert "hunter2" not in line and "pw@" not in line
