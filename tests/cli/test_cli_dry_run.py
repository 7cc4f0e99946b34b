"""`usher explain -f FILE` and `usher submit --dry-run` as a person runs them: what the next
pass would do with a job not submitted yet, offline on an exported log; bad files refused
naming what is wrong, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders.log import Log
from tests.cli.history_cli import export, usher
from tests.cli.test_cli_history import one_line_error

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: user-a}}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: busybox
          resources: {{requests: {{cpu: "{cpu}"}}}}
"""


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    """Three runs of user-a ended (30, 60 and 90 s); first (60 cpu) runs; second (60) waits."""
    log = Log().tree(0)
    for number, (start, length) in enumerate([(1, 30), (2, 60), (3, 90)]):
        key = f"user-a/r{number}"
        log = log.job(start, key, 10).admitted(start + 0.1, key, 10)
        log = log.released(start + length, key, 10, "Finished")
    log = log.job(100, "user-a/first", 60).admitted(100.1, "user-a/first", 60)
    return export(log.job(101, "user-a/second", 60), tmp_path / "log.jsonl")


def manifest(tmp_path: Path, name: str, cpu: str, file: str = "job.yaml") -> Path:
    path = tmp_path / file
    path.write_text(JOB.format(name=name, cpu=cpu))
    return path


def test_a_job_that_fits_is_admitted_by_the_next_pass(tmp_path: Path, log_file: Path) -> None:
    job = manifest(tmp_path, "tiny", "20")
    result = usher("explain", "-f", str(job), "--file", str(log_file))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:6] == [
        "user-a/tiny (dry run: nothing was created)",
        "  requests: cpu 40",
        "  queue:    root-department-a-user-a  quota root/Department-a  priority 0",
        "  position: 2",  # behind second (created as late: now is the log's end), Round skips
        "  next pass admits it: yes",
        "  preempts: nobody",
    ]
    # Nothing was created: the log still does not know the job.
    unknown = usher("explain", "user-a/tiny", "--file", str(log_file))
    assert "unknown job user-a/tiny" in one_line_error(unknown, 3)


def test_a_job_that_waits_says_why_and_when(tmp_path: Path, log_file: Path) -> None:
    job = manifest(tmp_path, "tall", "30")
    doc = json.loads(usher("explain", "-f", str(job), "--file", str(log_file), "-o", "json").stdout)
    assert (doc["job"], doc["state"], doc["admitted"], doc["position"]) == (
        "user-a/tall",
        "Pending",
        False,
        2,
    )
    assert doc["reason"]["code"] == "QuotaExceeded"
    assert doc["reason"]["node"] == "root/Department-a"
    assert (doc["reason"]["used"], doc["reason"]["requested"], doc["reason"]["limit"]) == (
        "60",
        "60",
        "100",
    )
    assert doc["preempts"] == []
    estimate = doc["estimate"]
    assert estimate["early_ms"] <= estimate["start_ms"] <= estimate["late_ms"]
    assert "1 ahead in root-department-a-user-a" in estimate["basis"]
    table = usher("explain", "-f", str(job), "--file", str(log_file)).stdout
    assert "next pass admits it: no (Pending)" in table
    assert "why:      QuotaExceeded: root/Department-a cpu 60 used + 60 requested" in table
    assert "  start:    2024-05-01T" in table and "(p25 2024-05-01T" in table


def test_explain_of_a_pending_job_gives_its_estimated_start(log_file: Path) -> None:
    doc = json.loads(
        usher("explain", "user-a/second", "--file", str(log_file), "-o", "json").stdout
    )
    basis = doc["estimate"]["basis"]
    assert basis.startswith("0 ahead in root-department-a-user-a, 1 running under root/Departm")
    assert "3 runs of queue root-department-a-user-a: p25 29s, p50 59s, p75 89s" in basis
    done = json.loads(
        usher("explain", "user-a/first", "--file", str(log_file), "-o", "json").stdout
    )
    assert "estimate" not in done  # only a waiting job has one


def test_several_jobs_in_one_file_each_alone(tmp_path: Path, log_file: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(JOB.format(name="one", cpu="20") + "---\n" + JOB.format(name="two", cpu="20"))
    doc = json.loads(
        usher("explain", "-f", str(path), "--file", str(log_file), "-o", "json").stdout
    )
    assert [(d["job"], d["admitted"]) for d in doc] == [("user-a/one", True), ("user-a/two", True)]


@pytest.mark.parametrize(
    ("text", "code", "needle"),
    [
        (JOB.format(name="x", cpu="ten"), 3, "document 1 (Job x): spec.template.spec.containers"),
        (JOB.format(name="second", cpu="1"), 3, "a job user-a/second already exists (Pending)"),
        ("kind: ElasticQuotaTree\napiVersion: scheduling.sigs.k8s.io/v1beta1\n", 3, "not Elastic"),
        ("a: [", 3, "job.yaml"),
    ],
)
def test_a_bad_file_is_refused_naming_what_is_wrong(
    tmp_path: Path, log_file: Path, text: str, code: int, needle: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(text)
    line = one_line_error(usher("explain", "-f", str(job), "--file", str(log_file)), code)
    assert needle in line


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["explain"], 2, "give NS/NAME, or -f FILE"),
        (["explain", "user-a/x", "-f", "job.yaml"], 2, "not both"),
        (["explain", "-f", "missing.yaml"], 3, "missing.yaml"),
        (["submit", "--dry-run", "--wait", "--image", "x"], 2, "nothing to --wait for"),
        (["submit", "-o", "json", "--image", "x"], 2, "-o is for --dry-run"),
    ],
)
def test_bad_arguments_get_one_line(
    tmp_path: Path, args: list[str], code: int, needle: str
) -> None:
    result = usher(*[str(tmp_path / a) if a.endswith(".yaml") else a for a in args])
    assert needle in one_line_error(result, code)


def test_submit_dry_run_refuses_a_bad_manifest_before_asking_anything(tmp_path: Path) -> None:
    job = manifest(tmp_path, "x", "ten")
    # No stack runs: the file's mistake is what is said, not that nothing answers.
    result = usher("submit", "--dry-run", str(job), home=tmp_path / "nothing")
    line = one_line_error(result, 3)
    assert "job.yaml: document 1 (Job x): spec.template.spec.containers" in line
