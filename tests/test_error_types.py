"""Every error hpcio raises on purpose is an ``HpcioError``: outside the compiled core no
``raise`` names a plain built-in exception.  The typed errors subclass the matching
built-in, so a caller's ``except ValueError`` keeps working."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import hpcio
from hpcio import errors

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hpcio"

# Raises that never leave hpcio: their callers catch them and raise a typed error whose
# message names them (so changing their class would change that message).
CAUGHT_BY_THE_CALLER = {
    # the manifest parser turns them into CorruptShardError("not a valid staging manifest: TypeError(...)")
    "hpcio/staging/manifest.py": {"TypeError"},
}
# Modules that import nothing of hpcio, so that an interpreter without hpcio's compiled
# core (a peer's environment) can load them from their file; hpcio's callers turn their
# plain errors into typed ones.
STANDALONE = {
    "hpcio/formats/mds/streaming_encodings.py": {"ValueError"},
}

BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}
# Raised to drive Python's own protocols, not as errors of hpcio.
PROTOCOL = {"StopIteration", "StopAsyncIteration", "KeyboardInterrupt", "SystemExit", "GeneratorExit"}


def _modules() -> list[Path]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("hpcio/_core/"):
            continue
        out.append(path)
    return out


def _raised_name(node: ast.Raise) -> str | None:
    exc = node.exc
    if isinstance(exc, ast.Call):
        exc = exc.func
    return exc.id if isinstance(exc, ast.Name) else None


def _names(node) -> set[str]:
    """The exception names an ``except`` clause catches."""
    if node is None:
        return {"BaseException"}
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    return {item.id for item in items if isinstance(item, ast.Name)}


def plain_raises(text: str, rel: str) -> list[str]:
    """``rel:line: Name`` of each raise of a plain built-in exception in the module ``text``.

    Allowed: ``AttributeError`` in a ``__getattr__`` (Python's protocol), and a raise
    that a handler of its own enclosing ``try`` catches (it never leaves the function)."""
    tree = ast.parse(text, rel)
    # A module may bind a built-in's name to something else (an import, a class).
    shadowed = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    shadowed |= {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 for a in node.names}
    shadowed |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    found = []

    def visit(node, function: str, caught: set[str]) -> None:
        if isinstance(node, ast.Raise):
            name = _raised_name(node)
            if (name in BUILTIN_EXCEPTIONS and name not in PROTOCOL and name not in shadowed
                    and name not in caught and not (name == "AttributeError" and function == "__getattr__")):
                found.append(f"{rel}:{node.lineno}: {name}")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            function, caught = getattr(node, "name", "<lambda>"), set()
        if isinstance(node, ast.Try):
            inner = caught | set().union(*(_names(h.type) for h in node.handlers))
            for child in node.body:
                visit(child, function, inner)
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child, function, caught)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, function, caught)

    visit(tree, "", set())
    return found


def test_the_scan_sees_the_package():
    assert len(_modules()) > 100


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_raise_of_a_plain_builtin_exception(path):
    rel = path.relative_to(ROOT).as_posix()
    allowed = CAUGHT_BY_THE_CALLER.get(rel, set()) | STANDALONE.get(rel, set())
    found = [f for f in plain_raises(path.read_text(encoding="utf-8"), rel) if f.rsplit(": ", 1)[1] not in allowed]
    assert found == [], "raise the matching hpcio.errors class (an HpcioError subclassing the built-in)"


def test_the_scan_finds_a_plain_raise():
    text = "def f(x):\n    if x:\n        raise ValueError('bad')\n    raise KeyError\n"
    assert plain_raises(text, "m.py") == ["m.py:3: ValueError", "m.py:4: KeyError"]
    assert plain_raises("from .errors import ValueError\nraise ValueError('x')\n", "m.py") == []
    caught_here = "try:\n    raise TypeError\nexcept (TypeError, KeyError):\n    pass\n"
    assert plain_raises(caught_here, "m.py") == []
    assert plain_raises("try:\n    pass\nexcept KeyError:\n    raise TypeError('x')\n", "m.py") == ["m.py:4: TypeError"]
    protocol = "class A:\n    def __getattr__(self, name):\n        raise AttributeError(name)\n"
    assert plain_raises(protocol, "m.py") == []


@pytest.mark.parametrize("name", ["InvalidArgumentError", "WrongTypeError", "KeyNotFoundError", "ClosedError"])
def test_the_often_raised_errors_are_exported(name):
    assert name in hpcio.__all__
    assert getattr(hpcio, name) is getattr(errors, name)
    assert issubclass(getattr(hpcio, name), hpcio.HpcioError)
