"""Secrets of a one-machine Usher: generated once, kept owner-only under ``$USHER_HOME``.

What it does: makes ``$USHER_HOME`` private (0700, and everything in it owner-only: folders
0700, files 0600, also those an older run left wider), and loads or creates
``$USHER_HOME/credentials.json`` (0600): a password per NATS identity
(usher/adapters/nats/permissions.py), the PostgreSQL superuser's (set-up only), the ledger's
and the audit role's passwords. A restart reuses them (PostgreSQL keeps its roles); a new
identity (a zone added) gets a new password. ``write_private`` writes any secret file with
mode 0600 from its first byte (no window where it is readable by others).
What it must never do: log or print a secret, widen a permission, or write a secret file that
someone other than its owner can read.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

import msgspec

CREDENTIALS_FILE = "credentials.json"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


class Credentials(msgspec.Struct, kw_only=True):
    """Every password of one installation (never shown, never logged)."""

    nats: dict[str, str] = msgspec.field(default_factory=dict)
    """Password by NATS identity name (``ledger``, ``dequeuer-a``, ``console``, ``admin``...)."""
    pg_superuser: str = ""
    pg_ledger: str = ""
    pg_audit: str = ""


def new_password() -> str:
    """A random password safe in URLs and config files (no quoting needed)."""
    return secrets.token_urlsafe(24)


def make_private_home(home: Path) -> None:
    """Create ``home`` (0700) or tighten an existing one and everything in it (a folder or
    file an older version left readable by others: logs, cluster state); never touches its
    parents, never follows a symbolic link."""
    private_dir(home)
    for folder, dirs, files in os.walk(home):
        for name in dirs:
            _owner_only(Path(folder) / name)
        for name in files:
            _owner_only(Path(folder) / name)


def private_dir(path: Path) -> Path:
    """``path`` created (with its parents) as 0700, or an existing one tightened to 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if path.stat().st_mode & 0o777 != PRIVATE_DIR:
        path.chmod(PRIVATE_DIR)
    return path


def _owner_only(path: Path) -> None:
    """Take group's and others' bits off (a folder 0755 becomes 0700, a file 0644 0600)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return  # removed meanwhile (a server's temporary file)
    if stat.S_ISLNK(mode) or not mode & 0o077:
        return
    with contextlib.suppress(FileNotFoundError, PermissionError):
        path.chmod(stat.S_IMODE(mode) & 0o700)


def open_private_log(path: Path) -> int:
    """A file descriptor appending to ``path``, created 0600 in a 0700 folder."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    if os.fstat(fd).st_mode & 0o077:
        os.fchmod(fd, PRIVATE_FILE)
    return fd


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, readable by its owner only (0600)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(partial, path)


def load_credentials(home: Path, nats_identities: Iterable[str]) -> Credentials:
    """The installation's credentials, created or completed (and saved) as needed."""
    path = home / CREDENTIALS_FILE
    try:
        creds = msgspec.json.decode(path.read_bytes(), type=Credentials)
    except FileNotFoundError:
        creds = Credentials()
    changed = False
    for name in nats_identities:
        if name not in creds.nats:
            creds.nats[name] = new_password()
            changed = True
    for field in ("pg_superuser", "pg_ledger", "pg_audit"):
        if not getattr(creds, field):
            setattr(creds, field, new_password())
            changed = True
    if changed or path.stat().st_mode & 0o777 != PRIVATE_FILE:
        write_private(path, msgspec.json.format(msgspec.json.encode(creds)))
    return creds


def saved_subscriber_passwords(home: Path) -> dict[str, str]:
    """The ``subscriber-<system>`` passwords saved in ``home`` (``usher subscriber``); none
    when there is no credentials file (nothing is created here)."""
    try:
        creds = msgspec.json.decode((home / CREDENTIALS_FILE).read_bytes(), type=Credentials)
    except FileNotFoundError:
        return {}
    return {name: pw for name, pw in creds.nats.items() if name.startswith("subscriber-")}
