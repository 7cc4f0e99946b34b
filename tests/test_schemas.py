"""The wire contract: round trips, hostile bytes, and the exported JSON Schema files."""

from __future__ import annotations

import contextlib
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
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_every_wire_type_round_trips(type_: type[Any], data: st.DataObject) -> None:
    value = data.draw(_strategy(type_))
    encoded = schemas.encode(value)
    assert schemas.decode(encoded, type_) == value


@settings(max_examples=500, deadline=None)
@given(blob=st.binary(max_size=256))
def test_arbitrary_bytes_raise_only_msgspec_errors(blob: bytes) -> None:
    # ValidationError is a subclass of DecodeError; anything else escapes and fails the test.
    with contextlib.suppress(msgspec.DecodeError):
        schemas.decode_envelope(blob)


@settings(max_examples=300, deadline=None)
@given(doc=st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=10,
))  # fmt: skip
def test_arbitrary_json_raises_only_msgspec_errors(doc: object) -> None:
    with contextlib.suppress(msgspec.DecodeError):
        schemas.decode_envelope(msgspec.json.encode(doc))


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
