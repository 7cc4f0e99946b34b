"""Whether the long test run is on (``make test-long`` sets ``USHER_LONG_TESTS=1``), and how
many examples a property runs in each.

What it does: one switch for every test that runs bigger in the nightly-style run. What it
must never do: change what a test asserts, only how much input it tries.
"""

from __future__ import annotations

import os

LONG = os.environ.get("USHER_LONG_TESTS") == "1"


def examples(full: int) -> int:
    """``full`` examples in the long run; two fifths of them (at least 20) in ``make test``."""
    return full if LONG else max(20, full * 2 // 5)
