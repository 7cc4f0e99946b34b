"""The wire contract: round trips, hostile bytes, and the exported JSON Schema files."""

from __future__ import annotations

import json
import re
import types
import typing
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schemas
from schemas.export import DEFAULT_DIR, EXPORTED, render_all
from schemas.quota import QuotaNode
from tests.long import examples

# Datetimes must carry a timezone to survive JSON unchanged (the contract says UTC).
st.register_type_strategy(
    datetime,
    st.datetimes(
        min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
)
_names = st.text(min_size=1, max_size=12)
_resources = st.dictionaries(_names, st.integers(min_value=0, max_value=2**62), max_size=4)
st.register_type_strategy(
    QuotaNode,
    st.recursive(
        st.builds(QuotaNode, name=_names, min=_resources, max=_resources),
        lambda children: st.builds(
            QuotaNode, name=_names, min=_resources, max=_resources,
            children=st.lists(children, max_size=3),
        ),
        max_leaves=6,
    ),
)  # fmt: skip

WIRE_TYPES: list[type[Any]] = [*EXPORTED, schemas.Reason, schemas.FieldError, QuotaNode]


def _strategy(tp: Any) -> st.SearchStrategy[Any]:
    """Resolve a field type ourselves: hypothesis would pass msgspec's default factories."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct) and tp is not QuotaNode:
        fields = {f.name: _strategy(f.type) for f in msgspec.structs.fields(tp)}
        return st.builds(tp, **fields)
    if origin is list:
        return st.lists(_strategy(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(_strategy(args[0]), _strategy(args[1]), max_size=3)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([_strategy(a) for a in args])
    return st.from_type(tp)


@pytest.mark.parametrize("type_", WIRE_TYPES, ids=lambda t: t.__name__)
@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_every_wire_type_round_trips(type_: type[Any], data: st.DataObject) -> None:
    value = data.draw(_strategy(type_))
    encoded = schemas.encode(value)
    assert schemas.decode(encoded, type_) == value


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=10,
)  # fmt: skip


def _value_slots(doc: Any) -> list[tuple[Any, Any]]:
    """(container, key or index) of every value inside a JSON document."""
    slots: list[tuple[Any, Any]] = []
    children = doc.items() if isinstance(doc, dict) else enumerate(doc)
    for key, value in children:
        slots.append((doc, key))
        if isinstance(value, dict | list):
            slots.extend(_value_slots(value))
    return slots


@st.composite
def _envelope_bytes(draw: st.DrawFn) -> tuple[bytes, schemas.Envelope | None]:
    """A valid encoded envelope (with the envelope), or one truncated or with a byte changed."""
    envelope = draw(_strategy(schemas.Envelope))
    blob = schemas.encode(envelope)
    how = draw(st.sampled_from(["whole", "truncated", "changed"]))
    if how == "whole":
        return blob, envelope
    at = draw(st.integers(min_value=0, max_value=len(blob) - 1))
    if how == "truncated":
        return blob[:at], None
    return blob[:at] + bytes([draw(st.integers(0, 255))]) + blob[at + 1 :], None


@st.composite
def _envelope_docs(draw: st.DrawFn) -> Any:
    """A valid envelope as JSON, often with one value replaced by arbitrary JSON."""
    doc = msgspec.to_builtins(draw(_strategy(schemas.Envelope)))
    if draw(st.booleans()):
        container, key = draw(st.sampled_from(_value_slots(doc)))
        container[key] = draw(_json)
    return doc


def _agrees(decoded: Any, given: Any) -> bool:
    """Whether every value the input states is the decoded value (defaults fill the rest)."""
    if isinstance(decoded, dict) and isinstance(given, dict):
        return all(_agrees(decoded[k], given[k]) for k in decoded if k in given)
    if isinstance(decoded, list) and isinstance(given, list):
        return len(decoded) == len(given) and all(map(_agrees, decoded, given))
    return bool(decoded == given)


@settings(max_examples=examples(500), deadline=None)
@given(case=st.tuples(st.binary(max_size=256), st.none()) | _envelope_bytes())
def test_arbitrary_bytes_raise_only_msgspec_errors(
    case: tuple[bytes, schemas.Envelope | None],
) -> None:
    blob, original = case
    # ValidationError is a subclass of DecodeError; anything else escapes and fails the test.
    try:
        decoded = schemas.decode_envelope(blob)
    except msgspec.DecodeError:
        assert original is None, "a valid envelope was refused"
        return
    if original is not None:
        assert decoded == original
    # Bytes msgspec skips (an unknown key) are not checked for UTF-8: read them replaced.
    given_json = json.loads(blob.decode("utf-8", errors="replace"))
    assert _agrees(msgspec.to_builtins(decoded), given_json)
    assert schemas.decode_envelope(schemas.encode(decoded)) == decoded


@settings(max_examples=examples(300), deadline=None)
@given(doc=_json | _envelope_docs())
def test_arbitrary_json_raises_only_msgspec_errors(doc: object) -> None:
    try:
        decoded = schemas.decode_envelope(msgspec.json.encode(doc))
    except msgspec.DecodeError:
        return
    # Accepted: exactly what was sent, nothing dropped, coerced or added.
    assert msgspec.to_builtins(decoded) == doc


def test_a_bad_byte_in_a_tag_is_a_decode_error() -> None:
    """msgspec itself raises UnicodeDecodeError here, which no service catches (found above)."""
    bad = b'{"type":"\x80nvelope.v1","id":"","time":"2000-01-01T00:00:00Z","source":"","event":{}}'
    with pytest.raises(msgspec.DecodeError, match="invalid UTF-8 at byte"):
        schemas.decode_envelope(bad)
    with pytest.raises(msgspec.DecodeError, match="invalid UTF-8 at byte"):
        schemas.decode(bad, schemas.DeadLetter)


def test_validation_error_names_the_field() -> None:
    bad = (
        b'{"type":"envelope.v1","id":"e","time":"2026-01-01T00:00:00Z","source":"s",'
        b'"event":{"type":"workload.deleted.v1","workload":42}}'
    )
    with pytest.raises(msgspec.ValidationError, match=r"\$\.event\.workload"):
        schemas.decode_envelope(bad)


def test_unknown_event_tag_is_rejected() -> None:
    bad = (
        b'{"type":"envelope.v1","id":"e","time":"2026-01-01T00:00:00Z","source":"s",'
        b'"event":{"type":"workload.exploded.v9"}}'
    )
    with pytest.raises(msgspec.ValidationError, match=re.escape("workload.exploded.v9")):
        schemas.decode_envelope(bad)


def test_tags_are_unique_and_versioned() -> None:
    tags = [t.__struct_config__.tag for t in EXPORTED]
    assert len(tags) == len(set(tags))
    assert all(isinstance(tag, str) and ".v" in tag for tag in tags)


def test_checked_in_json_schemas_are_current() -> None:
    """Fails when a Struct changed without `make schemas`."""
    rendered = render_all()
    on_disk = {p.name: p.read_text() for p in DEFAULT_DIR.glob("*.json")}
    stale = sorted(n for n in rendered if on_disk.get(n) != rendered[n])
    extra = sorted(set(on_disk) - set(rendered))
    assert not stale and not extra, f"run `make schemas`: stale {stale}, extra {extra}"
