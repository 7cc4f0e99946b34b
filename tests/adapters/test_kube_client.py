"""The Kubernetes client resolves the environment's proxy once, when it is made.

Against the real API emulator over HTTPS: a proxy named in the environment is used (a dead
one makes requests fail as transient connection errors), ``NO_PROXY`` bypasses it, and what
the environment says later no longer changes a client already made (aiohttp used to look the
proxy and ``~/.netrc`` up again in a worker thread for every request).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from usher.adapters.kube import KubeClient, Transient
from usher.adapters.kube.types import Resource
from usher.local.kube_emulator import KubeEmulator

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


def dead_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(kubeconfig_path=tmp_path / "kubeconfig") as emulator:
        yield emulator


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


async def test_a_proxy_in_the_environment_is_used(
    emu: KubeEmulator, no_proxy_env: pytest.MonkeyPatch
) -> None:
    no_proxy_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{dead_port()}")
    async with await KubeClient.from_kubeconfig(emu.kubeconfig_path) as kube:
        with pytest.raises(Transient) as caught:
            await kube.list(NAMESPACES)
    assert caught.value.reason == "ConnectionError"


async def test_the_proxy_is_resolved_once_when_the_client_is_made(
    emu: KubeEmulator, no_proxy_env: pytest.MonkeyPatch
) -> None:
    no_proxy_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{dead_port()}")
    no_proxy_env.setenv("NO_PROXY", "127.0.0.1")
    async with await KubeClient.from_kubeconfig(emu.kubeconfig_path) as kube:
        assert (await kube.list(NAMESPACES)).resource_version  # bypassed: answered directly
        no_proxy_env.delenv("NO_PROXY")  # read per request, this would now go to the dead proxy
        listed = await kube.list(NAMESPACES)
    assert listed.resource_version


async def test_without_a_proxy_requests_go_straight_to_the_server(
    emu: KubeEmulator, no_proxy_env: pytest.MonkeyPatch
) -> None:
    async with await KubeClient.from_kubeconfig(emu.kubeconfig_path) as kube:
        no_proxy_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{dead_port()}")
        listed = await kube.list(NAMESPACES)
    assert listed.resource_version
