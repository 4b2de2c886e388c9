"""Loading our optional C extensions (`projections/_walk_kernel.c`, `infra/_seal_kernel.c`): each is built by
`pip install -e .` where a compiler is found, and each has a Python fallback that computes the same results."""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Any


def load(module: str, version: int, switch: str, fallback: str) -> tuple[Any, bool]:
    """The built extension `module` (None if it was not built, or is a stale build whose `VERSION` is not
    `version`: then with a warning), and whether to use it (`switch`=0 in the environment turns it off)."""
    try:
        kernel: Any = importlib.import_module(module)
    except ImportError:  # not built (no compiler or headers at install): the fallback
        return None, False
    if getattr(kernel, "VERSION", None) != version:
        warnings.warn(f"{module} is a stale build (reinstall: pip install -e .); {fallback}", RuntimeWarning,
                      stacklevel=2)
        return None, False
    return kernel, os.environ.get(switch, "1") != "0"
