"""`usher up` keeps its secrets: private home, 0600 files, one identity per process, no trust.

(Started with ``--durable``, which must also give NATS ``sync_interval: always``.)

Against a real `usher up --no-demo`: ``$USHER_HOME`` is 0700 and its secret files 0600, and
the folders above it are left as they were; no password appears in what it prints or logs;
each service process has only its own NATS user (the ledger alone the ledger's database role,
the watcher alone the kubeconfig); the server refuses a forged Admitted from the console's
identity and a stream purge from a service's; PostgreSQL refuses a login without password;
kubectl works with the kubeconfig and gets 401 with a wrong token. And a fresh clone in a
0700 directory (``mktemp -d``), with PostgreSQL's binaries inside it, starts and stops as root.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import asyncpg
import msgspec
import nats
import pytest

from tests.cli.stack_process import UpProcess, clean_env
from usher.local.credentials import Credentials

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


async def _refused(url: str, subject: str) -> bool:
    """Publish as the URL's user; True when the server reports a permissions violation."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    nc = await nats.connect(url, error_cb=on_error, allow_reconnect=False)
    try:
        await nc.publish(subject, b"{}")
        await nc.flush()
        for _ in range(40):
            if errors:
                break
            await asyncio.sleep(0.025)
    finally:
        await nc.close()
    return any("permissions violation" in e and subject.lower() in e for e in errors)


def test_up_keeps_its_secrets(tmp_path: Path) -> None:
    home = tmp_path / "home"
    parent_mode = _mode(tmp_path)
    _left_readable_by_an_older_run(home)
    with UpProcess(home, args=("--no-demo", "--durable")) as up:
        info = up.stack()
        # --durable: the server fsyncs before it acknowledges (README "Durability").
        assert info["durable"] is True
        assert "  sync_interval: always\n" in (home / "nats" / "nats.conf").read_text()
        up.wait_for_output("(fsync before every ack)")
        creds = msgspec.json.decode((home / "credentials.json").read_bytes(), type=Credentials)
        assert _mode(home) == 0o700
        for secret in ("credentials.json", "stack.json", "kubeconfig", "nats/nats.conf"):
            assert _mode(home / secret) == 0o600, secret
        assert _mode(tmp_path) == parent_mode, "usher up changed a folder above its home"
        _check_everything_in_home_is_owner_only(home)
        _check_each_service_has_only_its_own_credentials(info, creds)
        _check_the_console_reads_as_the_console_user_only(info, creds)
        asyncio.run(_check_the_servers_refuse_what_is_not_allowed(info, creds))
        if KUBECTL is not None:
            _check_kubectl(home, tmp_path)
        assert up.stop() == 0
    _check_everything_in_home_is_owner_only(home)
    passwords = [*creds.nats.values(), creds.pg_superuser, creds.pg_ledger, creds.pg_audit]
    shown = up.text + "".join(p.read_text(errors="replace") for p in (home / "logs").iterdir())
    leaked = [p for p in passwords if p in shown]
    assert not leaked, "a password was printed or logged"


def _left_readable_by_an_older_run(home: Path) -> None:
    """Folders 0755 and files 0644, as versions before issue 26 left them."""
    for folder in (home, home / "logs", home / "cluster"):
        folder.mkdir(mode=0o755, exist_ok=True)
        folder.chmod(0o755)
    for file in (home / "logs" / "ledger.log", home / "logs" / "old.log"):
        file.write_text("an older run\n")
        file.chmod(0o644)


def _check_everything_in_home_is_owner_only(home: Path) -> None:
    """Every folder 0700 and every file 0600 (logs, cluster state, NATS's store...)."""
    wide = []
    for folder, dirs, files in os.walk(home):
        for name in dirs:
            if _mode(Path(folder) / name) != 0o700:
                wide.append(f"{Path(folder) / name}: {_mode(Path(folder) / name):o}")
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink() and path.exists() and _mode(path) & 0o077:
                wide.append(f"{path}: {_mode(path):o}")
    assert _mode(home / "cluster" / "objects.json") == 0o600
    assert _mode(home / "logs" / "watcher.log") == 0o600
    assert not wide, "readable by others under $USHER_HOME:\n" + "\n".join(wide)


def _check_each_service_has_only_its_own_credentials(
    info: dict[str, Any], creds: Credentials
) -> None:
    for service, pid in info["service_pids"].items():
        env = _environ(int(pid))
        nats_url = urlparse(env["USHER_NATS_URL"])
        assert nats_url.username == f"usher-{service}", service
        assert unquote(nats_url.password or "") == creds.nats[service]
        others = [p for name, p in creds.nats.items() if name != service]
        assert not any(p in "\0".join(env.values()) for p in others), service
        assert creds.pg_superuser not in "\0".join(env.values())
        if service == "ledger":
            assert urlparse(env["USHER_DATABASE_URL"]).username == "usher_ledger"
        else:
            assert "USHER_DATABASE_URL" not in env, service
        assert ("USHER_KUBECONFIG" in env) == (service == "watcher"), service


