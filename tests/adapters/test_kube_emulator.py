"""The Kubernetes API emulator, driven by the real kubernetes_asyncio client (and kubectl)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.builders.manifests import batch_job, container, pod_template
from usher.local.kube_emulator import KubeEmulator, resource
from usher.local.kube_emulator.errors import ApiError
from usher.local.kube_emulator.patches import json_patch, merge_patch
from usher.local.kube_emulator.selectors import Filter, LabelSelector
from usher.local.kube_emulator.server import WATCH_LINES_PER_WRITE
from usher.local.kube_emulator.store import Store
from usher.local.kube_emulator.wire import rfc3339

NS = "team-a"
JOBS = resource("batch", "v1", "jobs")

EQT = ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")
QUEUE = ("scheduling.x-k8s.io", "v1alpha1", "queues")


def job(name: str = "", *, suspend: bool = True, **meta: Any) -> dict[str, Any]:
    manifest = batch_job(
        name or None,
        template=pod_template(container()),
        suspend=suspend,
        parallelism=2,
        completions=4,
    )
    manifest["metadata"].update(meta)
    return manifest


def session(emu: KubeEmulator, headers: dict[str, str]) -> aiohttp.ClientSession:
    """A raw HTTPS client that trusts ``emu``'s certificate and sends ``headers``."""
    connector = aiohttp.TCPConnector(ssl=emu.client_ssl_context())
    return aiohttp.ClientSession(headers=headers, connector=connector)


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator(bookmark_interval=0.2) as emulator:
        yield emulator


@pytest.fixture
async def api(emu: KubeEmulator) -> AsyncIterator[client.ApiClient]:
    api_client = await config.new_client_from_config(config_file=str(emu.kubeconfig_path))
    async with api_client:
        yield api_client


async def collect(
    func: Callable[..., Awaitable[Any]], count: int, *args: Any, **kwargs: Any
) -> list[dict[str, Any]]:
    """The first ``count`` events of a watch (the stream is closed afterwards)."""
    events: list[dict[str, Any]] = []
    async with watch.Watch() as stream:
        async for event in stream.stream(func, *args, **kwargs):
            events.append(event)
            if len(events) == count:
                break
    return events


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in events]


# --------------------------------------------------------------------------- kubeconfig


async def test_a_missing_or_wrong_token_is_401_unauthorized(emu: KubeEmulator) -> None:
    url = f"{emu.url}/apis/batch/v1/namespaces/{NS}/jobs"
    for headers in ({}, {"Authorization": "Bearer guess"}, {"Authorization": emu.token}):
        async with session(emu, headers) as http, http.get(url) as resp:
            assert resp.status == 401, headers
            body = await resp.json()
        assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "message": "Unauthorized",
                        "reason": "Unauthorized", "code": 401}  # fmt: skip
    async with session(emu, emu.auth_headers) as http, http.get(url) as resp:
        assert resp.status == 200
        assert (await resp.json())["kind"] == "JobList"


