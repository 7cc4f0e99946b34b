"""The embedded one-machine stack: NATS JetStream + PostgreSQL, migrated and with streams.

What it does: starts both servers under ``$USHER_HOME`` (default ``~/.usher``), applies the
Alembic migrations, creates the JetStream streams, and writes ``stack.json`` (atomically) so
that every other ``usher`` command finds the running stack. Starting again reuses the data
(resume). ``usher.adapters.embedded.system`` adds the Kubernetes API emulator and the services
on top and records them in the same file.
What it must never do: leave a server running after ``stop`` or write a secret to disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import nats

from usher.adapters.embedded.servers import NatsServer, PostgresServer
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.migrate import upgrade

STACK_FILE = "stack.json"


class StackInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What ``stack.json`` says about a running embedded stack.

    Fields after ``started_at`` came with the whole one-machine system (``usher up``); they
    have defaults so that a file written by the bare stack still decodes.
    """

    home: str
    nats_url: str
    database_url: str
    prefix: str
    pids: dict[str, int]
    """Infrastructure processes by name: ``nats``, ``postgres``, ``kube-emulator``."""
    started_at: datetime
    kubeconfig: str = ""
    """Kubeconfig of the Kubernetes API (the emulator's, under ``$USHER_HOME``)."""
    zones: list[str] = msgspec.field(default_factory=list)
    """Zones served by a dequeuer each (``default`` takes jobs without ``usher.io/zone``)."""
    service_pids: dict[str, int] = msgspec.field(default_factory=dict)
    """Service processes by name: ``ledger``, ``preemptor``, ``dequeuer-<zone>``, ``watcher``."""
    policy: str = "Round"
    oversell_rate: str = "1"
    within_quota: str = "Never"
    min_runtime_s: float = 0.0

    def all_pids(self) -> dict[str, int]:
        """Every process of the system, infrastructure and services."""
        return {**self.pids, **self.service_pids}


def usher_home() -> Path:
    """``$USHER_HOME``, else ``~/.usher``."""
    return Path(os.environ.get("USHER_HOME") or Path.home() / ".usher").expanduser()


def read_stack_info(home: Path) -> StackInfo:
    """The running stack's info; ``FileNotFoundError`` when none was started there."""
    return msgspec.json.decode((home / STACK_FILE).read_bytes(), type=StackInfo)


def write_stack_info(home: Path, info: StackInfo) -> None:
    """Write ``stack.json`` atomically (readers never see half a file)."""
    path = home / STACK_FILE
    partial = path.with_name(f".{STACK_FILE}.partial")
    partial.write_bytes(msgspec.json.format(msgspec.json.encode(info)))
    os.replace(partial, path)


async def prepare_streams(nats_url: str, subjects: Subjects) -> None:
    """Create or update the log and DLQ streams of ``subjects.prefix``."""
    nc = await nats.connect(nats_url, connect_timeout=5, max_reconnect_attempts=3)
    try:
        await ensure_streams(nc.jetstream(), subjects)
    finally:
        await nc.close()


class EmbeddedStack:
    """Start/stop the embedded infrastructure as one unit."""

    def __init__(self, home: Path, *, prefix: str = "usher", durable: bool = True) -> None:
        self.home = home
        self.subjects = Subjects(prefix)
        self.nats = NatsServer(home)
        self.postgres = PostgresServer(home, durable=durable)
        self.info: StackInfo | None = None

    def start(self, *, write_file: bool = True) -> StackInfo:
        """Start everything; on any failure stop what was started and re-raise.

        ``write_file=False`` leaves ``stack.json`` to a caller that starts more on top.
        """
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            nats_url = self.nats.start()
            database_url = self.postgres.start()
            upgrade(database_url)
            asyncio.run(prepare_streams(nats_url, self.subjects))
        except BaseException:
            self.stop()
            raise
        self.info = StackInfo(
            home=str(self.home),
            nats_url=nats_url,
            database_url=database_url,
            prefix=self.subjects.prefix,
            pids={
                "nats": self.nats.process.pid or 0 if self.nats.process else 0,
                "postgres": self.postgres.process.pid or 0 if self.postgres.process else 0,
            },
            started_at=datetime.now(UTC),
        )
        if write_file:
            write_stack_info(self.home, self.info)
        return self.info

    def stop(self) -> None:
        """Stop PostgreSQL then NATS (reverse start order) and forget ``stack.json``."""
        self.postgres.stop()
        self.nats.stop()
        with contextlib.suppress(FileNotFoundError):
            (self.home / STACK_FILE).unlink()
