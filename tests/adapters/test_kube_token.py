"""The Kubernetes client re-reads a kubeconfig's ``tokenFile``: a bound service-account token
expires and kubelet rewrites the file, so a client that read it once gets 401 for ever after.

The API endpoint here is a real HTTP server that, as kube-apiserver does for bound tokens,
accepts only the token currently valid and answers 401 to an expired one (the API emulator
does not authenticate). The token file is replaced as kubelet does (write, then rename).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from usher.adapters.kube import KubeClient, KubeError
from usher.adapters.kube.types import Resource

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


class ApiServer:
    """Answers the namespace list to the valid bearer token only; records what it was sent."""

    def __init__(self) -> None:
        self.valid = ""
        self.sent: list[str] = []

    async def namespaces(self, request: web.Request) -> web.Response:
        sent = request.headers.get("Authorization", "")
        self.sent.append(sent)
        if sent != f"Bearer {self.valid}":
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "reason": "Unauthorized", "code": 401, "message": "Unauthorized"}  # fmt: skip
            return web.json_response(status, status=401)
        return web.json_response({"kind": "NamespaceList", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": "1"}, "items": []})  # fmt: skip


@pytest.fixture
async def server() -> AsyncIterator[tuple[ApiServer, str]]:
    api = ApiServer()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces", api.namespaces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield api, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def rotate(token_file: Path, token: str) -> None:
    new = token_file.with_suffix(".new")
    new.write_text(token)
    os.replace(new, token_file)


def kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {tokenFile: token}}]\n"  # relative to the kubeconfig
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path


async def test_a_rotated_token_is_read_again(server: tuple[ApiServer, str], tmp_path: Path) -> None:
    api, url = server
    rotate(tmp_path / "token", "first")
    api.valid = "first"
    async with await KubeClient.from_kubeconfig(
        kubeconfig(tmp_path, url), token_refresh_s=0
    ) as kube:
        await kube.list(NAMESPACES)
        rotate(tmp_path / "token", "second")
        api.valid = "second"  # the first has expired
        listed = await kube.list(NAMESPACES)
    assert listed.resource_version == "1"
    assert api.sent == ["Bearer first", "Bearer second"]


async def test_a_token_is_kept_until_it_is_old_enough(
    server: tuple[ApiServer, str], tmp_path: Path
) -> None:
    """Not read at every request: within ``token_refresh_s`` the token in use is sent, and a
    request refused 401 is an error the caller sees (nothing retried on its own)."""
    api, url = server
    rotate(tmp_path / "token", "first")
    api.valid = "first"
    async with await KubeClient.from_kubeconfig(
        kubeconfig(tmp_path, url), token_refresh_s=3600
    ) as kube:
        await kube.list(NAMESPACES)
        rotate(tmp_path / "token", "second")
        api.valid = "second"
        with pytest.raises(KubeError):
            await kube.list(NAMESPACES)
    assert api.sent == ["Bearer first", "Bearer first"]
