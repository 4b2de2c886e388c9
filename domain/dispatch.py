"""One function per type of the first argument: how `decide` picks a command's rule and `evolve` an event's
change of state.

`functools.singledispatch` would do the same, but it pays three Python calls per dispatch (its wrapper, its
`dispatch`, a weak-keyed cache lookup) and both dispatches sit on every write and every event folded. Here a call
is one dictionary lookup by the exact type; a subclass registered under none of its own is resolved once through
its MRO and remembered.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, Generic, TypeVar

R = TypeVar("R")


class ByType(Generic[R]):
    """`dispatcher(first, *rest)` calls the function registered for `type(first)`."""

    def __init__(self, name: str, missing: str) -> None:
        self._name = name
        self._missing = missing
        self._registered: dict[type, Callable[..., R]] = {}
        self._functions: dict[type, Callable[..., R]] = {}
        """By exact type: the registered functions, and the subclasses resolved through their bases so far."""

    def register(self, function: Callable[..., R]) -> Callable[..., R]:
        """Register `function` for the type its first parameter is annotated with."""
        first = next(iter(inspect.signature(function).parameters))
        kind = typing.get_type_hints(function)[first]
        if kind in self._registered:
            raise TypeError(f"{self._name} already has a function for {kind.__name__}")
        self._registered[kind] = function
        self._functions = dict(self._registered)
        return function

    def handles(self, kind: type) -> bool:
        """Whether a function is registered for `kind` itself (not through one of its bases)."""
        return kind in self._registered

    def __call__(self, first: Any, *rest: Any) -> R:
        function = self._functions.get(type(first))
        if function is None:
            function = self._resolve(type(first))
        return function(first, *rest)

    def _resolve(self, kind: type) -> Callable[..., R]:
        for base in kind.__mro__[1:]:
            function = self._registered.get(base)
            if function is not None:
                self._functions[kind] = function
                return function
        raise TypeError(self._missing.format(name=kind.__name__))
