"""The light commands start light: `usher --version`, `usher jobs`, `usher queues` import only
what they use (no Kubernetes client, no aiohttp, no database, no rich), checked by the modules
a real run of each command has loaded when it exits -- not by a timer (``make bench`` times
them, in its ``cli`` suite). ``usher jobs`` and ``usher queues`` read a real log on NATS."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

from nats.js import JetStreamContext

from schemas import QuotaTreeApplied, Zone
from tests.builders.events import observed
from tests.builders.trees import two_leaf_tree
from tests.conftest import REPO, Infra
from tests.services.helpers import publish
from usher.adapters.nats.subjects import Subjects

HEAVY = {
    "kubernetes_asyncio",  # only a command that writes to the Kubernetes API needs it
    "aiohttp",  # nats-py's WebSocket transport; the Kubernetes client
    "sqlalchemy",
    "alembic",
    "asyncpg",
    "rich",  # the live view of `usher up`
    "structlog",  # services log; a command prints
    "usher.local.servers",
    "usher.adapters.pg.migrate",
    "jinja2",  # the web console's pages
    "usher.console",
}
"""Modules none of the light commands may load."""

RECORD = """
import atexit, json, sys
atexit.register(lambda: print("MODULES=" + json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv[0] = "usher"
from usher.cli import main
main()
"""


def run_recorded(
    *args: str, probe: str = RECORD
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``usher ARGS`` in a fresh interpreter; its result and every module it had loaded."""
    done = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("MODULES=")]
    assert lines, done.stderr
    return done, set(json.loads(lines[-1].removeprefix("MODULES=")))


def top_level(modules: set[str], heavy: set[str]) -> set[str]:
    """The heavy modules (or their packages' submodules) among ``modules``."""
    return {m for m in modules for h in heavy if m == h or m.startswith(h + ".")}


def test_version_imports_nothing_heavy() -> None:
    done, modules = run_recorded("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usher, version ")
    assert (
        top_level(modules, HEAVY | {"nats", "yaml", "usher.core.engine.facade", "asyncio"}) == set()
    )
    # No command module is loaded for --version: each is loaded when its command runs.
    commands = {"usher.cli.people", "usher.cli.history", "usher.cli.live", "usher.cli.console"}
    assert commands & modules == set()


async def test_jobs_and_queues_read_the_log_without_heavy_imports(
    infra: Infra, js: JetStreamContext, subjects: Subjects, tmp_path: Path
) -> None:
    await publish(js, subjects.quota, QuotaTreeApplied(root=two_leaf_tree()))
    await publish(js, subjects.job(Zone("default"), "a1", "train"), observed("a1", "train", 10))
    target = ("--nats", infra.nats_url, "--prefix", subjects.prefix, "--home", str(tmp_path))

    done, modules = run_recorded("jobs", *target)
    assert done.returncode == 0, done.stderr
    assert "a1          train   " in done.stdout  # the job, read from the log
    assert "nats" in modules and "usher.core.engine.facade" in modules  # it really read and folded
    assert top_level(modules, HEAVY) == set()

    done, modules = run_recorded("queues", *target)
    assert done.returncode == 0, done.stderr
    assert "root-a-a1   root/A" in done.stdout and "a1/train" in done.stdout
    assert top_level(modules, HEAVY) == set()


def test_nats_keeps_websockets_when_the_url_needs_them() -> None:
    """aiohttp is hidden from nats-py only for nats:// URLs, and only while it loads."""
    probe = """
import sys
from usher.cli import import_nats_without_websockets
import_nats_without_websockets(sys.argv[1])
import nats.aio.transport
import aiohttp  # a Kubernetes call after the log was read still finds it
print(nats.aio.transport.aiohttp is not None, aiohttp.ClientSession.__name__)
"""
    for url, websockets in (("nats://127.0.0.1:4222", False), ("ws://127.0.0.1:8080", True)):
        done = subprocess.run(
            [sys.executable, "-c", probe, url], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [str(websockets), "ClientSession"]


def test_every_command_module_is_in_the_lazy_table() -> None:
    """A command lives in the module ``COMMAND_MODULES`` names, so `usher X` loads only that."""
    from usher.cli import COMMAND_MODULES, cli

    for module in COMMAND_MODULES:
        importlib.import_module(module)
    for name, command in cli.commands.items():
        owner = command.callback.__module__ if command.callback else "usher.cli"
        if owner != "usher.cli":
            assert name in COMMAND_MODULES.get(owner, ()), f"{name} ({owner})"
    listed = {name for names in COMMAND_MODULES.values() for name in names}
    assert listed <= set(cli.commands)


LOADED = RECORD.replace(
    "sorted(sys.modules)",
    # A module the command line loads lazily is in sys.modules before it runs: not counted.
    "sorted(n for n, m in list(sys.modules.items()) if type(m).__name__ != '_LazyModule')",
)


def test_an_argument_error_is_told_before_any_heavy_import() -> None:
    """Issue 29: `usher replay --seq -5` spent 1.75 s of CPU importing the core's history,
    NATS, PostgreSQL and YAML before saying the option was wrong; now none is loaded."""
    heavy = HEAVY | {"nats", "yaml", "asyncio", "usher.core.engine", "usher.core.history.replay"}
    for args, said in (
        (("replay", "--seq", "-5"), "Invalid value for '--seq'"),
        (("explain", "nope"), "'nope': expected NAMESPACE/NAME"),
    ):
        done, modules = run_recorded(*args, probe=LOADED)
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert top_level(modules, heavy) == set(), args
