"""`kubectl usher ...`: Usher as a kubectl plugin (kueuectl's convention), through the real
kubectl (skipped only when it is not on PATH), finding ``kubectl-usher`` beside ``usher``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
