"""`kubectl usher` talks to the installation of the kubeconfig's context (issue 29).

The table runs ``usher.cli.kubectl.environment_for`` on a kubeconfig of two contexts (the local
stack's emulator and a cluster whose context names its Usher NATS), and more, against a home
whose ``stack.json`` names the local emulator. The last test runs the real ``kubectl`` with
the installed ``kubectl-usher`` against a real ``usher up``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from tests.cli.stack_process import UpProcess, clean_env, poll
from usher.adapters.stack_file import StackInfo
from usher.cli.kubectl import CHOSEN, PluginError, environment_for

LOCAL = "https://127.0.0.1:40123"
PROD = "https://prod.example:6443"
PROD_NATS = "tls://usher-cli:secret@nats.prod.example:4222"


def _kubeconfig(current: str, *, local: str = LOCAL) -> dict[str, Any]:
    user = [{"name": "u", "user": {"token": "t"}}]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": local}},
            {"name": "prod", "cluster": {"server": PROD}},
            {"name": "bare", "cluster": {"server": "https://bare.example"}},
        ],
        "users": user,
        "contexts": [
            {"name": "usher-local", "context": {"cluster": "local", "user": "u"}},
            {
                "name": "prod",
                "context": {
                    "cluster": "prod",
                    "user": "u",
                    "extensions": [
                        {"name": "usher.io", "extension": {"nats-url": PROD_NATS, "prefix": "p"}}
                    ],
                },
            },
            {"name": "bare", "context": {"cluster": "bare", "user": "u"}},
        ],
        "current-context": current,
    }


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """A home whose stack serves LOCAL, and kubeconfig files of the two contexts."""
    home = tmp_path / "home"
    home.mkdir()
    own = home / "kubeconfig"
    own.write_text(yaml.safe_dump(_kubeconfig("usher-local")))
    info = StackInfo(
        home=str(home),
        nats_url="nats://console:x@127.0.0.1:4222",
        database_url="",
        prefix="usher",
        pids={},
        started_at=datetime.now(UTC),
        kubeconfig=str(own),
    )
    (home / "stack.json").write_bytes(msgspec.json.encode(info))
    files = {"home": home}
    for current in ("usher-local", "prod", "bare"):
        files[current] = tmp_path / f"{current}.yaml"
        files[current].write_text(yaml.safe_dump(_kubeconfig(current)))
    return files


LOCAL_STACK = {"USHER_HOME": "{home}"}
PROD_CLUSTER = {
    "USHER_KUBECONFIG": "{prod}",
    "USHER_KUBE_CONTEXT": "prod",
    "USHER_NATS_URL": PROD_NATS,
    "USHER_PREFIX": "p",
}
CASES: list[tuple[str, list[str], dict[str, str], list[str], dict[str, str] | None]] = [
    # (what, argv, environment, usher's argv, what the environment then says: None = unchanged)
    ("current context: the local stack", ["jobs"], {"KUBECONFIG": "{usher-local}"}, ["jobs"],
     LOCAL_STACK),
    ("the local stack wins over a NATS URL meant for elsewhere", ["jobs"],
     {"KUBECONFIG": "{usher-local}", "USHER_NATS_URL": "nats://other:4222"}, ["jobs"],
     LOCAL_STACK),
    ("current context: a cluster whose context names its NATS", ["jobs", "-n", "a"],
     {"KUBECONFIG": "{prod}"}, ["jobs", "-n", "a"], PROD_CLUSTER),
    ("--context anywhere, either spelling", ["jobs", "--context", "prod", "-n", "a"],
     {"KUBECONFIG": "{usher-local}"}, ["jobs", "-n", "a"],
     {**PROD_CLUSTER, "USHER_KUBECONFIG": "{usher-local}"}),
    ("--context=", ["--context=usher-local", "jobs"], {"KUBECONFIG": "{prod}"}, ["jobs"],
     LOCAL_STACK),
    ("--kubeconfig beats KUBECONFIG", ["jobs", "--kubeconfig", "{usher-local}"],
     {"KUBECONFIG": "{prod}"}, ["jobs"], LOCAL_STACK),
    ("KUBECONFIG's first current context wins", ["jobs"],
     {"KUBECONFIG": "{prod}" + os.pathsep + "{usher-local}"}, ["jobs"], PROD_CLUSTER),
    ("a bare context takes the NATS of USHER_NATS_URL", ["jobs"],
     {"KUBECONFIG": "{bare}", "USHER_NATS_URL": "nats://n:4222"}, ["jobs"],
     {"USHER_KUBECONFIG": "{bare}", "USHER_KUBE_CONTEXT": "bare",
      "USHER_NATS_URL": "nats://n:4222"}),
    ("after --, nothing is taken", ["submit", "--", "sh", "--context", "x"],
     {"KUBECONFIG": "{usher-local}"}, ["submit", "--", "sh", "--context", "x"], LOCAL_STACK),
    ("no kubeconfig at all: usher as it is", ["jobs"], {"HOME": "{home}"}, ["jobs"], None),
    ("a context that names no Usher: said when a command needs one", ["jobs"],
     {"KUBECONFIG": "{bare}"}, ["jobs"],
     {"USHER_KUBE_CONTEXT_REFUSED": 'context "bare" (server https://bare.example) is not a local'
      " stack (the local stack of {home} serves " + LOCAL + ") and names no Usher NATS: add its"
      " usher.io extension with nats-url, or set USHER_NATS_URL"}),
]  # fmt: skip


def _fill(text: str, world: dict[str, Path]) -> str:
    return text.format(**{k: str(v) for k, v in world.items()})


@pytest.mark.parametrize(("argv", "env", "args", "says"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_the_context_names_the_installation(
    world: dict[str, Path],
    argv: list[str],
    env: dict[str, str],
    args: list[str],
    says: dict[str, str] | None,
) -> None:
    given = {"USHER_HOME": str(world["home"]), **{k: _fill(v, world) for k, v in env.items()}}
    got_args, got_env = environment_for([_fill(a, world) for a in argv], given)
    assert got_args == args
    told = {k: got_env[k] for k in ("USHER_HOME", *CHOSEN) if k in got_env}
    assert told == {"USHER_HOME": str(world["home"])} | {
        k: _fill(v, world) for k, v in (says or {}).items()
    }


@pytest.mark.parametrize(
    ("argv", "env", "code", "message"),
    [
        (["jobs", "--context", "nope"], {"KUBECONFIG": "{prod}"}, 2,
         'context "nope" does not exist in {prod}'),
        (["jobs", "--kubeconfig", "{home}/missing"], {}, 2, "--kubeconfig: {home}/missing does"
         " not exist"),
        (["jobs", "--context"], {"KUBECONFIG": "{prod}"}, 2, "--context: needs a value"),
    ],
)  # fmt: skip
def test_a_context_that_names_no_usher_is_refused(
    world: dict[str, Path], argv: list[str], env: dict[str, str], code: int, message: str
) -> None:
    given = {"USHER_HOME": str(world["home"]), **{k: _fill(v, world) for k, v in env.items()}}
    with pytest.raises(PluginError) as refused:
        environment_for([_fill(a, world) for a in argv], given)
    assert (refused.value.code, refused.value.message) == (code, _fill(message, world))


# --------------------------------------------------------------------------- real kubectl

KUBECTL = shutil.which("kubectl")
SCRIPTS = Path(sys.executable).parent


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
def test_kubectl_finds_and_runs_the_usher_plugin(tmp_path: Path) -> None:
    assert KUBECTL is not None
    env = {**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["USHER_HOME"] = str(tmp_path / "home")

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60)

    listed = kubectl("plugin", "list")
    assert str(SCRIPTS / "kubectl-usher") in listed.stdout, listed.stdout + listed.stderr
    version = kubectl("usher", "--version")
    assert version.returncode == 0 and version.stdout.startswith("usher, version "), version
    refused = kubectl("usher", "explain", "nope")
    assert refused.returncode == 2
    assert "'nope': expected NAMESPACE/NAME" in refused.stderr


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
def test_kubectl_usher_follows_the_current_context_and_context_flag(tmp_path: Path) -> None:
    """Two contexts: the local stack's emulator, and a cluster without Usher. `kubectl usher`
    talks to whichever is current or named by --context, as kubectl itself does."""
    home = tmp_path / "home"
    with UpProcess(home, args=("--no-demo", "--no-console")) as up:
        info = up.stack()
        own = yaml.safe_load(Path(info["kubeconfig"]).read_text())
        config = {
            **own,
            "clusters": [*own["clusters"], {"name": "x", "cluster": {"server": "https://x:1"}}],
            "contexts": [
                *own["contexts"],
                {"name": "elsewhere", "context": {"cluster": "x", "user": own["users"][0]["name"]}},
            ],
        }
        kubeconfig = tmp_path / "two-contexts.yaml"
        kubeconfig.write_text(yaml.safe_dump(config))
        env = {
            **clean_env(home),
            "KUBECONFIG": str(kubeconfig),
            "PATH": f"{SCRIPTS}{os.pathsep}{os.environ['PATH']}",
        }

        def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(KUBECTL), *args], env=env, capture_output=True, text=True, timeout=120
            )

        made = kubectl(
            "usher", "submit", "--name", "hello", "-n", "user-a", "--image", "busybox", "--cpu", "1"
        )
        assert made.returncode == 0, made.stderr
        poll(lambda: kubectl("usher", "jobs", "-o", "json").stdout or None)
        listed = json.loads(kubectl("usher", "jobs", "-o", "json").stdout)
        assert [j["job"] for j in listed] == ["user-a/hello"]

        refusal = (
            'usher: context "elsewhere" (server https://x:1) is not a local stack (the local'
            f" stack of {home} serves {own['clusters'][0]['cluster']['server']}) and names no"
            " Usher NATS: add its usher.io extension with nats-url, or set USHER_NATS_URL"
        )
        other = kubectl("usher", "jobs", "--context", "elsewhere")
        assert (other.returncode, other.stderr.strip()) == (4, refusal)
        switched = kubectl("config", "use-context", "elsewhere")
        assert switched.returncode == 0, switched.stderr
        current = kubectl("usher", "jobs")
        assert (current.returncode, current.stderr.strip()) == (4, refusal)
        back = kubectl("usher", "--context", own["current-context"], "jobs", "-o", "json")
        assert back.returncode == 0 and json.loads(back.stdout) == listed
