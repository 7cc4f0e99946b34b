"""Export the wire contract as JSON Schema files under ``schemas/json/``.

What it does: one ``<Type>.json`` per top-level wire type, so that non-Python subscribers can
validate what they receive with any standard validator in strict mode: msgspec generates the
schema, then ``strict_schema`` makes it plain JSON Schema 2020-12 -- tagged unions become
``oneOf`` over ``const`` type tags (no OpenAPI ``discriminator``), times carry
``format: date-time``, every field its docstring as ``description`` (quantities name their
unit), and the bounds the contract has (``BOUNDS``, ``_type_notes``) become ``minimum`` and
``maximum``. Unknown fields stay allowed (no ``additionalProperties: false``): a new field
arrives with a default, and an older consumer must keep validating. ``python -m
schemas.export [DIR]``.
What it must never do: be edited by hand (the files are generated and checked by a test), or
state a bound the producers do not keep (a test validates the messages of a real run).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import Any, Final

import msgspec

from schemas import common
from schemas.decisions import DECISION_TYPES
from schemas.envelope import DeadLetter, Envelope
from schemas.events import CLUSTER_EVENT_TYPES
from schemas.holds import HOLD_EVENT_TYPES, HoldReply, HoldRequest
from schemas.ledger import (
    LedgerError,
    PreemptRequest,
    ReleaseReply,
    ReleaseRequest,
    RequeueRequest,
    ReserveReply,
    ReserveRequest,
)
from schemas.passes import PASS_EVENT_TYPES

EXPORTED: tuple[type[msgspec.Struct], ...] = (
    Envelope,
    DeadLetter,
    *CLUSTER_EVENT_TYPES,
    *DECISION_TYPES,
    *HOLD_EVENT_TYPES,
    *PASS_EVENT_TYPES,
    ReserveRequest,
    ReserveReply,
    PreemptRequest,
    RequeueRequest,
    ReleaseRequest,
    ReleaseReply,
    LedgerError,
    HoldRequest,
    HoldReply,
)

DEFAULT_DIR = Path(__file__).parent / "json"

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

INT32: Final = {"minimum": -(2**31), "maximum": 2**31 - 1}
"""A Kubernetes priority (``spec.priority``, a PriorityClass ``value``): a 32-bit integer."""
MAX_SECONDS: Final = 30 * 24 * 3600
"""The longest duration a tree attribute or a request may set in seconds (30 days); the same
as ``usher.core.values.numbers.MAX_SECONDS`` (a test keeps them equal)."""
MAX_RETRY_LIMIT: Final = 100
"""Retries a job may get (R12); ``usher.core.values.registry.MAX_RETRY_LIMIT``."""
MAX_REQUEUE_ATTEMPTS: Final = 1000
"""Admissions a workload may time out in (R10); ``usher.core.values.registry``'s."""

_COUNT: Final = {"minimum": 0}
_ORDINAL: Final = {"minimum": 1}

