"""The commands people type, as real processes against a real `usher up --no-demo`.

kube-queue's walkthrough's three scenarios are reproduced with `usher apply -f` and `usher submit`
and end in the states, queue orders and quota usage their scenario files expect; bad input of every
kind gets one clear line and a meaningful exit code, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.stack_process import UpProcess, next_second, poll, usher, usher_json
from usher.adapters.kube import KubeClient, Resource

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "tests" / "scenarios"
TREE = REPO / "usher" / "demo" / "walkthrough-tree.yaml"
CLASSES = REPO / "usher" / "demo" / "priority-classes.yaml"
WALKTHROUGH_JOB = ["--image", "perl:5.34.0", "--cpu", "10", "--memory", "10Gi", "--replicas", "6"]


def expect(name: str) -> dict[str, Any]:
    data = yaml.safe_load((SCENARIOS / name).read_text())
    return dict(data["expect"])


def outcome_if(home: Path, jobs: dict[str, str]) -> dict[str, Any] | None:
    """Jobs, queues and quota as `usher ... -o json` show them, once the jobs are as given."""
    listed = {j["job"]: j for j in usher_json(home, "jobs")}
    if any(listed.get(k, {}).get("state") != v for k, v in jobs.items()):
        return None
    queues = {q["name"]: [e["job"] for e in q["pending"]] for q in usher_json(home, "queues")}
    quota = {n["path"]: n["used"] for n in usher_json(home, "quota")}
    return {"jobs": listed, "queues": queues, "quota": quota}


def check_scenario(home: Path, name: str) -> dict[str, Any]:
    wanted = expect(name)
    seen = poll(lambda: outcome_if(home, wanted["jobs"]), timeout=40)
    for queue, order in (wanted.get("queues") or {}).items():
        assert seen["queues"][queue] == order
    for path, used in (wanted.get("quota") or {}).items():
        assert {r: seen["quota"][path].get(r) for r in used} == used
    for job in wanted.get("preempted") or []:
        assert seen["jobs"][job]["preemptions"] >= 1
    return seen


def ok(home: Path, *args: str) -> str:
    result = usher(home, *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def wait_for_queues(home: Path) -> None:
    poll(lambda: usher_json(home, "queues") or None)


# --------------------------------------------------------------------------- walkthrough scenarios


def test_walkthrough_scenarios_1_then_2_after_a_restart_with_block(tmp_path: Path) -> None:
    """kube-queue's walkthrough step by step: the tree, two 60-cpu jobs (scenario 1); then, as
    it does, kube-queue restarted with strict priority (here `usher up --policy Block`, which
    resumes from the log) and a priority-2 job (scenario 2)."""
    home = tmp_path / "home"
    with UpProcess(home) as up:
        up.stack()
        applied = ok(home, "apply", "-f", str(TREE))
        assert applied.strip() == "elasticquotatree.scheduling.sigs.k8s.io/elasticquotatree created"
        wait_for_queues(home)
        assert (
            ok(
                home,
                "submit",
                "--name",
                "pi-8k5pn",
                "-n",
                "user-a",
                *WALKTHROUGH_JOB,
                "--",
                "sleep",
                "1d",
            ).strip()
            == "job.batch/pi-8k5pn created"
        )
        next_second()
        ok(
            home,
            "submit",
            "--name",
            "pi-2xtcj",
            "-n",
            "user-a",
            *WALKTHROUGH_JOB,
            "--",
            "sleep",
            "1d",
        )
        seen = check_scenario(home, "01-walkthrough-round.yaml")
        waiting = seen["jobs"]["user-a/pi-2xtcj"]
        assert waiting["position"] == 1
        assert waiting["reason_code"] == "QuotaExceeded"
        assert waiting["reason"] == ("root/Department-a cpu 60 used + 60 requested > max 100 x 1.0")
        table = ok(home, "jobs", "-n", "user-a")
        assert table.splitlines()[0].split() == [
            "NAMESPACE",
            "NAME",
            "STATE",
            "QUEUE",
            "POS",
            "PRIO",
            "ZONE",
            "AGE",
            "REASON",
        ]
        assert up.stop() == 0
    with UpProcess(home, args=("--no-demo", "--policy", "Block")) as up:
        up.stack()
        ok(home, "apply", "-f", str(CLASSES))
        ok(
            home,
            "submit",
            "--name",
            "pi-6nsc7",
            "-n",
            "user-a",
            *WALKTHROUGH_JOB,
            "--priority-class",
            "priority-2",
            "--",
            "sleep",
            "1d",
        )
        poll(lambda: outcome_if(home, {"user-a/pi-6nsc7": "Pending"}))
        seen = check_scenario(home, "02-walkthrough-block.yaml")
        assert seen["jobs"]["user-a/pi-2xtcj"]["reason_code"] == "BlockedByHead"
        queue = usher_json(home, "queue", "root-department-a-user-a")
        assert queue["policy"] == "Block"
        assert [(e["job"], e["position"], e["priority"]) for e in queue["pending"]] == [
            ("user-a/pi-6nsc7", 1, 2),
            ("user-a/pi-2xtcj", 2, 0),
        ]
        assert up.stop() == 0


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One `usher up --no-demo` with the demo tree and PriorityClasses applied."""
    home = tmp_path_factory.mktemp("people") / "home"
    with UpProcess(home) as up:
        up.stack()
        ok(home, "apply", "-f", str(TREE), "-f", str(CLASSES))
        wait_for_queues(home)
        yield home


