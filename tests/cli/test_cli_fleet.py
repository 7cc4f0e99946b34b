"""`usher jobs`, `usher cluster list` and `usher explain` show topology pins (TP1) and clusters
(M1) as people read them: the log of two clusters and a rack topology (``tests.console.
fleet_log``) is published on a real NATS, and each command runs as a process against it."""

from __future__ import annotations

import json
from pathlib import Path

from nats.js import JetStreamContext

from tests.cli.history_cli import export, usher
from tests.conftest import Infra
from tests.console.fleet_log import fleet_log
from usher.adapters.nats.log import publish_envelope
from usher.adapters.nats.subjects import Subjects


async def _published(js: JetStreamContext, subjects: Subjects) -> None:
    """The fleet log on this test's own prefix (the builder writes ``usher.``'s subjects)."""
    for subject, envelope in fleet_log().entries:
        await publish_envelope(js, subjects.prefix + subject.removeprefix("usher"), envelope)


def _rows(stdout: str) -> dict[str, list[str]]:
    """A table's rows by their first cell, split on the 3-space column gaps."""
    lines = stdout.splitlines()
    return {
        cells[0]: cells
        for cells in ([c.strip() for c in line.split("   ") if c.strip()] for line in lines[1:])
    }


async def test_jobs_show_the_domain_an_admitted_gang_is_pinned_to(
    infra: Infra, js: JetStreamContext, subjects: Subjects, tmp_path: Path
) -> None:
    await _published(js, subjects)
    target = ("--nats", infra.nats_url, "--prefix", subjects.prefix, "--home", str(tmp_path))
    done = usher("jobs", "-n", "train", *target)
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header[6:9] == ["ZONE", "DOMAIN", "AGE"]
    by_name = {line.split()[1]: line.split() for line in done.stdout.splitlines()[1:]}
    assert by_name["a"][7] == "topology.usher.io/rack=rack-1"
    assert by_name["c"][7] == "-"  # waiting: pinned nowhere yet
    assert (
        "TopologyNoFit: needs 2 x (4 cpu, 8 nvidia.com/gpu) in one rack; best rack-2 has 1 x"
        in (done.stdout)
    )
    assert by_name["w1@west"][7] == "-"  # admitted, asked no topology: anywhere in its zone

    as_json = usher("jobs", "-n", "train", "-o", "json", *target)
    assert as_json.returncode == 0, as_json.stderr
    pins = {job["name"]: job.get("topology") for job in json.loads(as_json.stdout)}
    assert pins["a"] == {"level": "topology.usher.io/rack", "domain": "rack-1"}
    assert pins["c"] is None


async def test_cluster_list_shows_each_clusters_state_zones_and_jobs(
    infra: Infra, js: JetStreamContext, subjects: Subjects, tmp_path: Path
) -> None:
    target = ("--nats", infra.nats_url, "--prefix", subjects.prefix, "--home", str(tmp_path))
    empty = usher("cluster", "list", *target)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.startswith("No cluster on the log: no watcher has announced its cluster")

    await _published(js, subjects)
    done = usher("cluster", "list", *target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split() == [
        "CLUSTER", "STATE", "SINCE", "ZONES", "ADMITTED", "PENDING", "WHY"
    ]  # fmt: skip
    rows = _rows(done.stdout)
    assert rows["default"] == [
        "default",
        "Connected",
        "2024-05-01T12:00Z",
        "default",
        "1",
        "1",
        "-",
    ]
    assert rows["west"] == [
        "west", "Disconnected", "2024-05-01T12:00:07Z", "west", "1", "1", "connection refused"
    ]  # fmt: skip

    as_json = usher("cluster", "list", "-o", "json", *target)
    assert as_json.returncode == 0, as_json.stderr
    west = next(c for c in json.loads(as_json.stdout) if c["cluster"] == "west")
    assert (west["state"], west["zones"], west["admitted"], west["pending"]) == (
        "Disconnected",
        ["west"],
        1,
        1,
    )


def test_explain_names_the_domain_of_the_admission(tmp_path: Path) -> None:
    log = export(fleet_log(), tmp_path / "fleet.jsonl")
    done = usher("explain", "train/a", "--file", str(log))
    assert done.returncode == 0, done.stderr
    admitted = next(line for line in done.stdout.splitlines() if "  Admitted    " in line)
    assert admitted.endswith(
        "on root/train (queue root-train-train), cpu 8, nvidia.com/gpu 16, "
        "in topology.usher.io/rack=rack-1"
    )
    waiting = usher("explain", "train/w2@west", "--file", str(log))
    assert waiting.returncode == 0, waiting.stderr
    assert "why:      ClusterDisconnected: cluster west disconnected at 2024-05-01T12:00:07Z" in (
        waiting.stdout
    )


async def test_cluster_domains_shows_each_racks_pinned_use_and_free_room(
    infra: Infra, js: JetStreamContext, subjects: Subjects, tmp_path: Path
) -> None:
    await _published(js, subjects)
    target = ("--nats", infra.nats_url, "--prefix", subjects.prefix, "--home", str(tmp_path))
    done = usher("cluster", "domains", *target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split() == [
        "ZONE", "LEVEL", "DOMAIN", "CPU", "used/allocatable", "CPU", "free",
        "NVIDIA.COM/GPU", "used/allocatable", "NVIDIA.COM/GPU", "free",
    ]  # fmt: skip
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert ["default", "topology.usher.io/rack", "rack-1", "8/64", "56", "16/16", "0"] in rows
    assert ["default", "topology.usher.io/rack", "rack-2", "0/32", "32", "0/8", "8"] in rows
    assert ["west", "topology.usher.io/rack", "rack-w", "0/64", "64", "0/16", "16"] in rows

    as_json = usher("cluster", "domains", "-o", "json", *target)
    assert as_json.returncode == 0, as_json.stderr
    rack1 = next(d for d in json.loads(as_json.stdout) if d["domain"] == "rack-1")
    assert (rack1["used"], rack1["free"]) == (
        {"cpu": 8000, "nvidia.com/gpu": 16},
        {"cpu": 56000, "nvidia.com/gpu": 0},
    )
