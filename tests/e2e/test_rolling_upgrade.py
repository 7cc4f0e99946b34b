"""A rolling upgrade under the borrowing load keeps every job and every decision.

What `kubectl apply` of a second release does to a running installation (docs/how-to/
install.md, Upgrade), with the services as processes against real NATS, PostgreSQL and the API
emulator: the migration Job runs again while the first release serves (`usher streams`, then
`usher migrate`), then each service rolls as its Deployment does: a new instance starts
(``maxSurge: 1``), is ready (``/readyz`` on its own metrics port), and only then the old one
gets SIGTERM and must stop cleanly (``maxUnavailable: 0``); the watcher is ``Recreate`` (the old
one stops first). The elected services hand over their leader key; the ledger runs two
instances for a while, as its Deployment does. Both releases are this checkout (one code
version is at hand): what is tested is the roll, the Job in between and the hand-overs.

The checks are the resilience test's: every workload observed, finished and released, each
admitted once per allocation the ledger made, no node of the ledger's history above its max,
nothing left in the outbox, the log's invariants, `usher audit` clean.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

from kubernetes_asyncio import client
from nats.js import JetStreamContext

from tests.conftest import Infra
from tests.e2e.checks import assert_audit_clean
from tests.e2e.procs import ServiceProcesses, start_emulator
from tests.e2e.test_resilience import LEAVES, _api, _check_run, _submit, _wait_finished, tree
from usher.adapters.nats.subjects import Subjects
from usher.local.processes import ManagedProcess

ROLL_ORDER = ("ledger", "preemptor", "dequeuer-a", "dequeuer-b", "watcher")
RECREATED = {"watcher"}  # one replica, never two at once (deploy/base/watcher.yaml)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Release:
    """The processes of the installation, one instance per service, by release."""

    def __init__(self, procs: ServiceProcesses) -> None:
        self.procs = procs
        self.metrics_port: dict[int, int] = {}
        """Each instance's own metrics port (its readiness probe), by process id."""

    def start(self, name: str, release: str) -> ManagedProcess:
        command = [sys.executable, "-m", "usher", "run", "dequeuer", "--zone", name[9:]] if (
            name.startswith("dequeuer-")
        ) else [sys.executable, "-m", "usher", "run", name]  # fmt: skip
        port = free_port()
        env = {**self.procs.env, "USHER_INSTANCE": f"{name}-{release}",
               "USHER_METRICS_PORT": str(port), "USHER_METRICS_HOST": "127.0.0.1"}  # fmt: skip
        log = self.procs.logs / f"{name}.{release}.log"
        proc = ManagedProcess(name, command, log, env={**os.environ, **env})
        proc.start()
        assert proc.pid is not None
        self.metrics_port[proc.pid] = port
        self.procs.procs[name] = proc
        return proc

    async def ready(self, proc: ManagedProcess) -> None:
        """Until ``/readyz`` answers 200 (the readiness probe of the Deployments)."""
        assert proc.pid is not None
        await asyncio.wait_for(_ready(proc, self.metrics_port[proc.pid]), 120)


async def _ready(proc: ManagedProcess, port: int) -> None:
    url = f"http://127.0.0.1:{port}/readyz"
    while True:
        assert proc.running(), proc.log_tail()
        try:
            status = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=2).status)
        except (urllib.error.URLError, OSError):
            status = 0
        if status == 200:
            return
        await asyncio.sleep(0.2)


async def run_job(env: dict[str, str], prefix: str) -> None:
    """The usher-migrate Job: the streams as the admin, then the schema; both idempotent."""
    for args in (["streams", "--nats", env["USHER_NATS_URL"], "--prefix", prefix],
                 ["migrate"]):  # fmt: skip
        done = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "usher", *args, env={**os.environ, **env},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(done.communicate(), 120)
        assert done.returncode == 0, (args, err.decode())


async def roll(release: Release, old: dict[str, ManagedProcess]) -> list[tuple[str, int]]:
    """Every service to the second release, one at a time; the old instances' exit codes."""
    stopped = []
    for name in ROLL_ORDER:
        if name in RECREATED:
            await asyncio.to_thread(old[name].stop, 30)
            new = release.start(name, "r2")
        else:
            new = release.start(name, "r2")
            await release.ready(new)
            await asyncio.to_thread(old[name].stop, 30)
        assert old[name].popen is not None
        stopped.append((name, old[name].popen.returncode))
        await release.ready(new)
    return stopped


async def test_a_rolling_upgrade_under_the_borrowing_load_keeps_every_job_and_decision(
    infra: Infra, subjects: Subjects, js: JetStreamContext, database_url: str, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    env = {"USHER_NATS_URL": infra.nats_url, "USHER_DATABASE_URL": database_url,
           "KUBECONFIG": str(kubeconfig), "USHER_PREFIX": subjects.prefix,
           "USHER_HOME": str(tmp_path / "home"), "USHER_SETTLE_MS": "20",
           "USHER_LEADER_ELECTION": "on"}  # fmt: skip
    procs = ServiceProcesses(env=env, logs=tmp_path / "logs")
    procs.logs.mkdir()
    release = Release(procs)
    await run_job(env, subjects.prefix)  # the first install's Job
    emulator = start_emulator(
        kubeconfig, tmp_path / "emulator.log", [leaf.lower() for leaf in LEAVES]
    )
    api = await _api(kubeconfig)
    try:
        first = {name: release.start(name, "r1") for name in ROLL_ORDER}
        for proc in first.values():
            await release.ready(proc)
        custom = client.CustomObjectsApi(api)
        await custom.create_namespaced_custom_object(
            "scheduling.sigs.k8s.io", "v1beta1", "kube-system", "elasticquotatrees", tree(10)
        )
        count = 600

        async def upgrade() -> list[tuple[str, int]]:
            await asyncio.sleep(1.0)  # the load is running
            await run_job(env, subjects.prefix)  # the second release's Job, services live
            return await roll(release, first)

        _, stopped = await asyncio.gather(
            _submit(api, count, duration=0.5, per_batch=20), upgrade()
        )
        await _wait_finished(api, count, procs, timeout_s=300)
        await _check_run(js, subjects, database_url, count)
        await assert_audit_clean(env, subjects.prefix, database_url)
    finally:
        await api.close()
        procs.stop_all()
        emulator.stop()
    # Every old instance stopped on SIGTERM, cleanly (a crash would have exited non-zero).
    assert stopped == [(name, 0) for name in ROLL_ORDER]
    assert all(procs.procs[name].log_path.name == f"{name}.r2.log" for name in ROLL_ORDER)
