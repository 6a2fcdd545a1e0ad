"""Small value classes for the modules every ``hpcio.open`` imports.

A dataclass costs about a millisecond to define: five of them on the path of a fresh
process's first open took about 5 of its 30 ms.  A
:class:`Struct` subclass names its ``_fields`` (and ``_defaults``, a value, or a callable
in ``_factories`` called for each instance) and gets the constructor, equality, hash,
repr and pickling of a dataclass, frozen unless ``_frozen`` is False.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .errors import HpcioError, WrongTypeError

__all__ = ["Struct", "FrozenError"]


class FrozenError(HpcioError, AttributeError):
    """A field of a frozen :class:`Struct` was assigned."""


class Struct:
    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    _factories: ClassVar[dict[str, Any]] = {}
    _frozen: ClassVar[bool] = True

    def __init__(self, *args, **kwargs):
        fields = self._fields
        if len(args) > len(fields):
            raise WrongTypeError(f"{type(self).__name__}() takes {len(fields)} arguments, {len(args)} given")
        values = dict(zip(fields, args))
        for name, value in kwargs.items():
            if name not in fields or name in values:
                raise WrongTypeError(f"{type(self).__name__}() got an unexpected or repeated argument {name!r}")
            values[name] = value
        for name in fields:
            if name in values:
                value = values[name]
            elif name in self._factories:
                value = self._factories[name]()
            elif name in self._defaults:
                value = self._defaults[name]
            else:
                raise WrongTypeError(f"{type(self).__name__}() missing argument {name!r}")
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        if self._frozen:
            raise FrozenError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        if self._frozen:
            raise FrozenError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")
        object.__delattr__(self, name)

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self._fields)

    def _asdict(self) -> dict:
        return {name: getattr(self, name) for name in self._fields}

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self):
        if not self._frozen:
            raise WrongTypeError(f"unhashable type: {type(self).__name__!r}")
        return hash(self._values())

    def __repr__(self):
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__qualname__}({inner})"

    def __reduce__(self):
        return type(self), self._values()