def test_walkthrough_scenario_3_reclaim(running: Path) -> None:
    """Department-a borrows the whole cluster; Department-b asks within its guarantee."""
    home = running
    base = ["--image", "busybox", "--cpu", "10", "--memory", "10Gi"]
    ok(home, "submit", "--name", "big", "-n", "user-a", *base, "--replicas", "6")
    next_second()
    ok(home, "submit", "--name", "borrow", "-n", "user-b", *base, "--replicas", "4")
    poll(lambda: outcome_if(home, {"user-b/borrow": "Admitted"}))
    next_second()
    ok(home, "submit", "--name", "urgent", "-n", "user-c", *base, "--priority-class", "priority-3")
    seen = check_scenario(home, "03-walkthrough-reclaim.yaml")
    assert seen["jobs"]["user-b/borrow"]["preemptions"] == 1
    assert "(preempted 1x)" in ok(home, "jobs", "-n", "user-b")
    quota = ok(home, "quota")
    assert "Department-b   10/40/100" in quota


def test_submit_wait_follows_a_job_to_success(running: Path) -> None:
    result = usher(
        running,
        "submit",
        "-n",
        "user-c",
        "--image",
        "python:3",
        "--cpu",
        "1",
        "--memory",
        "1Gi",
        "--duration",
        "1",
        "--wait",
        "--timeout",
        "30",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("job.batch/python-") and lines[0].endswith(" created")
    states = [line.split()[2] for line in lines[1:]]
    assert states[-2:] == ["Admitted", "Finished"]
    assert lines[-1].endswith("Finished  succeeded")


def test_submit_wait_says_why_a_job_can_never_run(running: Path) -> None:
    result = usher(
        running,
        "submit",
        "-n",
        "user-c",
        "--name",
        "too-big",
        "--image",
        "x",
        "--cpu",
        "200",
        "--wait",
        "--timeout",
        "30",
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "usher: job user-c/too-big is Inadmissible: ExceedsMax: root/Department-b cpu 200 "
        "requested > max 100 x 1.0; it can never fit"
    )


def test_wait_times_out_with_its_own_exit_code(running: Path) -> None:
    ok(running, "submit", "--name", "forever", "-n", "user-c", "--image", "x", "--cpu", "1")
    result = usher(running, "wait", "user-c/forever", "--timeout", "1")
    assert result.returncode == 5
    assert result.stderr.strip().startswith("usher: job user-c/forever is still ")
    admitted = usher(running, "wait", "forever", "-n", "user-c", "--for", "admitted")
    assert admitted.returncode == 0, admitted.stderr


def test_apply_creates_configures_and_leaves_unchanged(running: Path, tmp_path: Path) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "team-settings", "namespace": "user-a"},
        "data": {"owner": "a", "gone-next-time": "x"},
    }
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert ok(running, "apply", "-f", str(path)).strip() == "configmap/team-settings created"
    assert ok(running, "apply", "-f", str(path)).strip() == "configmap/team-settings unchanged"
    manifest["data"] = {"owner": "b"}
    path.write_text(yaml.safe_dump(manifest))
    assert ok(running, "apply", "-f", str(path)).strip() == "configmap/team-settings configured"
    stack = json.loads((running / "stack.json").read_text())

    async def read() -> dict[str, Any]:
        async with await KubeClient.from_kubeconfig(Path(stack["kubeconfig"])) as kube:
            configmaps = Resource("", "v1", "configmaps", "ConfigMap")
            return await kube.get(configmaps, "user-a", "team-settings")

    assert asyncio.run(read())["data"] == {"owner": "b"}  # the dropped key is removed


