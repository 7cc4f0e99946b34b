"""`usher replay|audit|what-if|explain|log` as a person runs them: output, exit codes, errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.builders.log import Log, walkthrough_reclaim, walkthrough_round
from tests.cli.history_cli import export, usher


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("usher: ")
    return lines[0]


@pytest.fixture
def round_file(tmp_path: Path) -> Path:
    return export(walkthrough_round(), tmp_path / "round.jsonl")


def test_replay_table_and_json(round_file: Path) -> None:
    table = usher("replay", "--file", str(round_file))
    assert table.returncode == 0, table.stderr
    assert "user-a/second" in table.stdout and "#1" in table.stdout
    assert "root/Department-a cpu 60 used + 60 requested > max 100 x 1.0" in table.stdout
    doc = json.loads(usher("replay", "--file", str(round_file), "-o", "json").stdout)
    states = {row["job"]: row["state"] for row in doc["jobs"]}
    assert states == {"user-a/first": "Admitted", "user-a/second": "Pending"}
    early = json.loads(
        usher("replay", "--file", str(round_file), "--seq", "2", "-o", "json").stdout
    )
    assert [row["state"] for row in early["jobs"]] == ["Pending"]
    at = json.loads(
        usher(
            "replay", "--file", str(round_file), "--until", "2024-05-01T12:00:01.150Z", "-o", "json"
        ).stdout
    )
    assert at["seq"] == 3


def test_audit_passes_a_good_log_and_names_a_tampered_decision(
    round_file: Path, tmp_path: Path
) -> None:
    good = usher("audit", "--file", str(round_file))
    assert good.returncode == 0, good.stdout + good.stderr
    assert "OK" in good.stdout
    tampered = export(walkthrough_round().admitted(3, "user-a/second", 60), tmp_path / "bad.jsonl")
    bad = usher("audit", "--file", str(tampered))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "seq 6" in bad.stdout and "ledger:admitted:user-a/second:2" in bad.stdout
    assert "over-quota" in bad.stdout
    doc = json.loads(usher("audit", "--file", str(tampered), "-o", "json").stdout)
    assert [(f["seq"], f["workload"], f["check"]) for f in doc["findings"]] == [
        (6, "user-a/second", "over-quota"),
        (6, "user-a/second", "over-commit"),
        (6, "user-a/second", "over-commit"),
    ]


def test_audit_checks_the_end_of_a_quiescent_log_only_with_quiescent(tmp_path: Path) -> None:
    stuck = export(walkthrough_round().job(3, "user-c/fits", 10), tmp_path / "stuck.jsonl")
    moving = usher("audit", "--file", str(stuck))
    assert moving.returncode == 0, moving.stdout + moving.stderr
    rested = usher("audit", "--file", str(stuck), "--quiescent")
    assert rested.returncode == 1, rested.stdout + rested.stderr
    assert "end" in rested.stdout and "user-c/fits" in rested.stdout
    assert "stuck: Pending: NotYetEvaluated" in rested.stdout


def test_what_if_oversell_two(round_file: Path) -> None:
    result = usher("what-if", "--oversell", "2", "--file", str(round_file), "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["overall"]["baseline"]["admitted"] == 1
    assert doc["overall"]["whatif"]["admitted"] == 2
    table = usher("what-if", "--oversell", "2", "--file", str(round_file)).stdout
    assert "1 -> 2" in table and "user-a/second" in table


def test_what_if_with_a_tree_file(round_file: Path, tmp_path: Path) -> None:
    tree_file = tmp_path / "tree.yaml"
    tree_file.write_text(
        """
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: elasticquotatree, namespace: kube-system}
spec:
  root:
    name: root
    max: {cpu: "200"}
    min: {cpu: "200"}
    children:
      - {name: Department-a, max: {cpu: "200"}, min: {cpu: "160"}, namespaces: [user-a, user-b]}
      - {name: Department-b, max: {cpu: "100"}, min: {cpu: "40"}, namespaces: [user-c]}
