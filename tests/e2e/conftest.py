"""Fixtures of the end-to-end tests: the Kubernetes API emulator with its kubelet playing pods.
Never starts the services (``harness.in_process_stack`` does, per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from usher.local.kube_emulator import KubeEmulator


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    """The emulator, its kubeconfig in this test's directory, pods played by its kubelet."""
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig", kubelet=True) as emulator:
        yield emulator
