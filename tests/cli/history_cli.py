"""The offline history commands (`usher replay|audit|what-if|explain|log`) run as a process
with no stack address in its environment, and the export files they read, written from an
in-memory ``Log``. Never starts a server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec

from tests.builders.log import Log
from usher.core.history import replay as history

ENV_KEYS = ("USHER_NATS_URL", "USHER_DATABASE_URL", "USHER_PREFIX", "USHER_POLICY")


def usher(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    if home is not None:
        env["USHER_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "usher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def export(log: Log, path: Path) -> Path:
    entries = [
        history.exported_entry(i, subject, msgspec.json.encode(envelope))
        for i, (subject, envelope) in enumerate(log.entries, start=1)
    ]
    header = history.ExportHeader(
        prefix="usher", stream="USHER_LOG", entries=len(entries), first_seq=1, last_seq=len(entries)
    )
    path.write_bytes(history.encode_export(header, entries))
    return path
