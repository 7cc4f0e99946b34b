"""Another system reads a real run (issue 31): borrowing, a reclaim that preempts, a hold and
its resume, through the whole system; then every message on the log is checked as an outside
consumer would -- JSON Schema 2020-12 (jsonschema with format checking, and Ajv 2020 in
strict mode through node), CloudEvents (the Python SDK parses each one), one subject grammar
(only decisions under ``<p>.decision.>``) -- and the documented consumers
(docs/examples/subscribe, Python and Node.js) read every decision with zero errors and no
warnings, then resume without reading one twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import nats.errors
import pytest
import yaml
from cloudevents.core.bindings.http import HTTPMessage, from_binary_event
from nats.aio.client import Client
from nats.js import JetStreamContext

from schemas import HoldAction, HoldReply, HoldRequest, RequestId, decode, encode
from schemas.export import DEFAULT_DIR
from tests.conftest import REPO, Infra
from tests.e2e.harness import InProcessStack, kube_api, play, quiesce
from tests.nodejs import node_dir, run_node
from usher.adapters.nats.subjects import Subjects
from usher.core.history import sim
from usher.local.kube_emulator import KubeEmulator

SCENARIO = REPO / "tests" / "scenarios" / "03-walkthrough-reclaim.yaml"
EXAMPLES = REPO / "docs" / "examples" / "subscribe"
VALIDATE = REPO / "tests" / "nodejs" / "validate.mjs"
WITHIN_S = 15.0


async def order(nc: Client, subjects: Subjects, action: HoldAction) -> HoldReply:
    request = HoldRequest(
        request_id=RequestId(f"e2e-{action}"), action=action, target="root/Department-a",
        reason="maintenance",
    )  # fmt: skip
    raw = await nc.request(subjects.ledger_hold("admin"), encode(request), timeout=10)
    return decode(raw.data, HoldReply)


async def raw_log(
    js: JetStreamContext, subjects: Subjects
) -> list[tuple[str, bytes, dict[str, str]]]:
    """(subject, payload, headers) of every message on the log, as it was published."""
    info = await js.stream_info(subjects.stream_name)
    out = []
    for seq in range(int(info.state.first_seq), int(info.state.last_seq) + 1):
        msg = await js.get_msg(subjects.stream_name, seq, direct=True)
        out.append((msg.subject or "", msg.data or b"", dict(msg.headers or {})))
    return out


async def a_run(infra: Infra, subjects: Subjects, js: JetStreamContext, nc: Client,
                migrated_url: str, emu: KubeEmulator) -> None:  # fmt: skip
    """Borrowing and a reclaim (scenario 3 of the walkthrough), then a hold and its resume."""
    config = sim.load_scenario(yaml.safe_load(SCENARIO.read_text()), str(SCENARIO)).config
    stack = InProcessStack(
        nats_url=infra.nats_url, database_url=migrated_url, subjects=subjects,
        kubeconfig=emu.kubeconfig_path, engine=config,
    )  # fmt: skip
    await stack.start()
    try:
        async with kube_api(emu) as api:
            await play(SCENARIO, api, js, subjects)

            async def held() -> bool:
                try:
                    return (await order(nc, subjects, "Hold")).recorded is not None
                except nats.errors.NoRespondersError:
                    return False

            await stack.until(held, "the hold", within_s=WITHIN_S)
            assert (await order(nc, subjects, "Resume")).recorded is not None
            await quiesce(js, subjects)
        assert stack.failures() == []
    finally:
        await stack.stop()


def run_example(kind: str, url: str, prefix: str, node: Path | None) -> dict[str, Any]:
    env = {**os.environ, "NATS_URL": url, "USHER_SYSTEM": f"e2e-{kind}", "USHER_PREFIX": prefix,
           "USHER_SCHEMAS": str(DEFAULT_DIR)}  # fmt: skip
    if kind == "node":
        assert node is not None
        done = run_node(node, EXAMPLES / "consumer.mjs", ["--until-caught-up"], env)
    else:
        argv = [sys.executable, str(EXAMPLES / "consumer.py"), "--until-caught-up"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


async def test_a_borrowing_run_with_a_preemption_and_a_hold_as_another_system_reads_it(
    infra: Infra,
    subjects: Subjects,
    js: JetStreamContext,
    nc: Client,
    migrated_url: str,
    emu: KubeEmulator,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    await a_run(infra, subjects, js, nc, migrated_url, emu)
    log = await raw_log(js, subjects)
    documents = [json.loads(data) for _, data, _ in log]
    types = [doc["event"]["type"] for doc in documents]
    for wanted in ("decision.admitted.v1", "decision.preempted.v1", "hold.placed.v1",
                   "hold.lifted.v1", "quota.applied.v1"):  # fmt: skip
        assert wanted in types, f"the run has no {wanted}: {sorted(set(types))}"

    schema = json.loads((DEFAULT_DIR / "Envelope.json").read_text())
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
    invalid = [(s, e.message) for (s, _, _), doc in zip(log, documents, strict=True)
               for e in validator.iter_errors(doc)]  # fmt: skip
    assert invalid == []

    for (subject, data, headers), doc in zip(log, documents, strict=True):
        event = from_binary_event(HTTPMessage(headers=headers, body=data))
        assert (
            event.get_id() == doc["id"] and event.get_type() == f"io.usher.{doc['event']['type']}"
        )
        assert event.get_source() == f"urn:usher:{subjects.prefix}:{doc['source']}"
        assert event.get_datacontenttype() == "application/json"
        assert event.get_time().isoformat().replace("+00:00", "Z") == doc["time"]
        # One grammar: a decision subject carries a decision, and only decisions are there.
        assert subjects.is_decision(subject) == doc["event"]["type"].startswith("decision.")

    node = node_dir(tmp_path_factory) if shutil.which("node") else None
    if node is not None:
        lines = "".join(json.dumps({"schema": "Envelope", "data": d}) + "\n" for d in documents)
        messages = tmp_path_factory.mktemp("messages") / "log.jsonl"
        messages.write_text(lines)
        done = run_node(node, VALIDATE, [str(DEFAULT_DIR), str(messages)])
        report = json.loads(done.stdout)
        assert (report["errors"], report["warnings"]) == ([], []), report
        assert report["validated"] == len(documents) and done.returncode == 0

    decisions = sorted({t for t in types if t.startswith("decision.")})
    count = sum(t.startswith("decision.") for t in types)
    for kind in ["python", *(["node"] if node else [])]:
        first = run_example(kind, infra.nats_url, subjects.prefix, node)
        assert (first["read"], first["types"], first["invalid"]) == (count, decisions, [])
        assert first.get("warnings", []) == []
        assert run_example(kind, infra.nats_url, subjects.prefix, node)["read"] == 0
