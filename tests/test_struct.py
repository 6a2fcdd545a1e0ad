"""hpcio._struct.Struct: the value classes of the open path behave as the dataclasses
they replace (constructor, defaults, equality, hash, repr, pickling, frozen fields)."""

from __future__ import annotations

import pickle

import pytest

from hpcio._struct import FrozenError, Struct
from hpcio.formats.base import ShardFile
from hpcio.registry import Capabilities


class Point(Struct):
    _fields = ("x", "y", "tags")
    _defaults = {"y": 0}
    _factories = {"tags": list}
    __slots__ = _fields


class Cell(Struct):
    _fields = ("value",)
    _frozen = False
    __slots__ = _fields


def test_constructor_defaults_and_factories():
    p = Point(1)
    assert (p.x, p.y, p.tags) == (1, 0, []) and Point(1).tags is not p.tags
    assert Point(1, y=2, tags=["a"]) == Point(x=1, y=2, tags=["a"]) != Point(1, 3)
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=[])"
    with pytest.raises(TypeError, match=r"^Point\(\) missing argument 'x'$"):
        Point()
    with pytest.raises(TypeError, match=r"^Point\(\) got an unexpected or repeated argument 'z'$"):
        Point(1, z=2)
    with pytest.raises(TypeError, match=r"^Point\(\) got an unexpected or repeated argument 'x'$"):
        Point(1, x=2)
    with pytest.raises(TypeError, match=r"^Point\(\) takes 3 arguments, 4 given$"):
        Point(1, 2, [], 4)


def test_frozen_unless_said_otherwise():
    p = Point(1)
    with pytest.raises(FrozenError, match=r"^cannot assign to field 'x' of a frozen Point$"):
        p.x = 2
    with pytest.raises(FrozenError, match=r"^cannot delete field 'y' of a frozen Point$"):
        del p.y
    assert hash(Point(1, 2, ())) == hash(Point(1, 2, ()))
    c = Cell(1)
    c.value = 2
    assert c == Cell(2)
    with pytest.raises(TypeError, match=r"^unhashable type: 'Cell'$"):
        hash(c)


def test_pickles_and_compares_by_class():
    for value in (Point(1, 2, ["t"]), Cell(3), ShardFile("a", 3, {"xxh3_64": "00"}), Capabilities(append=True)):
        assert pickle.loads(pickle.dumps(value)) == value
    assert Capabilities().to_json() == {"random_access": True, "append": False, "partial_read": False,
                                        "batch_read": False}
    assert Point(1) != Cell(1)
