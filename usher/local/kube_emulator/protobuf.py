"""The few protobuf request bodies kubectl sends, read as the JSON objects they stand for.

What it does: kubectl's typed generators (``kubectl create namespace``, ``kubectl create
configmap``) POST ``application/vnd.kubernetes.protobuf``: the magic ``k8s\\0`` then a
``runtime.Unknown`` (typeMeta, raw) whose ``raw`` is the object in the generated.proto
encoding of k8s.io/api. ``decode`` turns a Namespace or a ConfigMap body into its JSON form
(metadata name, generateName, namespace, labels, annotations; a ConfigMap's data and
binaryData; a Namespace's finalizers).
What it must never do: decode a kind it does not know the fields of (None: the server answers
415 as before), or do I/O.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"

Field = tuple[int, int | bytes]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data: bytes) -> Iterator[Field]:
    """(field number, value) of one message: an int for varints, bytes for length-delimited."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated field")
            yield number, data[at : at + size]
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _map_entry(value: int | bytes) -> tuple[str, bytes]:
    entry = dict(fields(value)) if isinstance(value, bytes) else {}
    key, item = entry.get(1, b""), entry.get(2, b"")
    return _text(key), item if isinstance(item, bytes) else b""


def _object_meta(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    names = {1: "name", 2: "generateName", 3: "namespace"}
    for number, value in fields(data):
        if number in names:
            meta[names[number]] = _text(value)
        elif number in (11, 12):
            key, item = _map_entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = item.decode()
    return meta


def _namespace(raw: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {}}
    for number, value in fields(raw):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _object_meta(value)
        elif number == 2 and isinstance(value, bytes):
            finalizers = [_text(v) for n, v in fields(value) if n == 1]
            if finalizers:
                obj["spec"] = {"finalizers": finalizers}
    return obj


def _config_map(raw: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}
    for number, value in fields(raw):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _object_meta(value)
        elif number == 2:
            key, item = _map_entry(value)
            obj.setdefault("data", {})[key] = item.decode()
        elif number == 3:
            key, item = _map_entry(value)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(item).decode()
        elif number == 4:
            obj["immutable"] = bool(value)
    return obj


DECODERS = {("v1", "Namespace"): _namespace, ("v1", "ConfigMap"): _config_map}


def decode(body: bytes) -> dict[str, Any] | None:
    """The JSON form of a protobuf body of a kind we know; None for any other."""
    if not body.startswith(MAGIC):
        return None
    try:
        unknown = dict(fields(body[len(MAGIC) :]))
        type_meta = unknown.get(1, b"")
        raw = unknown.get(2, b"")
        if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
            return None
        meta = {n: _text(v) for n, v in fields(type_meta)}
        decoder = DECODERS.get((meta.get(1, ""), meta.get(2, "")))
        return decoder(raw) if decoder is not None else None
    except (ValueError, UnicodeDecodeError):
        return None
