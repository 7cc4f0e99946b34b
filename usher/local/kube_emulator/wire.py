"""The JSON data of the Kubernetes API emulator: its shape, deep copies, encoding, timestamps.

What it does: names the shape every stored object has (``JsonObj``), copies it deeply
(``clone``), encodes it compactly for responses and watch lines (``encode_json``) and writes
times the way the API server does (``rfc3339``).
What it must never do: know a resource type, an API rule or an error; do I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import msgspec

JsonObj = dict[str, Any]

_T = TypeVar("_T")
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


def clone(obj: _T) -> _T:
    """A deep copy of JSON data (what the store holds): a msgspec round trip is about six times
    faster than ``copy.deepcopy``, which was a quarter of the emulator's CPU under load."""
    return cast(_T, _DECODER.decode(_ENCODER.encode(obj)))


def encode_json(obj: Any) -> bytes:
    """Compact JSON for responses and watch lines (msgspec: several times faster than json)."""
    return _ENCODER.encode(obj)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
