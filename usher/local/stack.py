"""The embedded one-machine stack: NATS JetStream + PostgreSQL, migrated and with streams.

What it does: makes ``$USHER_HOME`` (default ``~/.usher``) private (0700), loads or makes its
credentials (``credentials.json``, 0600), starts both servers under it with authentication
(NATS: one user per identity with the deploy's permissions; PostgreSQL: scram passwords, the
ledger and audit roles), applies the Alembic migrations and the roles as the set-up superuser,
creates the JetStream streams as the admin (with the configured replicas), and writes
``stack.json`` (atomically, 0600) so that every other ``usher`` command finds the running stack:
it holds the read-only ``console`` NATS URL and the ``usher_audit`` database URL, plus the
admin's NATS URL for ``usher import``. Starting again reuses the data (resume).
``usher.local.system`` adds the Kubernetes API emulator and the services on top and
records them in the same file.
What it must never do: leave a server running after ``stop``, write a secret to a file others
can read, or print one.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import nats

from usher.adapters.nats.log import ensure_streams
from usher.adapters.nats.permissions import ADMIN, CONSOLE, DEFAULT_ZONES, identities
from usher.adapters.nats.subjects import Subjects
from usher.adapters.pg.migrate import upgrade
from usher.adapters.stack_file import STACK_FILE, StackInfo
from usher.core.values.clusters import ClusterZones
from usher.local.credentials import load_credentials, make_private_home, write_private
from usher.local.servers import PG_AUDIT, PG_LEDGER, NatsServer, PostgresServer


def write_stack_info(home: Path, info: StackInfo) -> None:
    """Write ``stack.json`` atomically (readers never see half a file) and owner-only."""
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
        clusters: ClusterZones | None = None,
    ) -> None:
        self.home = home
        self.subjects = Subjects(prefix)
        self.zones = zones
        self.clusters = clusters
        self.stream_replicas = stream_replicas
        self.sync_always = sync_always
        self.nats = NatsServer(
            home, sync_always=sync_always, prefix=prefix, zones=zones, clusters=clusters
        )
        self.postgres = PostgresServer(home, durable=durable)
        self.info: StackInfo | None = None

    def _load_credentials(self) -> None:
        names = [i.name for i in identities(self.subjects, self.zones, clusters=self.clusters)]
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