async def test_each_emulator_has_its_own_token_in_an_owner_only_kubeconfig(
    emu: KubeEmulator,
) -> None:
    async with KubeEmulator() as other:
        assert other.token != emu.token and len(other.token) >= 32
        assert emu.kubeconfig_path.stat().st_mode & 0o777 == 0o600
        # One emulator's token does not open the other.
        async with (
            session(other, emu.auth_headers) as http,
            http.get(f"{other.url}/api/v1/nodes") as resp,
        ):
            assert resp.status == 401


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_with_the_kubeconfig_works_and_without_the_token_is_refused(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    kubectl = [str(shutil.which("kubectl")), "--kubeconfig", str(emu.kubeconfig_path)]
    ok = await asyncio.create_subprocess_exec(
        *kubectl, "get", "nodes", "-o", "name", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, err = await ok.communicate()
    assert ok.returncode == 0, err.decode()
    stolen = tmp_path / "kubeconfig"
    stolen.write_text(emu.kubeconfig_path.read_text().replace(emu.token, "guess"))
    refused = await asyncio.create_subprocess_exec(
        str(shutil.which("kubectl")), "--kubeconfig", str(stolen), "get", "nodes",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await refused.communicate()
    assert refused.returncode != 0
    assert "Unauthorized" in err.decode() or "provide credentials" in err.decode()


async def test_kubeconfig_is_loadable_and_version_is_served(emu: KubeEmulator) -> None:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(emu.kubeconfig_path), client_configuration=configuration
    )
    assert configuration.host == emu.url
    assert configuration.api_key["BearerToken"] == f"Bearer {emu.token}"
    async with client.ApiClient(configuration) as api_client:
        version = await client.VersionApi(api_client).get_code()
    assert (version.major, version.minor) == ("1", "32")


async def test_discovery_lists_groups_and_resources(api: client.ApiClient) -> None:
    groups = await client.ApisApi(api).get_api_versions()
    by_name = {g.name: [v.version for v in g.versions] for g in groups.groups}
    assert by_name["kubeflow.org"] == ["v1", "v2beta1"]
    assert by_name["scheduling.sigs.k8s.io"] == ["v1beta1"]
    assert by_name["coordination.k8s.io"] == ["v1"]
    assert by_name["admissionregistration.k8s.io"] == ["v1"]
    batch = await client.BatchV1Api(api).get_api_resources()
    assert [(r.name, r.namespaced) for r in batch.resources] == [
        ("jobs", True),
        ("jobs/status", True),
    ]
    core = await client.CoreV1Api(api).get_api_resources()
    namespaced = {r.name: r.namespaced for r in core.resources if "/" not in r.name}
    assert namespaced == {
        "namespaces": False,
        "nodes": False,
        "pods": True,
        "events": True,
        "configmaps": True,
        "limitranges": True,
    }


async def test_limit_ranges_are_created_listed_and_read(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = {
        "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "500m"}}]},
    }
    created = await core.create_namespaced_limit_range(NS, body)
    assert created.metadata.namespace == NS and created.metadata.uid
    listed = await core.list_namespaced_limit_range(NS)
    assert [i.metadata.name for i in listed.items] == ["defaults"]
    read = await core.read_namespaced_limit_range("defaults", NS)
    assert read.spec.limits[0].default_request == {"cpu": "500m"}
    assert (await core.list_limit_range_for_all_namespaces()).items[0].metadata.name == "defaults"


# --------------------------------------------------------------------------- verbs


async def test_job_create_get_list_delete_and_generate_name(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job(NS, job("train"))
    assert created.metadata.generation == 1
    assert created.metadata.namespace == NS
    assert len(created.metadata.uid) == 36
    assert created.spec.backoff_limit == 6  # server-side defaulting
    generated = await batch.create_namespaced_job(NS, job(generateName="sweep-"))
    suffix = generated.metadata.name.removeprefix("sweep-")
    assert len(suffix) == 5
    assert suffix.isalnum() and suffix.islower()
    assert int(generated.metadata.resource_version) == int(created.metadata.resource_version) + 1

    got = await batch.read_namespaced_job("train", NS)
    assert got.metadata.uid == created.metadata.uid
    assert got.metadata.creation_timestamp == created.metadata.creation_timestamp
    listed = await batch.list_namespaced_job(NS)
    assert [j.metadata.name for j in listed.items] == sorted(["train", generated.metadata.name])
    assert listed.metadata.resource_version == generated.metadata.resource_version
    everywhere = await batch.list_job_for_all_namespaces()
    assert len(everywhere.items) == 2
    assert (await batch.list_namespaced_job("other")).items == []

    await batch.delete_namespaced_job("train", NS)
    with pytest.raises(ApiException) as missing:
        await batch.read_namespaced_job("train", NS)
    assert missing.value.status == 404
    assert [j.metadata.name for j in (await batch.list_namespaced_job(NS)).items] == [
        generated.metadata.name
    ]


async def test_errors_are_status_objects(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    with pytest.raises(ApiException) as missing:
        await batch.read_namespaced_job("nope", NS)
    body = json.loads(missing.value.body)
    assert (missing.value.status, body["kind"], body["reason"]) == (404, "Status", "NotFound")
    assert body["message"] == 'jobs.batch "nope" not found'
    assert body["details"] == {"name": "nope", "group": "batch", "kind": "jobs"}

    await batch.create_namespaced_job(NS, job("dup"))
    with pytest.raises(ApiException) as exists:
        await batch.create_namespaced_job(NS, job("dup"))
    assert exists.value.status == 409
    assert json.loads(exists.value.body)["reason"] == "AlreadyExists"

    with pytest.raises(ApiException) as bad_name:
        await batch.create_namespaced_job(NS, job("Not_A_Name"))
    assert bad_name.value.status == 422
    assert json.loads(bad_name.value.body)["details"]["causes"][0]["field"] == "metadata.name"

    with pytest.raises(ApiException) as nameless:
        await batch.create_namespaced_job(NS, job())
    assert nameless.value.status == 422
    assert json.loads(nameless.value.body)["reason"] == "Invalid"

    wrong_kind = {**job("x"), "kind": "Pod"}
    with pytest.raises(ApiException) as mismatch:
        await batch.create_namespaced_job(NS, wrong_kind)
    assert mismatch.value.status == 400
    assert json.loads(mismatch.value.body)["reason"] == "BadRequest"


async def test_unknown_route_and_method_errors(emu: KubeEmulator) -> None:
    async with session(emu, emu.auth_headers) as http:
        async with http.get(f"{emu.url}/apis/batch/v1/cronjobs") as resp:
            assert resp.status == 404
            assert (await resp.json())["reason"] == "NotFound"
        async with http.post(f"{emu.url}/apis/batch/v1/namespaces/a/jobs/x", json={}) as resp:
            assert resp.status == 405
            assert (await resp.json())["reason"] == "MethodNotAllowed"
        # A patch type no API server knows (server-side apply, apply-patch+yaml, is served).
        headers = {"Content-Type": "application/x-unknown-patch+json"}
        async with http.patch(
            f"{emu.url}/apis/batch/v1/namespaces/a/jobs/x", data="{}", headers=headers
        ) as resp:
            assert resp.status == 415


async def test_strategic_merge_patch_unsuspends_and_bumps_generation(
    api: client.ApiClient,
) -> None:
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job(NS, job("train"))
    patched = await batch.patch_namespaced_job("train", NS, {"spec": {"suspend": False}})
    assert patched.spec.suspend is False
    assert patched.spec.parallelism == 2
    assert patched.metadata.generation == 2
    assert int(patched.metadata.resource_version) == int(created.metadata.resource_version) + 1
    # a label change is not a spec change; a patch that changes nothing is not a write
    labelled = await batch.patch_namespaced_job("train", NS, {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.generation == 2
    same = await batch.patch_namespaced_job("train", NS, {"spec": {"suspend": False}})
    assert same.metadata.resource_version == labelled.metadata.resource_version


async def test_json_patch_applies_and_failed_test_is_422(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(NS, job("train"))
    ops = [
        {"op": "test", "path": "/spec/suspend", "value": True},
        {"op": "replace", "path": "/spec/suspend", "value": False},
        {"op": "add", "path": "/metadata/labels", "value": {"zone": "z1"}},
    ]
    patched = await batch.patch_namespaced_job("train", NS, ops)
    assert (patched.spec.suspend, patched.metadata.labels) == (False, {"zone": "z1"})
    with pytest.raises(ApiException) as failed:
        await batch.patch_namespaced_job(
            "train",
            NS,
            [
                {"op": "test", "path": "/spec/suspend", "value": True},
                {"op": "replace", "path": "/spec/suspend", "value": True},
            ],
        )
    assert failed.value.status == 422
    assert (await batch.read_namespaced_job("train", NS)).spec.suspend is False


async def test_patch_with_stale_resource_version_conflicts(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job(NS, job("train"))
    await batch.patch_namespaced_job("train", NS, {"spec": {"suspend": False}})
    stale = {"metadata": {"resourceVersion": created.metadata.resource_version}}
    with pytest.raises(ApiException) as conflict:
        await batch.patch_namespaced_job("train", NS, {**stale, "spec": {"suspend": True}})
    assert conflict.value.status == 409
    body = json.loads(conflict.value.body)
    # What kube-apiserver answers (an optimistic-lock failure of the patched update).
    assert (body["reason"], body["code"], body["details"]) == (
        "Conflict",
        409,
        {"name": "train", "group": "batch", "kind": "jobs"},
    )
    assert body["message"] == (
        'Operation cannot be fulfilled on jobs.batch "train": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert (await batch.read_namespaced_job("train", NS)).spec.suspend is False  # not applied


async def test_a_patch_guarded_by_a_deleted_incarnations_version_conflicts(
    api: client.ApiClient,
) -> None:
    """A copy of a job kept from its watch: the job was deleted and created again under the
    same name since. A merge patch carrying the old object's resourceVersion must not touch
    the new one (what lets the watcher patch from its copy without reading first)."""
    batch = client.BatchV1Api(api)
    old = await batch.create_namespaced_job(NS, job("train"))
    await batch.delete_namespaced_job("train", NS)
    new = await batch.create_namespaced_job(NS, job("train"))
    stale = {"metadata": {"resourceVersion": old.metadata.resource_version}}
    with pytest.raises(ApiException) as conflict:
        await batch.patch_namespaced_job("train", NS, {**stale, "spec": {"suspend": False}})
    assert conflict.value.status == 409
    now = await batch.read_namespaced_job("train", NS)
    assert (now.spec.suspend, now.metadata.resource_version) == (
        True,
        new.metadata.resource_version,
    )


async def test_stale_put_is_a_conflict(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    first = await batch.create_namespaced_job(NS, job("train"))
    first.spec.suspend = False
    updated = await batch.replace_namespaced_job("train", NS, first)
    assert updated.spec.suspend is False
    assert updated.metadata.generation == 2
    first.spec.parallelism = 9  # still carries the old resourceVersion
    with pytest.raises(ApiException) as conflict:
        await batch.replace_namespaced_job("train", NS, first)
    assert conflict.value.status == 409
    body = json.loads(conflict.value.body)
    assert body["message"].startswith('Operation cannot be fulfilled on jobs.batch "train"')
    assert (await batch.read_namespaced_job("train", NS)).spec.parallelism == 2


async def test_job_status_subresource_only_changes_status(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job(NS, {**job("train"), "status": {"active": 5}})
    assert created.status is None or created.status.active is None  # create drops status
    patched = await batch.patch_namespaced_job_status(
        "train", NS, {"spec": {"suspend": False}, "status": {"active": 2}}
    )
    assert (patched.status.active, patched.spec.suspend) == (2, True)
    assert patched.metadata.generation == 1
    main = await batch.patch_namespaced_job("train", NS, {"status": {"active": 7}})
    assert main.status.active == 2  # the main resource ignores status


async def test_custom_objects_patch_content_types_and_status(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    group, version, plural = EQT
    tree = {
        "apiVersion": f"{group}/{version}",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "tree"},
        "spec": {"root": {"name": "root", "max": {"cpu": "10"}}},
    }
    created = await custom.create_namespaced_custom_object(
        group, version, "kube-system", plural, tree
    )
    assert created["kind"] == "ElasticQuotaTree"
    # kubernetes_asyncio sends a dict body as application/json-patch+json unless told otherwise:
    # a real server rejects that, so must the emulator.
    with pytest.raises(ApiException) as wrong:
        await custom.patch_namespaced_custom_object(
            group,
            version,
            "kube-system",
            plural,
            "tree",
            {"spec": {"root": {"max": {"cpu": "20"}}}},
        )
    assert wrong.value.status == 400
    merged = await custom.patch_namespaced_custom_object(
        group,
        version,
        "kube-system",
        plural,
        "tree",
        {"spec": {"root": {"max": {"cpu": "20"}}}},
        _content_type="application/merge-patch+json",
    )
    assert merged["spec"]["root"] == {"name": "root", "max": {"cpu": "20"}}
    assert merged["metadata"]["generation"] == 2

    qgroup, qversion, qplural = QUEUE
    queue = {
        "apiVersion": f"{qgroup}/{qversion}",
        "kind": "Queue",
        "metadata": {"name": "q1"},
        "spec": {"priority": 1},
    }
    await custom.create_namespaced_custom_object(qgroup, qversion, "kube-queue", qplural, queue)
    status = await custom.patch_namespaced_custom_object_status(
        qgroup,
        qversion,
        "kube-queue",
        qplural,
        "q1",
        {"spec": {"priority": 99}, "status": {"pending": 3}},
        _content_type="application/merge-patch+json",
    )
    assert (status["spec"], status["status"]) == ({"priority": 1}, {"pending": 3})
    assert status["metadata"]["generation"] == 1
    # custom resources refuse an unconditional PUT, as a real server does
    no_rv = {**queue, "spec": {"priority": 2}}
    with pytest.raises(ApiException) as unconditional:
        await custom.replace_namespaced_custom_object(
            qgroup, qversion, "kube-queue", qplural, "q1", no_rv
        )
    assert unconditional.value.status == 422


async def test_cluster_scoped_priority_class(api: client.ApiClient) -> None:
    scheduling = client.SchedulingV1Api(api)
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    }
    created = await scheduling.create_priority_class(body)
    assert created.value == 1000
    assert created.metadata.namespace is None
    listed = await scheduling.list_priority_class()
    assert [(p.metadata.name, p.value) for p in listed.items] == [("high", 1000)]


async def test_label_selector_on_list_and_watch(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(NS, job("a", labels={"team": "ml", "tier": "gold"}))
    await batch.create_namespaced_job(NS, job("b", labels={"team": "ml"}))
    await batch.create_namespaced_job(NS, job("c", labels={"team": "etl"}))

    async def names(selector: str) -> list[str]:
        listed = await batch.list_namespaced_job(NS, label_selector=selector)
        return [j.metadata.name for j in listed.items]

    assert await names("team=ml") == ["a", "b"]
    assert await names("team!=ml") == ["c"]
    assert await names("team in (etl, ml),tier") == ["a"]
    assert await names("!tier") == ["b", "c"]
    assert await names("team notin (ml)") == ["c"]
    assert [
        j.metadata.name
        for j in (await batch.list_namespaced_job(NS, field_selector="metadata.name=b")).items
    ] == ["b"]
    with pytest.raises(ApiException) as bad:
        await batch.list_namespaced_job(NS, label_selector="team in ml")
    assert bad.value.status == 400

    events = await collect(
        batch.list_namespaced_job, 2, NS, label_selector="team=ml", timeout_seconds=5
    )
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b")]


async def test_pagination_with_limit_and_continue(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for i in range(5):
        await core.create_namespaced_config_map(
            NS, {"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}}
        )
    first = await core.list_namespaced_config_map(NS, limit=2)
    assert [c.metadata.name for c in first.items] == ["cm-0", "cm-1"]
    assert first.metadata.remaining_item_count == 3
    await core.delete_namespaced_config_map("cm-4", NS)  # later pages stay consistent
    second = await core.list_namespaced_config_map(NS, limit=2, _continue=first.metadata._continue)
    assert [c.metadata.name for c in second.items] == ["cm-2", "cm-3"]
    assert second.metadata.resource_version == first.metadata.resource_version
    third = await core.list_namespaced_config_map(NS, limit=2, _continue=second.metadata._continue)
    assert [c.metadata.name for c in third.items] == ["cm-4"]
    assert third.metadata._continue is None
    with pytest.raises(ApiException) as used:
        await core.list_namespaced_config_map(NS, limit=2, _continue=first.metadata._continue)
    assert used.value.status == 410


async def test_exact_list_rebuilds_history_and_410_when_compacted(
    emu: KubeEmulator, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    first = await core.create_namespaced_config_map(NS, {"metadata": {"name": "one"}})
    await core.create_namespaced_config_map(NS, {"metadata": {"name": "two"}})
    await core.delete_namespaced_config_map("one", NS)
    then = await core.list_namespaced_config_map(
        NS, resource_version=first.metadata.resource_version, resource_version_match="Exact"
    )
    assert [c.metadata.name for c in then.items] == ["one"]
    emu.store.compact(keep_last=1)
    with pytest.raises(ApiException) as gone:
        await core.list_namespaced_config_map(
            NS, resource_version=first.metadata.resource_version, resource_version_match="Exact"
        )
    assert gone.value.status == 410
    assert json.loads(gone.value.body)["reason"] == "Expired"


# --------------------------------------------------------------------------- watch


async def test_watch_sends_added_modified_deleted_in_order(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    start = (await batch.list_namespaced_job(NS)).metadata.resource_version
    watcher = asyncio.create_task(
        collect(batch.list_namespaced_job, 3, NS, resource_version=start, timeout_seconds=30)
    )
    created = await batch.create_namespaced_job(NS, job("train"))
    await batch.patch_namespaced_job("train", NS, {"spec": {"suspend": False}})
    await batch.delete_namespaced_job("train", NS)
    # Generous: the order is what is tested, and a busy machine can be slow to deliver.
    events = await asyncio.wait_for(watcher, 30)
    assert summary(events) == [("ADDED", "train"), ("MODIFIED", "train"), ("DELETED", "train")]
    rvs = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    first_rv = int(created.metadata.resource_version)
    assert rvs == [first_rv, first_rv + 1, first_rv + 2]
    assert events[1]["object"].spec.suspend is False
    assert events[0]["raw_object"]["kind"] == "Job"


async def test_a_burst_of_writes_reaches_a_watch_whole_and_in_order(
    emu: KubeEmulator, api: client.ApiClient
) -> None:
    """Writes made while the watch's sender is busy are queued and sent together (several
    writes' worth, past ``WATCH_LINES_PER_WRITE``): each still arrives, once, in order."""
    batch = client.BatchV1Api(api)
    start = (await batch.list_namespaced_job(NS)).metadata.resource_version
    count = WATCH_LINES_PER_WRITE + 44
    watcher = asyncio.create_task(
        collect(batch.list_namespaced_job, count + 1, NS, resource_version=start,
                timeout_seconds=60)
    )  # fmt: skip
    await batch.create_namespaced_job(NS, job("first"))  # the watch is streaming from here
    await asyncio.sleep(0.2)
    jobs = resource("batch", "v1", "jobs")
    for index in range(count):  # in one go: no await, so all are queued before any is sent
        emu.store.create(jobs, NS, job(f"j{index:04d}"))
    events = await asyncio.wait_for(watcher, 60)
    assert summary(events) == [("ADDED", "first")] + [
        ("ADDED", f"j{index:04d}") for index in range(count)
    ]
    rvs = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)


async def test_watch_without_resource_version_starts_with_current_state(
    api: client.ApiClient,
) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(NS, job("a"))
    await batch.create_namespaced_job("elsewhere", job("b"))
    events = await collect(batch.list_job_for_all_namespaces, 2, timeout_seconds=5)
    assert summary(events) == [("ADDED", "b"), ("ADDED", "a")]  # key order: namespace, name


async def test_watch_resumes_after_a_resource_version(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(NS, job("old"))
    mark = await batch.create_namespaced_job(NS, job("mark"))
    await batch.create_namespaced_job(NS, job("new"))
    await batch.patch_namespaced_job("old", NS, {"spec": {"suspend": False}})
    events = await collect(
        batch.list_namespaced_job, 2, NS, resource_version=mark.metadata.resource_version,
        timeout_seconds=5,
    )  # fmt: skip
    assert summary(events) == [("ADDED", "new"), ("MODIFIED", "old")]


async def test_watch_from_compacted_version_raises_410(
    emu: KubeEmulator, api: client.ApiClient
) -> None:
    batch = client.BatchV1Api(api)
    early = await batch.create_namespaced_job(NS, job("a"))
    for name in ("b", "c", "d"):
        await batch.create_namespaced_job(NS, job(name))
    emu.store.compact(keep_last=2)
    with pytest.raises(ApiException) as gone:
        await collect(
            batch.list_namespaced_job,
            1,
            NS,
            resource_version=early.metadata.resource_version,
            timeout_seconds=2,
        )
    assert gone.value.status == 410
    expected = (
        f"too old resource version: {early.metadata.resource_version} ({emu.store.compacted_rv})"
    )
    assert gone.value.reason == f"Expired: {expected}"

    async with session(emu, emu.auth_headers) as http:
        url = f"{emu.url}/apis/batch/v1/namespaces/{NS}/jobs"
        params = {"watch": "1", "resourceVersion": early.metadata.resource_version}
        async with http.get(url, params=params) as resp:
            assert resp.status == 200
            assert resp.headers["Transfer-Encoding"] == "chunked"
            lines = (await resp.read()).decode().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"


async def test_watch_sends_bookmarks_when_allowed(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job(NS, job("a"))
    events = await collect(
        batch.list_namespaced_job,
        2,
        NS,
        resource_version=created.metadata.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    )
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    assert events[0]["raw_object"] == {
        "kind": "Job",
        "apiVersion": "batch/v1",
        "metadata": {"resourceVersion": created.metadata.resource_version},
    }


async def test_watch_ends_after_timeout_seconds(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    loop = asyncio.get_running_loop()
    began = loop.time()
    events = await collect(batch.list_namespaced_job, 10, NS, timeout_seconds=1)
    assert events == []
    assert 0.9 <= loop.time() - began < 3


async def test_watch_reports_objects_leaving_a_selector_as_deleted(
    api: client.ApiClient,
) -> None:
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job(NS, job("a", labels={"team": "ml"}))
    watcher = asyncio.create_task(
        collect(
            batch.list_namespaced_job,
            2,
            NS,
            label_selector="team=ml",
            resource_version=created.metadata.resource_version,
            timeout_seconds=5,
        )
    )
    await batch.patch_namespaced_job("a", NS, {"metadata": {"labels": {"team": "etl"}}})
    await batch.patch_namespaced_job("a", NS, {"metadata": {"labels": {"team": "ml"}}})
    events = await asyncio.wait_for(watcher, 5)
    assert summary(events) == [("DELETED", "a"), ("ADDED", "a")]


# --------------------------------------------------------------------------- fake kubelet


async def test_kubelet_runs_an_unsuspended_job_to_completion() -> None:
    async with KubeEmulator(kubelet=True) as emu:
        api_client = await config.new_client_from_config(config_file=str(emu.kubeconfig_path))
        async with api_client:
            batch = client.BatchV1Api(api_client)
            body = job("train", annotations={"usher.io/sim-duration": "0.2"})
            created = await batch.create_namespaced_job(NS, body)
            watcher = asyncio.create_task(
                collect(
                    batch.list_namespaced_job,
                    4,
                    NS,
                    resource_version=created.metadata.resource_version,
                    timeout_seconds=5,
                )
            )
            await asyncio.sleep(0.3)  # suspended: the kubelet only records the condition
            await batch.patch_namespaced_job("train", NS, {"spec": {"suspend": False}})
            events = await asyncio.wait_for(watcher, 5)
    statuses = [e["raw_object"].get("status", {}) for e in events]
    assert [c["type"] for c in statuses[0]["conditions"]] == ["Suspended"]
    assert statuses[0]["conditions"][0]["reason"] == "JobSuspended"
    assert events[1]["raw_object"]["spec"]["suspend"] is False
    assert statuses[2]["active"] == 2
    assert statuses[2]["conditions"][0]["reason"] == "JobResumed"
    done = statuses[3]
    assert "active" not in done
    assert done["succeeded"] == 4
    assert [(c["type"], c["status"]) for c in done["conditions"]] == [
        ("Suspended", "False"),
        ("SuccessCriteriaMet", "True"),
        ("Complete", "True"),
    ]
    assert done["completionTime"] >= done["startTime"]


async def test_kubelet_stops_a_resuspended_job_and_restarts_its_timer() -> None:
    async with KubeEmulator(kubelet=True, kubelet_speed=2.0) as emu:
        store = emu.store
        body = job("train", suspend=False, annotations={"usher.io/sim-duration": "0.4"})
        body["metadata"]["namespace"] = NS
        store.create(JOBS, NS, body)
        await asyncio.sleep(0.05)
        running = store.get(JOBS, NS, "train")["status"]
        assert running["active"] == 2
        store.patch(JOBS, NS, "train", "merge", {"spec": {"suspend": True}})
        await asyncio.sleep(0.3)  # past the 0.2 s the job would have needed
        stopped = store.get(JOBS, NS, "train")["status"]
        assert "active" not in stopped
        assert [(c["type"], c["status"]) for c in stopped["conditions"]] == [("Suspended", "True")]
        store.patch(JOBS, NS, "train", "merge", {"spec": {"suspend": False}})
        await asyncio.sleep(0.05)
        assert store.get(JOBS, NS, "train")["status"]["active"] == 2
        await asyncio.sleep(0.3)
        final = store.get(JOBS, NS, "train")["status"]
    assert final["succeeded"] == 4
    assert ("Complete", "True") in [(c["type"], c["status"]) for c in final["conditions"]]


async def test_kubelet_drives_kubeflow_ray_and_jobset_kinds() -> None:
    pytorch = resource("kubeflow.org", "v1", "pytorchjobs")
    ray = resource("ray.io", "v1", "rayjobs")
    jobset = resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
    sim = {"usher.io/sim-duration": "0.1"}
    async with KubeEmulator(kubelet=True) as emu:
        store = emu.store
        store.create(
            pytorch,
            NS,
            {
                "metadata": {"name": "pt", "annotations": sim},
                "spec": {
                    "runPolicy": {"suspend": False},
                    "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}},
                },
            },
        )
        store.create(ray, NS, {"metadata": {"name": "rj"}, "spec": {"suspend": False}})
        store.create(
            jobset,
            NS,
            {
                "metadata": {"name": "js", "annotations": {**sim, "usher.io/sim-result": "Failed"}},
                "spec": {"suspend": False, "replicatedJobs": [{"name": "w", "replicas": 2}]},
            },
        )
        await asyncio.sleep(0.05)
        pt_running = store.get(pytorch, NS, "pt")["status"]
        assert pt_running["replicaStatuses"] == {"Master": {"active": 1}, "Worker": {"active": 3}}
        assert ("Running", "True") in [(c["type"], c["status"]) for c in pt_running["conditions"]]
        await asyncio.sleep(0.25)
        pt = store.get(pytorch, NS, "pt")["status"]
        rj = store.get(ray, NS, "rj")["status"]
        js = store.get(jobset, NS, "js")["status"]
    assert [(c["type"], c["status"]) for c in pt["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]
    assert (rj["jobDeploymentStatus"], rj["jobStatus"]) == ("Running", "RUNNING")  # no duration
    assert js["terminalState"] == "Failed"
    assert js["replicatedJobsStatus"][0]["failed"] == 2


async def test_emulator_stores_and_drives_spark_applications_and_argo_workflows() -> None:
    spark = resource("sparkoperator.k8s.io", "v1beta2", "sparkapplications")
    workflows = resource("argoproj.io", "v1alpha1", "workflows")
    sim = {"usher.io/sim-duration": "0.1"}
    async with KubeEmulator(kubelet=True) as emu:
        store = emu.store
        app = {"metadata": {"name": "pi", "annotations": sim},
               "spec": {"suspend": False, "executor": {"instances": 2}}}  # fmt: skip
        stored = store.create(spark, NS, app)
        assert (stored["apiVersion"], stored["kind"]) == (
            "sparkoperator.k8s.io/v1beta2",
            "SparkApplication",
        )
        store.create(workflows, NS, {"metadata": {"name": "held"},
                                     "spec": {"suspend": True, "parallelism": 2}})  # fmt: skip
        await asyncio.sleep(0.05)
        running = store.get(spark, NS, "pi")["status"]
        assert running["applicationState"] == {"state": "RUNNING"}
        assert running["executorState"] == {"pi-exec-1": "RUNNING", "pi-exec-2": "RUNNING"}
        held = store.get(workflows, NS, "held")["status"]
        assert (held["phase"], held["nodes"]) == ("Running", {})
        store.patch(workflows, NS, "held", "merge", {"spec": {"suspend": False}})
        await asyncio.sleep(0.05)
        nodes = store.get(workflows, NS, "held")["status"]["nodes"]
        assert sorted((n["type"], n["phase"]) for n in nodes.values()) == [("Pod", "Running")] * 2
        await asyncio.sleep(0.2)
        done = store.get(spark, NS, "pi")["status"]
    assert done["applicationState"] == {"state": "COMPLETED"}
    assert set(done["executorState"].values()) == {"COMPLETED"}


# --------------------------------------------------------------------------- pure store


def test_label_selector_semantics() -> None:
    obj = {"metadata": {"labels": {"team": "ml", "tier": "gold"}}}
    assert LabelSelector.parse("team=ml,tier in (gold, silver)").matches(obj)
    assert LabelSelector.parse("team==ml").matches(obj)
    assert not LabelSelector.parse("team!=ml").matches(obj)
    assert LabelSelector.parse("zone!=z1").matches(obj)  # absent keys match !=
    assert LabelSelector.parse("zone notin (z1)").matches(obj)
    assert not LabelSelector.parse("zone").matches(obj)
    assert LabelSelector.parse("").matches(obj)
    with pytest.raises(ApiError):
        LabelSelector.parse("team in ml")


def test_merge_and_json_patch_rfc_semantics() -> None:
    doc = {"a": {"b": 1, "c": [1, 2]}, "d": "x"}
    assert merge_patch(doc, {"a": {"b": None, "e": {"f": None}}, "d": [3]}) == {
        "a": {"c": [1, 2], "e": {}},
        "d": [3],
    }
    patched = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/c/-", "value": 3},
            {"op": "copy", "from": "/a/c", "path": "/copy"},
            {"op": "move", "from": "/d", "path": "/a/moved"},
            {"op": "remove", "path": "/a/c/0"},
            {"op": "add", "path": "/k~1x", "value": {"~": 1}},
            {"op": "test", "path": "/k~1x/~0", "value": 1},
        ],
    )
    assert patched == {
        "a": {"b": 1, "c": [2, 3], "moved": "x"},
        "copy": [1, 2, 3],
        "k/x": {"~": 1},
    }
    assert doc == {"a": {"b": 1, "c": [1, 2]}, "d": "x"}  # the input is never changed


def test_store_history_is_bounded_and_compacts() -> None:
    store = Store(history_size=3)
    cms = resource("", "v1", "configmaps")
    for i in range(5):
        store.create(cms, "ns", {"metadata": {"name": f"c{i}"}})
    assert store.resource_version == 5
    assert store.compacted_rv == 2
    assert [e.rv for e in store.watch_backlog(cms, "2")] == [3, 4, 5]
    with pytest.raises(ApiError) as gone:
        store.watch_backlog(cms, "1")
    assert gone.value.code == 410
    page = store.list_page(cms, Filter(namespace="ns"))
    assert [o["metadata"]["name"] for o in page.items] == [f"c{i}" for i in range(5)]


# --------------------------------------------------------------------------- processes


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
async def test_kubectl_gets_jobs_across_namespaces(
    emu: KubeEmulator, api: client.ApiClient, tmp_path: Path
) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(NS, job("train"))
    await batch.create_namespaced_job("team-b", job("etl"))
    base = ["kubectl", "--kubeconfig", str(emu.kubeconfig_path), "--cache-dir", str(tmp_path)]
    env = {**os.environ, "HOME": str(tmp_path)}

    async def kubectl(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            *base, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        out, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 0, err.decode()
        return out.decode()

    table = (await kubectl("get", "jobs", "-A")).splitlines()
    assert table[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [row.split()[:2] for row in table[1:]] == [[NS, "train"], ["team-b", "etl"]]
    as_json = json.loads(await kubectl("get", "jobs", "-A", "-o", "json"))
    assert [i["metadata"]["name"] for i in as_json["items"]] == ["train", "etl"]


async def test_module_runs_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "usher.local.kube_emulator",
        "--port",
        "0",
        "--kubeconfig",
        str(kubeconfig),
        "--kubelet",
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        url = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode().strip()
        assert url.startswith("https://127.0.0.1:")
        assert f"server: {url}" in kubeconfig.read_text()
        # /version is public (as on a real server); the certificate is checked elsewhere.
        async with aiohttp.ClientSession() as http, http.get(f"{url}/version", ssl=False) as resp:
            assert (await resp.json())["major"] == "1"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 10)
    assert code == 0


@given(
    st.datetimes(
        min_value=datetime(1971, 1, 2), max_value=datetime(2200, 1, 1), timezones=st.timezones()
    )
)
def test_times_are_written_to_the_second_in_utc_whatever_was_asked_before(
    moment: datetime,
) -> None:
    """``rfc3339`` remembers the last second's text; any moment still gets its own."""
    assert rfc3339(moment) == moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