BOUNDS: Final[dict[tuple[str, str], dict[str, int]]] = {
    ("Admitted", "priority"): INT32,
    ("ContainerTermination", "memory_limit"): _COUNT,
    ("ContainerTermination", "memory_request"): _COUNT,
    ("DeadLetter", "size"): _COUNT,
    ("DeadLetter", "stream_seq"): _ORDINAL,
    ("Envelope", "v"): _ORDINAL,
    ("HoldRequest", "grace_seconds"): {"minimum": 0, "maximum": MAX_SECONDS},
    ("MemoryResize", "limit"): _COUNT,
    ("MemoryResize", "new_limit"): _COUNT,
    ("MemoryResize", "new_request"): _COUNT,
    ("MemoryResize", "request"): _COUNT,
    ("NodeHeld", "grace_seconds"): {"minimum": 0, "maximum": MAX_SECONDS},
    ("PassRan", "seq"): _COUNT,
    ("Pending", "position"): _ORDINAL,
    ("PodSet", "count"): _COUNT,
    ("PodSet", "min_count"): _COUNT,
    ("PreemptRequest", "log_seq"): _COUNT,
    ("PriorityClassObserved", "value"): INT32,
    ("Reason", "limit"): _COUNT,
    ("Reason", "requested"): _COUNT,
    ("Reason", "used"): _COUNT,
    ("RequeueRequest", "log_seq"): _COUNT,
    ("Requeued", "attempt"): {"minimum": 1, "maximum": MAX_REQUEUE_ATTEMPTS},
    ("Requeued", "max_attempts"): {"minimum": 1, "maximum": MAX_REQUEUE_ATTEMPTS},
    ("Requeued", "ready"): _COUNT,
    ("Requeued", "total"): _COUNT,
    ("Reservation", "priority"): INT32,
    ("ReserveRequest", "log_seq"): _COUNT,
    ("Retried", "attempt"): _ORDINAL,
    ("Retried", "limit"): {"minimum": 0, "maximum": MAX_RETRY_LIMIT},
    ("RetryAsk", "limit"): {"minimum": 0, "maximum": MAX_RETRY_LIMIT},
    ("RetryAsk", "memory_cap"): _COUNT,
    ("WorkloadFinished", "min_success"): _COUNT,
    ("WorkloadObserved", "max_runtime_seconds"): _ORDINAL,
    ("WorkloadObserved", "priority"): INT32,
    ("WorkloadProgress", "failed"): _COUNT,
    ("WorkloadProgress", "ready"): _COUNT,
    ("WorkloadProgress", "succeeded"): _COUNT,
    ("WorkloadProgress", "total"): _COUNT,
}
"""The bounds of integer fields, by ``(struct, field)``: what the producers keep (the watcher
reads manifests and annotations within them, the engine counts from 1)."""


@cache
def _type_notes() -> dict[str, tuple[str, dict[str, Any]]]:
    """Per type name as written in an annotation: the unit sentence a field of that type
    gets when its docstring says none, and what its JSON Schema gains."""
    resources = _attribute_docs(common)["Resources"]
    return {
        "Millis": ("Milliseconds since the Unix epoch (UTC).", {"minimum": 0}),
        "datetime": ("UTC time, RFC 3339 (e.g. ``2026-01-31T12:00:00.123Z``).", {}),
        "Resources": (resources, {"additionalProperties": {"type": "integer", "minimum": 0}}),
    }


def render_all() -> dict[str, str]:
    """File name -> JSON Schema text for every exported type (stable, sorted keys)."""
    return {
        f"{type_.__name__}.json": json.dumps(strict_schema(type_), indent=2, sort_keys=True) + "\n"
        for type_ in EXPORTED
    }


def strict_schema(type_: type[msgspec.Struct]) -> dict[str, Any]:
    """The plain JSON Schema 2020-12 of ``type_`` (see the module docstring)."""
    schema: dict[str, Any] = msgspec.json.schema(type_)
    structs = _structs(type_)
    for name, definition in schema.get("$defs", {}).items():
        if "description" in definition:
            definition["description"] = inspect.cleandoc(definition["description"])
        _annotate(definition, structs[name])
    plain: dict[str, Any] = _plain(schema)
    plain["$schema"] = DIALECT
    plain["title"] = type_.__name__
    return plain


def _structs(root: type[msgspec.Struct]) -> dict[str, type[msgspec.Struct]]:
    """Every Struct class the schema of ``root`` defines, by name."""
    found: dict[str, type[msgspec.Struct]] = {}

    def visit(info: msgspec.inspect.Type) -> None:
        if isinstance(info, msgspec.inspect.StructType) and info.cls.__name__ not in found:
            found[info.cls.__name__] = info.cls
            for field in info.fields:
                visit(field.type)
            return
        for child in _children(info):
            visit(child)

    visit(msgspec.inspect.type_info(root))
    return found


