"""Every reason outside the core is one of the core's: no adapter, service, local stack, client
or CLI module builds a ``schemas.Reason`` itself (a code and a sentence of its own); they call
the constructors of ``usher.core.model.reasons`` (or a rule that does), so one wording and one
set of numbers reaches every reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUTER = ("usher/adapters", "services", "usher/local", "usher/client", "usher/cli")


def reasons_built_in(path: Path) -> list[int]:
    """Lines of ``path`` that call ``Reason(...)`` (by name or as ``schemas.Reason``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name == "Reason":
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("folder", OUTER)
def test_no_reason_is_built_outside_the_core(folder: str) -> None:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, folder
    built = {
        str(path.relative_to(ROOT)): lines for path in files if (lines := reasons_built_in(path))
    }
    assert built == {}


def test_the_check_finds_a_reason_built_by_hand(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import schemas\nfrom schemas import Reason\n"
        "a = Reason(code='StaleView', message='x')\n"
        "b = schemas.Reason(code='UnknownQuota', message='y')\n"
    )
    assert reasons_built_in(module) == [3, 4]
