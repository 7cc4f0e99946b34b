"""The JSON data of the Kubernetes API emulator: its shape, deep copies, encoding, timestamps.

What it does: names the shape every stored object has (``JsonObj``), copies it deeply
(``clone``), encodes it compactly for responses and watch lines (``encode_json``) and writes
times the way the API server does (``rfc3339``).
What it must never do: know a resource type, an API rule or an error; do I/O.
"""

from __future__ import annotations

import math
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


_LAST_SECOND: list[tuple[int, str]] = [(-1, "")]


def rfc3339(moment: datetime) -> str:
    """``moment`` to the second, in UTC, as the API server writes times (the last second's
    text is remembered: every write of the same second asks for it again)."""
    second = math.floor(moment.timestamp())
    last = _LAST_SECOND[0]
    if last[0] == second:
        return last[1]
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _LAST_SECOND[0] = (second, text)
    return text