def _check_the_console_reads_as_the_console_user_only(
    info: dict[str, Any], creds: Credentials
) -> None:
    """The web console: the read-only NATS user, no database, no cluster, on loopback."""
    assert urlparse(str(info["console_url"])).hostname == "127.0.0.1"
    env = _environ(int(info["console_pid"]))
    nats_url = urlparse(env["USHER_NATS_URL"])
    assert nats_url.username == "usher-console"
    assert unquote(nats_url.password or "") == creds.nats["console"]
    others = [p for name, p in creds.nats.items() if name != "console"]
    everything = "\0".join(env.values())
    assert not any(p in everything for p in [*others, creds.pg_superuser, creds.pg_ledger])
    assert "USHER_DATABASE_URL" not in env and "USHER_KUBECONFIG" not in env


async def _check_the_servers_refuse_what_is_not_allowed(
    info: dict[str, Any], creds: Credentials
) -> None:
    console = str(info["nats_url"])
    assert await _refused(console, "usher.decision.default.admitted.user-c.forge-big")
    port = urlparse(console).port
    dequeuer = f"nats://usher-dequeuer-a:{creds.nats['dequeuer-a']}@127.0.0.1:{port}"
    assert await _refused(dequeuer, "usher.decision.a.admitted.user-c.forge-big")
    assert await _refused(dequeuer, "$JS.API.STREAM.PURGE.USHER_LOG")
    assert await _refused(dequeuer, "$JS.API.STREAM.UPDATE.USHER_LOG")
    with pytest.raises(nats.errors.Error):
        await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    # PostgreSQL: scram passwords, no trust; the audit role reads but cannot write.
    pg = urlparse(str(info["database_url"]))
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(host="127.0.0.1", port=pg.port, user="usher", database="usher")
    audit = await asyncpg.connect(
        host="127.0.0.1", port=pg.port, user="usher_audit", password=creds.pg_audit,
        database="usher",
    )  # fmt: skip
    try:
        assert await audit.fetchval("SELECT count(*) FROM allocations") == 0
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await audit.execute("DELETE FROM outbox")
    finally:
        await audit.close()


def _check_kubectl(home: Path, scratch: Path) -> None:
    kubectl = [str(KUBECTL), "--kubeconfig"]
    ok = subprocess.run([*kubectl, str(home / "kubeconfig"), "get", "nodes", "-o", "name"],
                        capture_output=True, text=True, timeout=30)  # fmt: skip
    assert ok.returncode == 0 and "node/node-a" in ok.stdout, ok.stderr
    text = (home / "kubeconfig").read_text()
    token = next(line.split(":", 1)[1].strip() for line in text.splitlines() if "token:" in line)
    wrong = scratch / "wrong-kubeconfig"
    wrong.write_text(text.replace(token, "not-the-token"))
    refused = subprocess.run([*kubectl, str(wrong), "get", "nodes"],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
    assert (refused.returncode != 0 and "Unauthorized" in refused.stderr + refused.stdout) or (
        "provide credentials" in refused.stderr
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the private-clone case is about running as root")
def test_a_fresh_clone_in_a_private_directory_starts_and_stops(tmp_path: Path) -> None:
    """git clone into ``mktemp -d`` (0700), PostgreSQL's binaries inside the clone (where its
    .venv would hold them), `usher up --no-demo` from there as root, then a clean stop."""
    private = Path(tempfile.mkdtemp(prefix="usher-clone-"))
    try:
        assert _mode(private) == 0o700
        clone = private / "usher"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
        site = clone / ".venv-site"
        pgserver = Path(__import__("pgserver").__file__).parent
        shutil.copytree(pgserver, site / "pgserver", symlinks=True)
        if (pgserver.parent / "pgserver.libs").is_dir():
            shutil.copytree(pgserver.parent / "pgserver.libs", site / "pgserver.libs")
        env = clean_env(clone / ".usher")
        env["PYTHONPATH"] = f"{clone}{os.pathsep}{site}"
        where = "import usher, pgserver; print(usher.__file__, pgserver.__file__)"
        probe = subprocess.run(
            [sys.executable, "-c", where],
            env=env, capture_output=True, text=True, check=True, cwd=clone,
        )  # fmt: skip
        assert all(path.startswith(str(clone)) for path in probe.stdout.split()), probe.stdout
        up = UpProcess(clone / ".usher")
        up.start = _start_from(up, env, clone)  # type: ignore[method-assign]
        with up:
            info = up.stack(timeout=90)
            assert set(info["service_pids"]) >= {"ledger", "watcher"}
            assert up.stop() == 0, up.text
        assert "Stopped." in up.text and "Traceback" not in up.text
        assert _mode(private) == 0o700 and _mode(clone / ".usher") == 0o700
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _start_from(up: UpProcess, env: dict[str, str], cwd: Path) -> Any:
    def start() -> UpProcess:
        with open(up.output, "ab") as out:
            up.proc = subprocess.Popen(
                [sys.executable, "-m", "usher.cli", "up", *up.args],
                env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        return up

    return start
