"""The embedded one-machine stack: NATS JetStream + PostgreSQL, migrated and with streams.

What it does: makes ``$USHER_HOME`` (default ``~/.usher``) private (0700), loads or makes its
credentials (``credentials.json``, 0600), starts both servers under it with authentication
(NATS: one user per identity with the deploy's permissions; PostgreSQL: scram passwords, the
ledger and audit roles), applies the Alembic migrations and the roles as the set-up superuser,
creates the JetStream streams as the admin (with the configured replicas), and writes
``stack.json`` (atomically, 0600) so that every other ``usher`` command finds the running stack:
it holds the read-only ``console`` NATS URL and the ``usher_audit`` database URL, plus the
admin's NATS URL for ``usher import``. Starting again reuses the data (resume).
``usher.adapters.embedded.system`` adds the Kubernetes API emulator and the services on top and
records them in the same file.
What it must never do: leave a server running after ``stop``, write a secret to a file others
can read, or print one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import nats

from usher.adapters.embedded.credentials import (
    load_credentials,
    make_private_home,
    write_private,
)
from usher.adapters.embedded.servers import PG_AUDIT, PG_LEDGER, NatsServer, PostgresServer
from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.permissions import ADMIN, CONSOLE, DEFAULT_ZONES, identities
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
    """The read-only ``console`` identity's URL (with its password: the file is 0600)."""
    database_url: str
    """The read-only ``usher_audit`` role's URL."""
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
    admin_nats_url: str = ""
    """The admin identity's URL: creates streams, imports a log (``usher import``)."""
    stream_replicas: int = 1
    durable: bool = False
    """``usher up --durable``: NATS fsyncs before it acknowledges (``sync_interval: always``)."""
    up_pid: int = 0
    """The ``usher up`` process that owns the system (``usher down`` sends it SIGTERM); 0
    when the system was started otherwise (a test, a library)."""

    def all_pids(self) -> dict[str, int]:
        """Every process of the system, infrastructure and services."""
        return {**self.pids, **self.service_pids}


def usher_home() -> Path:
    """``$USHER_HOME``, else ``~/.usher``."""
    return Path(os.environ.get("USHER_HOME") or Path.home() / ".usher").expanduser()


def home_problem(home: Path) -> str | None:
    """Why ``home`` cannot be Usher's data folder (a file, or below one), or None if it can."""
    for part in (home, *home.parents):
        if part.is_dir():
            return None
        if part.exists():
            below = "" if part == home else f" ({home} would be inside it)"
            return f"{part} is a file, not a folder{below}"
    return None


def read_stack_info(home: Path) -> StackInfo:
    """The running stack's info; ``FileNotFoundError`` when none was started there."""
    return msgspec.json.decode((home / STACK_FILE).read_bytes(), type=StackInfo)


def write_stack_info(home: Path, info: StackInfo) -> None:
    """Write ``stack.json`` atomically (readers never see half a file)."""
    write_private(home / STACK_FILE, msgspec.json.format(msgspec.json.encode(info)))


async def prepare_streams(nats_url: str, subjects: Subjects, replicas: int = 1) -> None:
    """Create or update the log and DLQ streams of ``subjects.prefix`` (as the admin)."""
    nc = await nats.connect(nats_url, connect_timeout=5, max_reconnect_attempts=3)
    try:
        await ensure_streams(nc.jetstream(), subjects, replicas)
    finally:
        await nc.close()


class EmbeddedStack:
    """Start/stop the embedded infrastructure as one unit."""

    def __init__(
        self,
        home: Path,
        *,
        prefix: str = "usher",
        durable: bool = True,
        zones: tuple[str, ...] = DEFAULT_ZONES,
        sync_always: bool = False,
        stream_replicas: int = 1,
    ) -> None:
        self.home = home
        self.subjects = Subjects(prefix)
        self.zones = zones
        self.stream_replicas = stream_replicas
        self.sync_always = sync_always
        self.nats = NatsServer(home, sync_always=sync_always, prefix=prefix, zones=zones)
        self.postgres = PostgresServer(home, durable=durable)
        self.info: StackInfo | None = None

    def _load_credentials(self) -> None:
        names = [i.name for i in identities(self.subjects, self.zones)]
        creds = load_credentials(self.home, names)
        self.nats.passwords = creds.nats
        self.postgres.superuser_password = creds.pg_superuser
        self.postgres.role_passwords = {PG_LEDGER: creds.pg_ledger, PG_AUDIT: creds.pg_audit}

    def nats_url_for(self, identity: str) -> str:
        """``identity``'s NATS URL with its password (for that process's environment only)."""
        return self.nats.url_for(identity)

    def database_url_for(self, role: str) -> str:
        """``role``'s (``usher_ledger``, ``usher_audit``) database URL with its password."""
        return self.postgres.url_as(role, self.postgres.role_passwords[role])

    def start(self, *, write_file: bool = True) -> StackInfo:
        """Start everything; on any failure stop what was started and re-raise.

        ``write_file=False`` leaves ``stack.json`` to a caller that starts more on top.
        """
        make_private_home(self.home)
        self._load_credentials()
        try:
            self.nats.start()
            superuser_url = self.postgres.start()
            upgrade(superuser_url)
            self.postgres.set_up_roles()
            admin_url = self.nats_url_for(ADMIN)
            asyncio.run(prepare_streams(admin_url, self.subjects, self.stream_replicas))
        except BaseException:
            self.stop()
            raise
        self.info = StackInfo(
            home=str(self.home),
            nats_url=self.nats_url_for(CONSOLE),
            database_url=self.database_url_for(PG_AUDIT),
            admin_nats_url=admin_url,
            stream_replicas=self.stream_replicas,
            durable=self.sync_always,
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
