"""`usher up` rides out its own servers dying: NATS and PostgreSQL are restarted, nothing lost.

A stream of jobs of mixed sizes and priorities runs on the demo tree (Department-a min 60,
Department-b min 40, both may borrow up to 100) while NATS, and later PostgreSQL, are
SIGKILLed. `usher up` must restart each on the same port with the same data, every job must
finish in the emulator, and `usher audit` must find every decision justified at the end.
A server that cannot come back makes `usher up` give up with a message naming it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tests.builders.manifests import batch_job, container, pod_template
from tests.cli.stack_process import UpProcess, poll, usher
from usher.local import system as embedded_system
from usher.local.processes import pid_alive
from usher.local.servers import NatsServer
from usher.local.system import ServerWatch

DEMO = Path(__file__).resolve().parents[2] / "usher" / "demo"
NAMESPACES = ("user-a", "user-b", "user-c")
PRIORITIES = (None, "priority-2", "priority-3")


def job(index: int, rng: random.Random) -> dict[str, Any]:
    """A job of 1-10 cpu x 1-3 pods, any priority, running 0.5-2 s once admitted."""
    pods = rng.randint(1, 3)
    main = container("w", cpu=str(rng.randint(1, 10)))
    priority = rng.choice(PRIORITIES)
    namespace = rng.choice(NAMESPACES)
    duration = f"{rng.uniform(0.5, 2.0):.2f}"
    return batch_job(
        f"j{index:03d}",
        namespace,
        template=pod_template(main, priority_class=priority),
        parallelism=pods,
        completions=pods,
        labels={"usher.io/zone": "ab"[index % 2]},
        annotations={"usher.io/sim-duration": duration},
    )


async def _api(kubeconfig: str) -> client.ApiClient:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return client.ApiClient(cfg)


async def _submit(api: client.ApiClient, jobs: list[dict[str, Any]], every_s: float) -> None:
    batch = client.BatchV1Api(api)
    for manifest in jobs:
        await batch.create_namespaced_job(manifest["metadata"]["namespace"], manifest)
        await asyncio.sleep(every_s)


async def _finished(api: client.ApiClient) -> set[str]:
    listed = await client.BatchV1Api(api).list_job_for_all_namespaces()
    return {
        f"{j.metadata.namespace}/{j.metadata.name}"
        for j in listed.items
        if any(c.type == "Complete" and c.status == "True" for c in j.status.conditions or [])
    }


def _kill(up: UpProcess, server: str) -> int:
    """SIGKILL the server named in stack.json; its pid."""
    pid = int(json.loads((up.home / "stack.json").read_text())["pids"][server])
    os.kill(pid, signal.SIGKILL)
    return pid


async def _wait_back(up: UpProcess, server: str, old_pid: int) -> dict[str, Any]:
    """Until `usher up` says the server is back and stack.json names its new pid."""

    def back() -> dict[str, Any] | None:
        info: dict[str, Any] = json.loads((up.home / "stack.json").read_text())
        new_pid = int(info["pids"][server])
        if f"{server} is back (pid {new_pid}" in up.text and new_pid != old_pid:
            return info
        return None

    return await asyncio.to_thread(poll, back, 60.0, 0.2)


async def _run(up: UpProcess, count: int) -> None:
    info = up.stack()
    for name in ("walkthrough-tree.yaml", "priority-classes.yaml"):
        applied = await asyncio.to_thread(usher, up.home, "apply", "-f", str(DEMO / name))
        assert applied.returncode == 0, applied.stderr
    rng = random.Random(20261124)
    jobs = [job(i, rng) for i in range(count)]
    api = await _api(str(info["kubeconfig"]))
    try:
        submitting = asyncio.create_task(_submit(api, jobs, every_s=0.15))
        await asyncio.sleep(2.0)
        nats_pid = _kill(up, "nats")
        after_nats = await _wait_back(up, "nats", nats_pid)
        assert after_nats["nats_url"] == info["nats_url"], "NATS came back on another port"
        await asyncio.sleep(3.0)
        pg_pid = _kill(up, "postgres")
        after_pg = await _wait_back(up, "postgres", pg_pid)
        assert after_pg["database_url"] == info["database_url"]
        await submitting
        wanted = {f"{j['metadata']['namespace']}/{j['metadata']['name']}" for j in jobs}
        deadline = time.monotonic() + 75
        done: set[str] = set()
        while time.monotonic() < deadline and done != wanted:
            assert up.proc is not None and up.proc.poll() is None, up.text
            done = await _finished(api) & wanted
            await asyncio.sleep(0.5)
        assert done == wanted, f"never finished: {sorted(wanted - done)}\n{up.text[-3000:]}"
    finally:
        await api.close()
    # --quiescent adds the end-of-log invariants (nobody stuck, every finished job released);
    # the last releases may still be on their way through the outbox: give them a few tries.
    for _ in range(10):
        audit = await asyncio.to_thread(usher, up.home, "audit", "--quiescent", timeout=120.0)
        if audit.returncode == 0:
            break
        await asyncio.sleep(1.0)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert pid_alive(int(after_pg["pids"]["postgres"]))


async def test_jobs_all_finish_when_nats_then_postgres_are_killed(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "home", args=("--no-demo", "--interval", "5")).start()
    try:
        await _run(up, count=60)
        text = up.text
        assert "nats exited (code -9); restarting it on port" in text
        assert "postgres exited (code -9); restarting it on port" in text
        assert "keeps dying" not in text
        exits = [line for line in text.splitlines() if " exited (code " in line]
        assert len(exits) == 2, f"only the killed servers exited: {exits}"
        # The live view follows the log through the restarts: decisions after them show.
        after = text.split("postgres is back", 1)[1]
        assert re.search(r"^\S+ (admit|release) ", after, re.MULTILINE), after[-2000:]
        code = await asyncio.to_thread(up.stop)
    finally:
        if up.proc is not None and up.proc.poll() is None:
            up.proc.kill()
    assert code == 0, up.text
    assert "Traceback" not in up.text


def test_a_server_that_cannot_come_back_is_given_up_with_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NATS killed while another listener holds its port: every restart fails at once; after
    ``SERVER_MAX_FAILURES`` of them the watch gives up and says why."""
    monkeypatch.setattr(embedded_system, "SERVER_RESTART_PAUSE_S", (0.05,))
    server = NatsServer(tmp_path)
    server.start()
    watch = ServerWatch("nats", server)
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        assert server.process is not None and server.process.popen is not None
        server.process.popen.kill()
        server.process.popen.wait()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        notes: list[str] = []
        deadline = time.monotonic() + 30
        while watch.gave_up is None and time.monotonic() < deadline:
            notes.extend(watch.check(time.monotonic())[0])
            time.sleep(0.05)
    finally:
        squatter.close()
        server.stop()
    restarts = [n for n in notes if n.startswith("nats exited") and "restarting it" in n]
    assert len(restarts) == embedded_system.SERVER_MAX_FAILURES, notes
    assert notes[-1].startswith("nats exited") and notes[-1].endswith("; giving up"), notes
    assert watch.gave_up == (
        f"nats keeps dying ({embedded_system.SERVER_MAX_FAILURES} restarts in a row did not stay"
        f" up {embedded_system.SERVER_STABLE_S:g}s; see logs/nats.log); stopping"
    )
