"""Secrets of a one-machine Usher: generated once, kept owner-only under ``$USHER_HOME``.

What it does: makes ``$USHER_HOME`` private (0700), and loads or creates
``$USHER_HOME/credentials.json`` (0600): a password per NATS identity
(usher/adapters/nats/permissions.py), the PostgreSQL superuser's (set-up only), the ledger's
and the audit role's passwords. A restart reuses them (PostgreSQL keeps its roles); a new
identity (a zone added) gets a new password. ``write_private`` writes any secret file with
mode 0600 from its first byte (no window where it is readable by others).
What it must never do: log or print a secret, widen a permission, or write a secret file that
someone other than its owner can read.
"""

from __future__ import annotations

import os
import secrets
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
    """Create ``home`` (0700) or tighten an existing one; never touches its parents."""
    home.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if home.stat().st_mode & 0o777 != PRIVATE_DIR:
        home.chmod(PRIVATE_DIR)


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
