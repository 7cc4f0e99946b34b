"""Modules the command line loads only when a command uses them, never to check arguments.

What it does: ``lazy_module("usher.core.history.replay")`` returns the module object at once
and runs its code on the first attribute read (``importlib.util.LazyLoader``), so a command
module can name the heavy parts of Usher at its top while an argument error is reported
before any of them is imported.
What it must never do: import the module it names (its parent packages only), or be used for a
module whose import has side effects someone relies on.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """The module ``name``, loaded when first used (at once if it is already loaded)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
