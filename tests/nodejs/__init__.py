"""Node.js for the tests that check our contract with a client other systems use.

What it does: ``node_dir`` installs the npm packages those tests run (``PACKAGES``: Ajv for
strict JSON Schema 2020-12 validation, nats.js for the documented consumer) into a temporary
directory once per session, and ``run_node`` runs one of our scripts there (ES modules
resolve packages next to the script, so the script is copied beside ``node_modules``).
Skipped only where ``node`` is absent; an npm failure is a failure.
What it must never do: install into the repository (no ``node_modules`` is ever committed).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGES = {"ajv": "^8.17.1", "ajv-formats": "^3.0.1", "nats": "^2.29.3"}
"""What the scripts import, pinned to a major version."""


_INSTALLED: dict[int, Path] = {}
"""The directory installed in each session (by its temporary path factory), once."""


def node_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``PACKAGES`` installed (skips the test where node is absent)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node is not installed: the Ajv and nats.js checks need it")
    if id(tmp_path_factory) in _INSTALLED:
        return _INSTALLED[id(tmp_path_factory)]
    root = tmp_path_factory.mktemp("node")
    manifest = {"name": "usher-contract-checks", "private": True, "type": "module"}
    (root / "package.json").write_text(json.dumps({**manifest, "dependencies": PACKAGES}))
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=root,
        check=True,
        capture_output=True,
        timeout=300,
    )
    _INSTALLED[id(tmp_path_factory)] = root
    return root


def run_node(
    root: Path, script: Path, args: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with node from ``root`` (where the packages are)."""
    target = root / script.name
    shutil.copyfile(script, target)
    return subprocess.run(
        ["node", str(target), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
