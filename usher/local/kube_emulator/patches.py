"""The patches of the Kubernetes API emulator: JSON merge patch and JSON patch.

What it does: applies an RFC 7386 merge patch (``merge_patch``), an RFC 6902 JSON patch, all
or nothing (``json_patch``), and the patch a PATCH request names (``apply_patch``: ``strategic``
is applied as a merge patch, without patch strategies), with the real server's errors.
What it must never do: change the document it is given (it works on copies), check an object's
identity or version (the store does), or do I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from usher.local.kube_emulator.errors import ApiError, bad_request
from usher.local.kube_emulator.resources import ResourceType
from usher.local.kube_emulator.wire import JsonObj, clone

PatchType = Literal["merge", "json", "strategic"]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes, objects merge, anything else replaces)."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class JsonPatchError(Exception):
    """A JSON patch operation that cannot be applied (422 on a real server)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise JsonPatchError(f"invalid array index: {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise JsonPatchError(f"array index out of bounds: {index}")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise JsonPatchError(f"path not found: /{'/'.join(tokens)}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    if isinstance(parent, dict) and tokens[-1] in parent:
        return parent[tokens[-1]]
    if isinstance(parent, list):
        return parent[_index(parent, tokens[-1], allow_end=False)]
    raise JsonPatchError(f"path not found: {path}")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], allow_end=True), value)
    else:
        raise JsonPatchError(f"path not found: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    if isinstance(parent, dict) and tokens[-1] in parent:
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], allow_end=False)]
    else:
        raise JsonPatchError(f"path not found: {path}")
    return doc


def _apply_operation(doc: Any, op: Any) -> Any:
    if not isinstance(op, dict) or not isinstance(op.get("path"), str):
        raise JsonPatchError(f"invalid operation: {op!r}")
    kind, path = op.get("op"), op["path"]
    if kind in ("add", "replace", "test") and "value" not in op:
        raise JsonPatchError(f"missing value for {kind} at {path}")
    if kind == "add":
        return _add(doc, path, clone(op["value"]))
    if kind == "remove":
        return _remove(doc, path)
    if kind == "replace":
        _get(doc, path)
        return _add(_remove(doc, path), path, clone(op["value"])) if path else op["value"]
    if kind in ("move", "copy"):
        source = op.get("from")
        if not isinstance(source, str):
            raise JsonPatchError(f"missing from for {kind} at {path}")
        if kind == "move" and path.startswith(source + "/"):
            raise JsonPatchError(f"cannot move {source} into its own child {path}")
        value = clone(_get(doc, source))
        if kind == "move":
            doc = _remove(doc, source)
        return _add(doc, path, value)
    if kind == "test":
        if _get(doc, path) != op["value"]:
            raise JsonPatchError(f"testing value {path} failed: test failed")
        return doc
    raise JsonPatchError(f"Unexpected kind: {kind}")


def json_patch(doc: Any, operations: list[Any]) -> Any:
    """RFC 6902 JSON patch: add/remove/replace/move/copy/test, all or nothing."""
    result = clone(doc)
    for op in operations:
        result = _apply_operation(result, op)
    return result


def apply_patch(rt: ResourceType, name: str, current: JsonObj, kind: PatchType, body: Any) -> Any:
    """The patched object; ``strategic`` is applied as a merge patch (no patch strategies)."""
    if kind == "json":
        if not isinstance(body, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            return json_patch(current, body)
        except JsonPatchError as exc:
            raise ApiError(
                422,
                "Invalid",
                str(exc),
                {"name": name, "group": rt.group, "kind": rt.kind},
            ) from exc
    if not isinstance(body, dict):
        raise bad_request("the patch must be a JSON object")
    return merge_patch(current, body)
