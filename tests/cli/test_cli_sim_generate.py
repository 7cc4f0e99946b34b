"""`usher sim --generate`: byte-identical for a seed, another seed differs, the report's
formats, the emitted scenario, and bad specs or options refused with the field named."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

SPEC = """\
name: plan
seed: 7
horizon: 1200
cluster:
  nodes: 2
  allocatable: {cpu: "8", memory: 32Gi}
departments:
  - name: research
    min: {cpu: "10", memory: 40Gi}
    arrivals: {rate: 0.02, bursts: {every: 400, jobs: 3}}
    pods: {dist: uniform, min: 1, max: 3}
    runtime: {dist: exponential, mean: 200}
  - name: ops
    min: {cpu: "6", memory: 24Gi}
    arrivals: {rate: 0.01}
    cpu: 2
"""


def usher(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "usher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(SPEC)
    return path


def test_same_seed_prints_the_same_bytes_and_another_seed_differs(spec: Path) -> None:
    first = usher("sim", "--generate", str(spec), "-o", "json")
    again = usher("sim", "--generate", str(spec), "-o", "json", "--seed", "7")
    other = usher("sim", "--generate", str(spec), "-o", "json", "--seed", "8")
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout
    assert other.returncode == 0 and other.stdout != first.stdout
    doc = json.loads(first.stdout)
    assert [d["department"] for d in doc["departments"]] == ["root/ops", "root/research"]
    assert doc["until_s"] == 1200
    table = usher("sim", "--generate", str(spec))
    assert table.stdout == usher("sim", "--generate", str(spec)).stdout
    assert table.stdout.startswith("plan: seed 7, ")
    assert "(cluster)" in table.stdout and "lost to preemption" in table.stdout


def test_knobs_change_the_run(spec: Path) -> None:
    base = json.loads(usher("sim", "--generate", str(spec), "--json").stdout)
    short = json.loads(usher("sim", "--generate", str(spec), "--json", "--horizon", "300").stdout)
    none = json.loads(usher("sim", "--generate", str(spec), "--json", "--rate-scale", "0").stdout)
    assert short["until_s"] == 300 and short["cluster"]["jobs"] < base["cluster"]["jobs"]
    assert none["cluster"]["jobs"] == 0
    emitted = spec.parent / "block.yaml"
    block = usher("sim", "--generate", str(spec), "--policy", "Block", "--emit", str(emitted))
    assert block.returncode == 0, block.stderr
    assert "policy: Block" in emitted.read_text()


def test_csv_has_a_row_per_department_and_resource(spec: Path) -> None:
    result = usher("sim", "--generate", str(spec), "-o", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {(r["department"], r["resource"]) for r in rows} == {
        (d, r) for d in ("root/ops", "root/research", "(cluster)") for r in ("cpu", "memory")
    }


def test_emitted_scenario_plays_with_usher_sim(spec: Path, tmp_path: Path) -> None:
    emitted = tmp_path / "generated.yaml"
    result = usher("sim", "--generate", str(spec), "--emit", str(emitted))
    assert result.returncode == 0, result.stderr
    played = usher("sim", str(emitted), "--json")
    assert played.returncode == 0, played.stderr
    assert json.loads(played.stdout)["decisions"]


def test_a_tree_file_relative_to_the_spec(tmp_path: Path) -> None:
    (tmp_path / "tree.yaml").write_text(
        """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: t, namespace: kube-system}
spec:
  root:
    name: org
    min: {cpu: "16"}
    max: {cpu: "16"}
    children:
      - {name: lab, min: {cpu: "16"}, max: {cpu: "16"}, namespaces: [lab]}
"""
    )
    (tmp_path / "spec.yaml").write_text(
        "horizon: 600\ntree: tree.yaml\ncluster: {nodes: 1, allocatable: {cpu: '16'}}\n"
        "departments: [{name: lab, arrivals: {rate: 0.05}}]\n"
    )
    result = usher("sim", "--generate", "spec.yaml", "-o", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [d["department"] for d in json.loads(result.stdout)["departments"]] == ["org/lab"]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("rate: 0.01", "rate: -0.01", "departments[1].arrivals.rate: must be a finite number"),
        ("{dist: exponential, mean: 200}", "{dist: pareto, mean: 200}", "runtime.dist"),
        ("horizon: 1200", "horizon: 0", "horizon: must be a finite number > 0"),
        ("nodes: 2", "nodes: 2\n  gpus: 1", "cluster.gpus: unknown key"),
    ],
)
def test_bad_spec_exits_3_naming_the_field(spec: Path, old: str, new: str, message: str) -> None:
    spec.write_text(SPEC.replace(old, new))
    result = usher("sim", "--generate", str(spec))
    assert result.returncode == 3
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_options(spec: Path) -> None:
    assert usher("sim", "--generate", str(spec.parent / "none.yaml")).returncode == 3
    both = usher("sim", "--generate", str(spec), str(spec))
    assert both.returncode == 2 and "--generate takes no FILES" in both.stderr
    seed_alone = usher("sim", "--seed", "3", str(spec))
    assert seed_alone.returncode == 2 and "need --generate" in seed_alone.stderr
    nothing = usher("sim")
    assert nothing.returncode == 2 and "Missing argument" in nothing.stderr
    negative = usher("sim", "--generate", str(spec), "--rate-scale", "-1")
    assert negative.returncode == 2


def test_the_planning_guides_example_prints_what_the_guide_shows() -> None:
    repo = Path(__file__).resolve().parents[2]
    result = usher("sim", "--generate", "docs/planning/two-departments.yaml", cwd=repo)
    assert result.returncode == 0, result.stderr
    guide = (repo / "docs" / "how-to" / "plan-with-the-simulator.md").read_text()
    assert result.stdout in guide
