"""The local stack registers the deploy's webhook (issue 26): what ``usher up``'s emulator
is given is deploy/webhook/mutatingwebhook.yaml but for where it calls and whom it trusts."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from usher.local.cluster import webhook_configuration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "webhook" / "mutatingwebhook.yaml"


def _sent(hook: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    return {
        (operation, group, version, plural)
        for rule in hook["rules"]
        for operation in rule["operations"]
        for group in rule["apiGroups"]
        for version in rule["apiVersions"]
        for plural in rule["resources"]
    }


def test_the_local_webhook_configuration_is_the_deploys() -> None:
    (deployed,) = yaml.safe_load(DEPLOY.read_text())["webhooks"]
    (local,) = webhook_configuration("https://127.0.0.1:1/mutate", b"PEM")["webhooks"]
    assert _sent(local) == _sent(deployed)
    for field in ("name", "failurePolicy", "sideEffects", "namespaceSelector", "timeoutSeconds"):
        assert local[field] == deployed[field], field
    assert deployed["clientConfig"]["service"]["path"] == "/mutate"
    assert local["clientConfig"] == {
        "url": "https://127.0.0.1:1/mutate",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
