"""OpenAPI documents of the emulator (``/openapi/v2``, ``/openapi/v3``) and strict field checks.

What it does: builds, as kube-apiserver publishes them, the OpenAPI v3 discovery document
(``{"paths": {"api/v1": {"serverRelativeURL": ...}}}``), one OpenAPI 3.0 document per served
group/version (paths with their verbs, ``x-kubernetes-group-version-kind`` and the
``fieldValidation`` parameter kubectl looks for, plus the schemas those paths reach) and the
Swagger 2.0 document (JSON). Built-in types' schemas come from the Kubernetes 1.32 schemas that
the ``kubernetes-validate`` package ships; a custom resource publishes its CRD's schema (the
files of deploy/base/crds, ``crd_schema``), or for a job kind Usher ships no CRD of, what a
CRD whose schema preserves unknown fields does. It also lists the fields of an object its
schema does not know, which is what ``fieldValidation=Strict`` refuses and ``Warn`` warns about.
What it must never do: I/O besides reading the bundled schema file once; hold mutable state
other than its caches; decide anything about a request (the server does).
"""

from __future__ import annotations

import copy
import hashlib
import json
from functools import cache
from importlib import resources
from typing import Any

from usher.local.kube_emulator.crd_schema import schema_of
from usher.local.kube_emulator.resources import RESOURCES, ResourceType
from usher.local.kube_emulator.wire import JsonObj

SCHEMA_RELEASE = "v1.32.0-local"
"""The bundled schema set matching the emulator's version (``KUBE_VERSION`` 1.32)."""
DEFS = "#/$defs/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
PATCH = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")


# --------------------------------------------------------------------------- schemas


@cache
def _bundled() -> dict[str, JsonObj]:
    """The bundled JSON-schema definitions of every built-in type, by OpenAPI name."""
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema" / SCHEMA_RELEASE
    document = json.loads((folder / "_definitions.json").read_text())
    defs: dict[str, JsonObj] = document["$defs"]
    return defs


def _as_openapi(node: Any, prefix: str) -> Any:
    """A JSON-schema node in OpenAPI form: refs under ``prefix``, ``["string", "null"]`` types
    as one type (the bundle made every field nullable; OpenAPI says it by omission)."""
    if isinstance(node, list):
        return [_as_openapi(item, prefix) for item in node]
    if not isinstance(node, dict):
        return node
    out: JsonObj = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith(DEFS):
            out[key] = prefix + value[len(DEFS) :]
        elif key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            out[key] = types[0] if len(types) == 1 else types
        else:
            out[key] = _as_openapi(value, prefix)
    return out


def definition_name(rt: ResourceType) -> str:
    """The OpenAPI name of a kind: ``io.k8s.api.batch.v1.Job``, or the CRD convention."""
    if not rt.builtin:
        reversed_group = ".".join(reversed(rt.group.split(".")))
        return f"{reversed_group}.{rt.version}.{rt.kind}"
    for name, schema in _bundled().items():
        if _gvk_of(schema) == (rt.group, rt.version, rt.kind):
            return name
    raise KeyError(f"no bundled schema for {rt.kind} ({rt.api_version})")


def _gvk_of(schema: JsonObj) -> tuple[str, str, str] | None:
    props = schema.get("properties") or {}
    versions = (props.get("apiVersion") or {}).get("enum") or []
    kinds = (props.get("kind") or {}).get("enum") or []
    if len(versions) != 1 or len(kinds) != 1:
        return None
    group, _, version = str(versions[0]).rpartition("/")
    return group, version, str(kinds[0])


def _crd_schema(rt: ResourceType) -> JsonObj:
    """What the kind's CRD publishes: the schema of deploy/base/crds (its metadata as
    ObjectMeta), or for a kind Usher ships no CRD of, one that preserves unknown fields."""
    shipped = schema_of(rt.group, rt.version, rt.plural)
    if shipped is not None:
        properties = {**shipped.get("properties", {}), "metadata": {"$ref": DEFS + OBJECT_META}}
        return {**copy.deepcopy(shipped), "properties": properties}
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"$ref": DEFS + OBJECT_META},
        },
    }


def _definitions(rt: ResourceType) -> dict[str, JsonObj]:
    """Every definition (JSON-schema form) the kind's schema reaches, its own included."""
    bundled = _bundled()
    own = definition_name(rt)
    table = {**bundled, own: _crd_schema(rt)} if not rt.builtin else bundled
    found: dict[str, JsonObj] = {}
    todo = [own, STATUS, PATCH]
    while todo:
        name = todo.pop()
        if name in found or name not in table:
            continue
        found[name] = table[name]
        todo.extend(_refs(table[name]))
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    found[own] = {**found[own], "x-kubernetes-group-version-kind": [gvk]}
    return found


def _refs(node: Any) -> list[str]:
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    if not isinstance(node, dict):
        return []
    out = [node["$ref"][len(DEFS) :]] if str(node.get("$ref", "")).startswith(DEFS) else []
    return out + [ref for value in node.values() for ref in _refs(value)]


# --------------------------------------------------------------------------- paths