"""
    )
    result = usher("what-if", "--tree", str(tree_file), "--file", str(round_file), "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["overall"]["whatif"]["admitted"] == 2
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(tree_file.read_text().replace('min: {cpu: "160"}', 'min: {cpu: "300"}'))
    bad = usher("what-if", "--tree", str(invalid), "--file", str(round_file))
    assert bad.returncode == 3 and "Traceback" not in bad.stderr
    assert str(invalid) in bad.stderr


def test_explain(tmp_path: Path) -> None:
    file = export(walkthrough_reclaim(), tmp_path / "reclaim.jsonl")
    result = usher("explain", "user-b/borrow", "--file", str(file))
    assert result.returncode == 0, result.stderr
    assert "Pending" in result.stdout and "Preempted" in result.stdout
    assert "Reclaim: user-c/urgent reclaims" in result.stdout
    doc = json.loads(usher("explain", "user-b/borrow", "--file", str(file), "-o", "json").stdout)
    assert doc["state"] == "Pending"
    assert doc["reclaim"]["possible"] is False


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["explain", "user-a/nobody"], 3, "unknown job user-a/nobody"),
        (["explain", "no-slash"], 2, "expected NAMESPACE/NAME"),
        (["replay", "--until", "yesterday"], 2, "--until 'yesterday'"),
        (["replay", "--until", "-1m", "--seq", "3"], 2, "not both"),
        (["audit", "--since", "soon"], 2, "--since 'soon'"),
        (["audit", "--since", "-1m"], 3, "--since: this export has no log times"),
        (["what-if"], 2, "nothing to compare"),
        (["what-if", "--oversell", "-1"], 2, "oversell-rate"),
    ],
)
def test_bad_arguments_get_one_line(
    round_file: Path, args: list[str], code: int, needle: str
) -> None:
    line = one_line_error(usher(*args, "--file", str(round_file)), code)
    assert needle in line


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    line = one_line_error(usher("replay", "--file", str(tmp_path / "nope.jsonl")), 3)
    assert "no such file" in line
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prefix":"usher","stream":"USHER_LOG","entries":1}\n{"seq": "x"}\n')
    line = one_line_error(usher("audit", "--file", str(broken)), 3)
    assert "broken.jsonl:2" in line
    line = one_line_error(usher("what-if", "--tree", str(tmp_path / "t.yaml"), "--file", "x"), 3)
    assert "no such file" in line


@pytest.mark.parametrize(
    "args",
    [
        ["replay"],
        ["audit"],
        ["explain", "a/b"],
        ["what-if", "--oversell", "2"],
        ["log", "export", "out.jsonl"],
        ["log", "import", "in.jsonl"],
    ],
)
def test_no_stack_running(tmp_path: Path, args: list[str]) -> None:
    line = one_line_error(usher(*args, home=tmp_path), 4)
    assert "no stack running" in line


def test_nats_unreachable(tmp_path: Path) -> None:
    line = one_line_error(usher("replay", "--nats", "nats://127.0.0.1:9", home=tmp_path), 4)
    assert "cannot reach NATS at nats://127.0.0.1:9" in line


def test_ledger_unreachable(round_file: Path) -> None:
    result = usher(
        "audit", "--file", str(round_file), "--database", "postgresql://u:secret@127.0.0.1:9/x"
    )
    line = one_line_error(result, 4)
    assert "cannot read the ledger" in line and "secret" not in line


def test_what_if_another_ready_timeout(tmp_path: Path) -> None:
    """R10: x never reports its pods ready; with a 30 s ready timeout y gets its quota."""
    log = (
        Log()
        .tree()
        .job(1, "user-a/x", 60, pods=4)
        .admitted(1.1, "user-a/x", 60)
        .job(2, "user-c/y", 60)
        .finished(200, "user-a/x")
    )
    file = export(log, tmp_path / "stuck.jsonl")
    result = usher("what-if", "--ready-timeout", "30", "--file", str(file), "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["whatif"]["ready_timeout_s"] == 30 and "ready_timeout_s" not in doc["baseline"]
    table = usher("what-if", "--ready-timeout", "30", "--file", str(file)).stdout
    assert "ready-timeout 30s" in table and "requeue" in table, table
    bad = one_line_error(usher("what-if", "--ready-timeout", "-5", "--file", str(file)), 2)
    assert "--ready-timeout" in bad


def test_explain_shows_progress_and_a_requeue(tmp_path: Path) -> None:
    log = (
        Log()
        .tree()
        .job(1, "user-a/x", 60, pods=4)
        .admitted(1.1, "user-a/x", 60)
        .progress(30, "user-a/x", 1, 4)
        .requeued(70, "user-a/x", 60)
    )
    file = export(log, tmp_path / "requeued.jsonl")
    result = usher("explain", "user-a/x", "--file", str(file))
    assert result.returncode == 0, result.stderr
    assert "1/4 pods ready" in result.stdout
    assert "Requeued" in result.stdout and "PodsNotReady" in result.stdout
    assert "attempt 1 of 5" in result.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--zone-max", "Department-a"], "--zone-max 'Department-a': expected NODE=VALUE"),
        (["--zone-max", "Department-a=default cpu=4"], "--zone-max Department-a=default cpu=4:"),
        (["--zones", "Department-a=a,,b"], "--zones Department-a=a,,b: 'a,,b' is not a comma"),
        (["--zones", "x=a", "--zones", "x=b"], "--zones x: the node is given twice"),
        (["--burst-zones", "eci,eci"], "--burst-zones 'eci,eci' names a zone twice"),
        (["--zones", "gpu-team=a,b"], "--zones gpu-team: no such node in the replayed window"),
    ],
)
def test_bad_zone_policy_flags_get_one_line_naming_the_flag(
    round_file: Path, args: list[str], needle: str
) -> None:
    line = one_line_error(usher("what-if", *args, "--file", str(round_file)), 2)
    assert needle in line, line


def test_what_if_a_burst_zone_names_the_zone_it_admitted_into(tmp_path: Path) -> None:
    log = Log().tree(0).job(1, "user-a/first", 60).job(2, "user-a/second", 30)
    file = export(log, tmp_path / "zones.jsonl")
    flags = [
        "--zone-max", "root=default: cpu=70",
        "--zones", "root=default,eci",
        "--burst-zones", "eci",
    ]  # fmt: skip
    result = usher("what-if", *flags, "--file", str(file))
    assert result.returncode == 0, result.stderr
    assert "zone policy --zone-max root=default: cpu=70; --zones root=default,eci;" in result.stdout
    assert "+2.000s root/Department-a in zone eci" in result.stdout, result.stdout
    doc = json.loads(usher("what-if", *flags, "--file", str(file), "-o", "json").stdout)
    assert [(d["workload"], d["whatif_zone"]) for d in doc["differences"]] == [
        ("user-a/second", "eci")
    ]
