"""As root, `usher up` finds PostgreSQL data that no home points to and says what it does with
it (issue 29): a deleted home's is removed, a living home's is kept until `--reuse-orphan` takes
it back or `--remove-orphans` deletes it. Each run has its own runtime folder
(``$USHER_PG_RUNTIME``) so that no other stack's data is in the way.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.stack_process import USHER, UpProcess, clean_env
from usher.local.servers import HOME_MARK

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="only as root does PostgreSQL's data live outside the home"
)


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A runtime folder PostgreSQL's unprivileged user can reach (tmp_path's parents are 0700)."""
    folder = Path("/tmp") / f"usher-runtime-{secrets.token_hex(4)}"
    folder.mkdir(mode=0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _plant(runtime: Path, home: Path) -> Path:
    """An instance folder made for ``home`` whose server is stopped, as ``usher up`` leaves."""
    base = runtime / "postgres" / secrets.token_hex(8)
    (base / "data").mkdir(parents=True)
    (base / "data" / "PG_VERSION").write_text("16\n")
    (base / HOME_MARK).write_text(str(home.resolve()))
    return base


def _usher(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*USHER, *args], env={**clean_env(home), **env}, capture_output=True, text=True, timeout=120
    )


def _up_and_down(home: Path, env: dict[str, str], *args: str) -> tuple[str, Path]:
    """Start ``usher up ARGS``, note where PostgreSQL's data is, stop it: (its output, that)."""
    with UpProcess(home, args=("--no-demo", "--no-console", *args), env=env) as up:
        up.stack()
        status = _usher(home, env, "status", "-o", "json")
        assert status.returncode == 0, status.stderr
        data = Path(json.loads(status.stdout)["postgres_data"])
        assert _usher(home, env, "down").returncode == 0
        assert up.proc is not None and up.proc.wait(timeout=60) == 0
    text = up.text
    up.output.unlink()
    return text, data


def test_up_removes_a_deleted_homes_data_keeps_a_living_ones_and_reuses_on_request(
    tmp_path: Path, runtime: Path
) -> None:
    env = {"USHER_PG_RUNTIME": str(runtime)}
    home = tmp_path / "home"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    deleted = _plant(runtime, tmp_path / "deleted")  # the home was rm -rf'd
    living = _plant(runtime, elsewhere)  # the home exists but lost its postgres/instance

    text, data = _up_and_down(home, env)
    assert f"Removed orphaned PostgreSQL data {deleted} (0 MB): its home " in text
    assert not deleted.exists()
    assert (
        f"Kept orphaned PostgreSQL data {living} (0 MB): its home {elsewhere.resolve()} no longer"
        " points to it (--remove-orphans removes it)"
    ) in text
    assert living.exists()
    assert data.parent == runtime / "postgres" and (data / "data" / "PG_VERSION").exists()

    # This home loses its pointer: its data is an orphan it can take back (the passwords that
    # data knows are still in credentials.json).
    (home / "postgres" / "instance").unlink()
    refused = _usher(home, env, "up", "--reuse-orphan", "--home", str(tmp_path / "new"))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"usher: --reuse-orphan: no earlier PostgreSQL data of {tmp_path / 'new'} to reuse"
    )
    text, again = _up_and_down(home, env, "--reuse-orphan", "--remove-orphans")
    assert f"Reusing this home's earlier PostgreSQL data {data}" in text
    assert again == data, "the same data, not a new cluster"
    assert f"Removed orphaned PostgreSQL data {living} (0 MB)" in text
    assert not living.exists()
    assert sorted(p.name for p in (runtime / "postgres").iterdir()) == [data.name]