def group_version_path(group: str, version: str) -> str:
    """``api/v1`` or ``apis/<group>/<version>``: the key of the v3 discovery document."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _parameter(name: str, where: str = "query", required: bool = False) -> JsonObj:
    return {"name": name, "in": where, "required": required, "schema": {"type": "string"}}


def _operation(rt: ResourceType, action: str, ref: str, verb: str) -> JsonObj:
    body_schema = {"$ref": ref}
    op: JsonObj = {
        "operationId": f"{action}{rt.kind}",
        "tags": [rt.group_resource],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": rt.group,
            "version": rt.version,
            "kind": rt.kind,
        },
        "responses": {
            "200": {"content": {"application/json": {"schema": body_schema}}},
            "401": {"description": "Unauthorized"},
        },
    }
    if verb in ("post", "put", "patch"):
        op["parameters"] = [_parameter(p) for p in WRITE_PARAMETERS]
        media = "application/merge-patch+json" if verb == "patch" else "application/json"
        op["requestBody"] = {"content": {media: {"schema": body_schema}}, "required": True}
    return op


def resource_paths(rt: ResourceType, prefix: str) -> JsonObj:
    """The collection and item paths of one resource, with the verbs the emulator serves."""
    base = f"/{group_version_path(rt.group, rt.version)}"
    scope = "/namespaces/{namespace}" if rt.namespaced else ""
    ref = prefix + definition_name(rt)
    status_ref = prefix + STATUS
    collection = f"{base}{scope}/{rt.plural}"
    item = f"{collection}/{{name}}"
    path_params = [_parameter("name", "path", True)]
    if rt.namespaced:
        path_params.append(_parameter("namespace", "path", True))
    paths: JsonObj = {
        collection: {
            "get": _operation(rt, "list", ref, "get"),
            "post": _operation(rt, "post", ref, "post"),
            "delete": _operation(rt, "deletecollection", status_ref, "delete"),
            "parameters": path_params[1:],
        },
        item: {
            "get": _operation(rt, "get", ref, "get"),
            "put": _operation(rt, "put", ref, "put"),
            "patch": _operation(rt, "patch", ref, "patch"),
            "delete": _operation(rt, "delete", status_ref, "delete"),
            "parameters": path_params,
        },
    }
    if rt.status_subresource:
        paths[f"{item}/status"] = {
            "get": _operation(rt, "get", ref, "get"),
            "put": _operation(rt, "put", ref, "put"),
            "patch": _operation(rt, "patch", ref, "patch"),
            "parameters": path_params,
        }
    return paths


# --------------------------------------------------------------------------- documents


def _served(group: str, version: str) -> list[ResourceType]:
    return [rt for rt in RESOURCES if (rt.group, rt.version) == (group, version)]


@cache
def v3_document(group: str, version: str) -> bytes | None:
    """The OpenAPI 3.0 document of one group/version (None when it is not served)."""
    served = _served(group, version)
    if not served:
        return None
    prefix = "#/components/schemas/"
    paths: JsonObj = {}
    schemas: dict[str, JsonObj] = {}
    for rt in served:
        paths.update(resource_paths(rt, prefix))
        schemas.update(_definitions(rt))
    document = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": _as_openapi(schemas, prefix)},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def v3_discovery() -> JsonObj:
    """``/openapi/v3``: where each group/version's document is, with its content hash."""
    paths: JsonObj = {}
    for rt in RESOURCES:
        key = group_version_path(rt.group, rt.version)
        if key not in paths:
            document = v3_document(rt.group, rt.version)
            assert document is not None
            digest = hashlib.sha512(document).hexdigest().upper()
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


@cache
def v2_document() -> bytes:
    """``/openapi/v2`` as JSON: every served path and the definitions they reach."""
    prefix = "#/definitions/"
    paths: JsonObj = {}
    definitions: dict[str, JsonObj] = {}
    for rt in RESOURCES:
        for path, item in resource_paths(rt, prefix).items():
            paths[path] = {verb: _v2_operation(op) for verb, op in item.items()}
        definitions.update(_definitions(rt))
    document = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "definitions": _as_openapi(definitions, prefix),
    }
    return json.dumps(document, separators=(",", ":")).encode()


def _v2_operation(op: Any) -> Any:
    """An OpenAPI 3 operation (or parameter list) in Swagger 2.0 form."""
    if isinstance(op, list):
        return [{**{k: v for k, v in p.items() if k != "schema"}, "type": "string"} for p in op]
    out = copy.deepcopy(op)
    out["parameters"] = _v2_operation(op.get("parameters", []))
    body = out.pop("requestBody", None)
    if body is not None:
        ((_, media),) = body["content"].items()
        out["parameters"].append({"name": "body", "in": "body", "required": True, **media})
    out["responses"] = {
        code: {"description": "OK", **(answer["content"]["application/json"])}
        if "content" in answer
        else answer
        for code, answer in out["responses"].items()
    }
    return out


# --------------------------------------------------------------------------- field checks


def unknown_fields(rt: ResourceType, obj: JsonObj) -> list[str]:
    """Paths (``spec.template.spec.foo``) of fields the kind's schema does not declare."""
    defs = _bundled() if rt.builtin else {}
    schema = defs.get(definition_name(rt)) if rt.builtin else _crd_schema(rt)
    return _unknown(schema or {}, obj, "", defs)


def _resolve(schema: JsonObj, defs: dict[str, JsonObj]) -> JsonObj:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(DEFS):
        return defs.get(ref[len(DEFS) :], {})
    return schema


def _unknown(schema: JsonObj, value: Any, path: str, defs: dict[str, JsonObj]) -> list[str]:
    schema = _resolve(schema, defs)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            found
            for i, item in enumerate(value)
            for found in _unknown(schema["items"], item, f"{path}[{i}]", defs)
        ]
    if not isinstance(value, dict):
        return []
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    out: list[str] = []
    for key, child in value.items():
        where = f"{path}.{key}" if path else key
        if isinstance(props, dict) and key in props:
            out += _unknown(props[key], child, where, defs)
        elif isinstance(extra, dict):
            out += _unknown(extra, child, where, defs)
        elif isinstance(props, dict):
            out.append(where)
    return out