def _children(info: msgspec.inspect.Type) -> list[msgspec.inspect.Type]:
    """The types directly inside a container, union or wrapper type."""
    if isinstance(info, msgspec.inspect.UnionType):
        return list(info.types)
    if isinstance(info, msgspec.inspect.DictType):
        return [info.key_type, info.value_type]
    inner = getattr(info, "item_type", None)
    return [inner] if isinstance(inner, msgspec.inspect.Type) else []


def _annotate(definition: dict[str, Any], cls: type[msgspec.Struct]) -> None:
    """Give each property of ``cls``'s definition its description, format and bounds."""
    docs = _field_docs(cls)
    written = _annotations(cls)
    notes = _type_notes()
    for name, prop in definition.get("properties", {}).items():
        names = set(written.get(name, "").replace("|", " ").split())
        sentence = docs.get(name, "")
        for type_name, (unit, extra) in notes.items():
            if type_name in names:
                sentence = sentence or unit
                _extend(prop, extra, format_="date-time" if type_name == "datetime" else None)
        _extend(prop, BOUNDS.get((cls.__name__, name), {}), format_=None)
        if sentence:
            prop["description"] = _plain_text(sentence)


def _extend(prop: dict[str, Any], extra: dict[str, Any], *, format_: str | None) -> None:
    """Add ``extra`` (and ``format``) to the non-null branch of ``prop`` (a nullable field is
    ``anyOf`` of it and null; a keyword beside ``anyOf`` would apply to no type)."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    for branch in branches:
        if extra.get("additionalProperties") and branch.get("type") == "object":
            branch["additionalProperties"] = dict(extra["additionalProperties"])
        elif branch.get("type") == "integer":
            branch.update({k: v for k, v in extra.items() if k != "additionalProperties"})
        if format_ and branch.get("type") == "string":
            branch["format"] = format_


def _plain(node: Any) -> Any:
    """``node`` with OpenAPI's ``discriminator`` dropped, every union a ``oneOf`` (the tagged
    ones are exclusive by their ``const`` tag, the nullable ones by type), and a one-value
    ``enum`` a ``const``."""
    if isinstance(node, list):
        return [_plain(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "discriminator":
            continue
        if key == "anyOf":
            out["oneOf"] = _plain(value)
        elif key == "enum" and len(value) == 1:
            out["const"] = value[0]
            if isinstance(value[0], str):
                out["type"] = "string"
        else:
            out[key] = _plain(value)
    return out


def _plain_text(docstring: str) -> str:
    """A docstring as one paragraph of text (its lines joined)."""
    return " ".join(textwrap.dedent(docstring).split())


def _annotations(cls: type) -> dict[str, str]:
    """Each field's annotation as written (the module's annotations are strings)."""
    written: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        written.update({k: str(v) for k, v in vars(klass).get("__annotations__", {}).items()})
    return written


def _field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of ``cls`` and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("schemas."):
            docs.update(_attribute_docs(klass))
    return docs


@cache
def _attribute_docs(owner: Any) -> dict[str, str]:
    """The string literal under each annotated or assigned name of a class or module."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(owner)))
    body = tree.body[0].body if isinstance(owner, type) else tree.body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for statement, following in itertools.pairwise(body):
        target = _target(statement)
        value = following.value if isinstance(following, ast.Expr) else None
        if target and isinstance(value, ast.Constant) and isinstance(value.value, str):
            docs[target] = value.value
    return docs


def _target(statement: ast.stmt) -> str | None:
    """The name a statement binds (``x: T = ...`` or ``X = ...``), None for any other."""
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return statement.target.id
    if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id
    return None


def write_all(directory: Path = DEFAULT_DIR) -> list[Path]:
    """Write every schema file into ``directory``; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, text in render_all().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``make schemas``."""
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else DEFAULT_DIR
    for path in write_all(directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