TREES = Resource("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", "ElasticQuotaTree")


def _patch_tree(home: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Merge-patch the demo tree's spec as a user with kubectl would; the object as written."""
    stack = json.loads((home / "stack.json").read_text())

    async def patch() -> dict[str, Any]:
        async with await KubeClient.from_kubeconfig(Path(stack["kubeconfig"])) as kube:
            await kube.merge_patch(TREES, "kube-system", "elasticquotatree", {"spec": spec})
            return await kube.get(TREES, "kube-system", "elasticquotatree")

    return asyncio.run(patch())


def test_quota_shows_a_rejected_tree_and_the_tree_still_in_force(running: Path) -> None:
    """Issue 14, item 3: `usher quota` said nothing about a tree the watcher rejected."""
    good = yaml.safe_load(TREE.read_text())["spec"]
    bad = json.loads(json.dumps(good))
    # Department-b min 50: each node passes the CRD's rules (the API server stores it), the
    # children's mins (60 + 50) are above the root's 100: Usher's check of the whole tree.
    bad["root"]["children"][1]["min"]["cpu"] = "50"
    try:
        _patch_tree(running, bad)
        table = poll(lambda: out if "rejected" in (out := ok(running, "quota")) else None)
        first, *rest = table.splitlines()
        assert first.startswith("ElasticQuotaTree kube-system/elasticquotatree rejected at ")
        assert "(the previous tree stays in force)" in first
        assert "spec.root.min.cpu: sum of children min cpu 110 > parent root min 100" in first
        kept = [line.split() for line in rest if line.split()[:1] == ["Department-b"]]
        assert kept and kept[0][1].endswith("/40/100"), table  # the old min 40 is in force
        as_json = usher(running, "quota", "-o", "json")
        assert as_json.returncode == 0 and json.loads(as_json.stdout)  # stdout: the list only
        assert as_json.stderr.startswith("usher: ElasticQuotaTree kube-system/elasticquotatree")
    finally:
        _patch_tree(running, good)
    poll(lambda: True if "rejected" not in ok(running, "quota") else None)


BAD_JOB = """apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: user-a}
spec: {template: {spec: {containers: [{name: c, image: x, resources: {requests: {cpu: lots}}}]}}}
"""
BAD_TREE = """apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: elasticquotatree, namespace: kube-system}
spec:
  root:
    name: root
    max: {cpu: "100"}
    min: {cpu: "100"}
    children:
      - {name: a, max: {cpu: "10"}, min: {cpu: "20"}, namespaces: [x]}
"""


@pytest.mark.parametrize(
    ("files", "args", "code", "message"),
    [
        (
            {},
            ["submit", "-n", "nosuch", "--image", "x", "--cpu", "1"],
            3,
            "usher: namespace 'nosuch' belongs to no leaf of the quota tree, so no queue takes its "
            "jobs (namespaces with a queue: user-a, user-b, user-c)",
        ),
        (
            {},
            ["jobs", "-n", "nosuch"],
            3,
            "usher: no namespace 'nosuch' in Usher: no job there, and no leaf of the quota tree "
            "takes it (namespaces with a queue: user-a, user-b, user-c)",
        ),
        (
            {},
            ["queue", "nope"],
            3,
            "usher: no queue 'nope' (queues: root-department-a-user-a, root-department-b-user-c)",
        ),
        (
            {},
            ["submit", "-n", "user-a", "--image", "x", "--cpu", "ten"],
            2,  # a usage error: the option's type refuses it before the stack is asked
            "usher: Invalid value for '--cpu': quantity 'ten' is not Kubernetes notation (e.g. "
            "100, 500m, 1.5, 10Gi, 1e3)",
        ),
        (
            {},
            ["submit", "-n", "user-a", "--image", "x"],
            3,
            "usher: a job must request something: give cpu, memory or gpu",
        ),
        (
            {},
            ["submit", "-n", "user-a", "--cpu", "1"],
            2,
            "usher: give a manifest FILE, or --image (and the command after --)",
        ),
        (
            {},
            ["submit", "-n", "user-a", "--image", "x", "--cpu", "1", "--label", "nolabel"],
            2,
            "usher: --label 'nolabel': expected KEY=VALUE",
        ),
        ({}, ["apply", "-f", "missing.yaml"], 3, "usher: missing.yaml: no such file"),
        (
            {"bad.yaml": "kind: [unclosed\n"},
            ["apply", "-f", "bad.yaml"],
            3,
            "usher: bad.yaml: line 2 column 1: invalid YAML: did not find expected ',' or ']'",
        ),
        (
            {"tree.yaml": BAD_TREE},
            ["apply", "-f", "tree.yaml"],
            3,
            "usher: tree.yaml: document 1 (ElasticQuotaTree elasticquotatree): "
            "spec.root.children[0](a).min.cpu: min 20 > max 10 [min-exceeds-max]",
        ),
        (
            {"svc.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"},
            ["apply", "-f", "svc.yaml"],
            3,
            "usher: svc.yaml: document 1: usher apply does not handle Service (v1); use kubectl "
            "for it",
        ),
        (
            {"tree.yaml": BAD_TREE},
            ["submit", "tree.yaml"],
            3,
            "usher: tree.yaml: document 1: usher submit takes jobs, not ElasticQuotaTree "
            "(use usher apply -f)",
        ),
        (
            {"job.yaml": BAD_JOB},
            ["submit", "job.yaml"],
            3,
            "usher: job.yaml: document 1 (Job j): spec.template.spec.containers[0].resources."
            "requests.cpu: ",
        ),
        (
            {},
            [
                "submit",
                "-n",
                "user-c",
                "--name",
                "zoned",
                "--image",
                "x",
                "--cpu",
                "1",
                "--zone",
                "zzz",
            ],
            3,
            "usher: zone 'zzz' has no dequeuer, so nothing would ever admit the job (served "
            "zones: a, b, default)",
        ),
        (
            {},
            ["wait", "user-a/nosuch"],
            3,
            "usher: no job user-a/nosuch is known to Usher (not seen within 5s)",
        ),
    ],
    ids=[
        "submit-unknown-namespace",
        "jobs-unknown-namespace",
        "unknown-queue",
        "bad-quantity",
        "no-resources",
        "no-image-no-file",
        "bad-label",
        "missing-file",
        "invalid-yaml",
        "invalid-tree",
        "unknown-kind",
        "submit-a-tree",
        "invalid-job",
        "submit-unserved-zone",
        "wait-unknown-job",
    ],
)
def test_bad_input_gets_one_clear_line(
    running: Path,
    tmp_path: Path,
    files: dict[str, str],
    args: list[str],
    code: int,
    message: str,
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    args = [
        str(tmp_path / a) if (tmp_path / a).exists() or a.endswith(".yaml") else a for a in args
    ]
    result = usher(running, *args)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) >= 1
    assert lines[0].replace(f"{tmp_path}/", "").startswith(message), lines


def test_a_job_of_a_zone_nobody_serves_says_so_and_never_looks_admissible(running: Path) -> None:
    # Issue 14 item 2: it stayed "NotYetEvaluated: fits now" for ever.
    job = ["--name", "zoned-any", "-n", "user-c", "--image", "x", "--cpu", "1", "--zone", "zzz"]
    assert ok(running, "submit", *job, "--any-zone").strip() == "job.batch/zoned-any created"
    shown = poll(
        lambda: next(
            (j for j in usher_json(running, "jobs") if j["job"] == "user-c/zoned-any"), None
        )
    )
    assert shown["state"] == "Pending"
    assert shown["reason_code"] == "ZoneNotServed"
    assert shown["reason"].startswith("no dequeuer serves zone zzz (served zones: a, b, default)")
    waited = usher(running, "wait", "user-c/zoned-any", "--for", "admitted", "--timeout", "2")
    assert waited.returncode == 5
    assert "ZoneNotServed" in waited.stdout
    explained = ok(running, "explain", "user-c/zoned-any")
    assert "why:      ZoneNotServed: no dequeuer serves zone zzz" in explained
    _delete_job(running, "user-c", "zoned-any")  # it would wait in user-c's queue for ever


def _delete_job(home: Path, namespace: str, name: str) -> None:
    stack = json.loads((home / "stack.json").read_text())

    async def delete() -> None:
        async with await KubeClient.from_kubeconfig(Path(stack["kubeconfig"])) as kube:
            await kube.delete(Resource("batch", "v1", "jobs", "Job"), namespace, name)

    asyncio.run(delete())


def test_a_second_submit_of_the_same_name_is_refused(running: Path) -> None:
    job = ["submit", "--name", "dup", "-n", "user-b", "--image", "x", "--cpu", "1"]
    ok(running, *job)
    result = usher(running, *job)
    assert result.returncode == 3
    assert result.stderr.strip() == "usher: job.batch/dup already exists in namespace user-b"


def test_submit_dry_run_creates_nothing_and_says_what_submitting_does(running: Path) -> None:
    job = ["--name", "dry", "-n", "user-b", "--image", "x", "--cpu", "1"]
    said = usher_json(running, "submit", "--dry-run", *job)
    assert (said["job"], said["queue"]) == ("user-b/dry", "root-department-a-user-a")
    assert said["estimate"] is not None
    assert "user-b/dry" not in {j["job"] for j in usher_json(running, "jobs")}
    table = ok(running, "submit", "--dry-run", *job)
    assert table.startswith("user-b/dry (dry run: nothing was created)\n")
    ok(running, "submit", *job)

    def placed() -> dict[str, Any] | None:
        found = {j["job"]: j for j in usher_json(running, "jobs")}.get("user-b/dry")
        wanted = "Admitted" if said["admitted"] else "Pending"
        return found if found is not None and found["state"] == wanted else None

    now = poll(placed)
    assert now["queue"] == said["queue"]
    listed = ok(running, "jobs", "-n", "user-b", "--start")
    assert listed.splitlines()[0].split()[-2:] == ["START", "REASON"]


@pytest.mark.parametrize(
    "args",
    [
        ["jobs"],
        ["queues"],
        ["queue", "root-department-a-user-a"],
        ["quota"],
        ["wait", "user-a/x"],
        ["submit", "-n", "user-a", "--image", "x", "--cpu", "1"],
        ["apply", "-f", str(TREE)],
    ],
    ids=["jobs", "queues", "queue", "quota", "wait", "submit", "apply"],
)
def test_no_stack_running_is_one_line_and_exit_4(tmp_path: Path, args: list[str]) -> None:
    result = usher(tmp_path, *args)
    assert result.returncode == 4
    assert result.stderr.strip() == (
        f"usher: no Usher is running (no stack.json in {tmp_path}): start one with `usher up`, "
        "or name an installation with --kubeconfig and --nats"
    )
    assert result.stdout == ""
