"""The emulator refuses labels and annotations a real API server cannot decode (issue 26).

``metadata.labels`` and ``metadata.annotations`` are ``map[string]string``: a real server
refuses a number, a boolean, a list or a mapping in them while decoding the body (400
BadRequest, "cannot unmarshal number into Go struct field ObjectMeta.metadata.annotations of
type string"), on create, update and patch alike, and refuses annotations of more than 256 KiB
in all (422 Invalid). Before, the emulator stored them, so a hostile tenant's ``5`` reached the
watcher as an int, something no cluster can do.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tests.builders.manifests import batch_job, container, elastic_quota_tree, pod_template
from usher.local.kube_emulator import KubeEmulator

NS = "team-a"
EQT = ("scheduling.sigs.k8s.io", "v1beta1", "kube-system", "elasticquotatrees")


@pytest.fixture
async def api() -> AsyncIterator[client.ApiClient]:
    async with KubeEmulator() as emu:
        api_client = await config.new_client_from_config(config_file=str(emu.kubeconfig_path))
        async with api_client:
            yield api_client


def _job(name: str, **meta: Any) -> dict[str, Any]:
    manifest = batch_job(name, template=pod_template(container()))
    manifest["metadata"].update(meta)
    return manifest


def _refusal(caught: pytest.ExceptionInfo[ApiException]) -> tuple[int, str, str]:
    body = json.loads(caught.value.body)
    return int(caught.value.status), str(body["reason"]), str(body["message"])


@pytest.mark.parametrize(
    ("field", "value", "got"),
    [
        ("annotations", {"usher.io/retry-limit": 5}, "number"),
        ("annotations", {"usher.io/oom-memory-factor": 1.5}, "number"),
        ("annotations", {"usher.io/backfill": True}, "bool"),
        ("annotations", {"usher.io/zones": ["a"]}, "array"),
        ("annotations", {"usher.io/zones": {"a": "5"}}, "object"),
        ("labels", {"usher.io/zone": 7}, "number"),
    ],
)
async def test_a_value_that_is_not_a_string_is_refused_on_create(
    api: client.ApiClient, field: str, value: dict[str, object], got: str
) -> None:
    batch = client.BatchV1Api(api)
    with pytest.raises(ApiException) as refused:
        await batch.create_namespaced_job(NS, _job("j", **{field: value}))
    wanted = (
        400,
        "BadRequest",
        f'Job in version "v1" cannot be handled as a Job: json: cannot unmarshal {got} '
        f"into Go struct field ObjectMeta.metadata.{field} of type string",
    )
    assert _refusal(refused) == wanted
    assert (await batch.list_namespaced_job(NS)).items == []


async def test_labels_that_are_not_a_map_are_refused(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as refused:
        await client.BatchV1Api(api).create_namespaced_job(NS, _job("j", labels="a=b"))
    status, reason, message = _refusal(refused)
    assert (status, reason) == (400, "BadRequest")
    assert message.endswith("ObjectMeta.metadata.labels of type map[string]string")


async def test_update_and_patch_are_refused_too_and_change_nothing(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job(NS, _job("j", annotations={"a": "1"}))
    version = created.metadata.resource_version
    with pytest.raises(ApiException) as patched:
        await batch.patch_namespaced_job("j", NS, {"metadata": {"annotations": {"a": 2}}})
    assert _refusal(patched)[:2] == (400, "BadRequest")
    body = _job("j", annotations={"a": False}, resourceVersion=version)
    with pytest.raises(ApiException) as replaced:
        await batch.replace_namespaced_job("j", NS, body)
    assert _refusal(replaced)[:2] == (400, "BadRequest")
    after = await batch.read_namespaced_job("j", NS)
    assert (after.metadata.annotations, after.metadata.resource_version) == ({"a": "1"}, version)


async def test_a_custom_object_with_a_number_annotation_is_refused(api: client.ApiClient) -> None:
    tree = elastic_quota_tree({"name": "root", "min": {"cpu": "1"}, "max": {"cpu": "1"}})
    tree["metadata"]["annotations"] = {"note": 1}
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as refused:
        await custom.create_namespaced_custom_object(*EQT, tree)
    status, reason, message = _refusal(refused)
    assert (status, reason) == (400, "BadRequest")
    assert message.startswith('ElasticQuotaTree in version "v1beta1" cannot be handled')


async def test_annotations_over_256_kib_in_all_are_invalid(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    fits = {"a": "x" * 100_000, "b": "y" * 100_000}  # 100 KB values, as a tenant may write
    await batch.create_namespaced_job(NS, _job("fits", annotations=fits))
    too_big = {"a": "x" * 200_000, "b": "y" * 100_000}
    with pytest.raises(ApiException) as refused:
        await batch.create_namespaced_job(NS, _job("big", annotations=too_big))
    status, reason, message = _refusal(refused)
    assert (status, reason) == (422, "Invalid")
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in message
