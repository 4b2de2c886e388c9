"""Which of noumena's own objects still hold a text: a walk of the interpreter's heap from every object of our
packages (instances of their classes and their modules' globals) through what each refers to (`gc.get_referents`),
into the dicts, lists, tuples and sets the collector does not track (those holding only strings and numbers).
Memory Python no longer refers to (freed, not overwritten) and memory outside Python objects (DuckDB's buffers,
C libraries) is beyond it: docs/forgetting.md says what remains and how to close it."""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterable

OURS = ("domain", "infra", "projections", "api", "demo", "consumers")


def _ours(name: object) -> bool:
    return isinstance(name, str) and name.split(".", 1)[0] in OURS


def held_by_noumena(markers: Iterable[str]) -> dict[str, list[str]]:
    """Marker -> where it is held: the type of the object of ours the walk started from, and the type of the
    object that holds the text (a str, bytes or bytearray containing the marker, in any case)."""
    markers = list(markers)
    wanted = [m.casefold() for m in markers]
    gc.collect()
    modules = [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]
    foreign_globals = {id(m.__dict__) for m in modules if not _ours(m.__name__)}
    roots: list[tuple[object, str]] = [(m.__dict__, f"module {m.__name__}") for m in modules if _ours(m.__name__)]
    roots += [(o, f"{type(o).__module__}.{type(o).__qualname__}") for o in gc.get_objects()
              if _ours(type(o).__module__) and not isinstance(o, type)]
    numpy = sys.modules.get("numpy")
    found: dict[str, list[str]] = {}
    parents: dict[int, tuple[int, str]] = {}
    for root, name in roots:
        if id(root) in parents:
            continue
        parents[id(root)] = (0, name)
        stack: list[object] = [root]
        while stack:
            obj = stack.pop()
            if isinstance(obj, str | bytes | bytearray):
                text = obj if isinstance(obj, str) else bytes(obj).decode("utf-8", "replace")
                folded = text.casefold()
                for marker, low in zip(markers, wanted, strict=False):
                    if low in folded:
                        found.setdefault(marker, []).append(_path(parents, id(obj)))
                continue
            if isinstance(obj, types.ModuleType | type | types.CodeType) or id(obj) in foreign_globals:
                continue  # (a module, class or code object of its own is a root if ours, else not our copy)
            referents = gc.get_referents(obj)
            if numpy is not None and isinstance(obj, numpy.ndarray):  # (its items are not referents)
                if obj.dtype.kind == "O":
                    referents = [*referents, *obj.ravel().tolist()]
                elif obj.dtype.kind in "US":
                    referents = [*referents, obj.tobytes().decode("utf-32-le" if obj.dtype.kind == "U" else "latin-1",
                                                                  "replace")]
            for referent in referents:
                if id(referent) not in parents:
                    parents[id(referent)] = (id(obj), type(referent).__qualname__)
                    stack.append(referent)
    return found


def _path(parents: dict[int, tuple[int, str]], at: int) -> str:
    """How the walk reached an object: the root's name, then the type of each object on the way."""
    steps = []
    while at:
        at, name = parents[at]
        steps.append(name)
    return " -> ".join(reversed(steps))
