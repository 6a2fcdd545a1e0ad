#!/usr/bin/env python3
"""Print modules over 600 lines and functions over 80 lines (style: one concern per module,
functions a reader holds in one sitting).

Usage: python tools/check_sizes.py [PATH ...]   (default: hpcio csrc tools asv_bench)

Python functions are measured with ``ast`` (decorators to last line, less the docstring:
a public function's numpydoc text is read, not held); Cython ``def``,
``cdef`` and ``cpdef`` functions and C functions by their indentation and braces.
Generated C (a ``.c`` beside a ``.pyx`` of the same name) is skipped.  Exits 1 when
anything is over, so it can run in CI.
"""

from __future__ import annotations

import ast
import os
import re
import sys

MODULE_LINES = 600
FUNCTION_LINES = 80
SUFFIXES = (".py", ".pyx", ".pxd", ".c", ".h")
DEFAULT_PATHS = ("hpcio", "csrc", "tools", "asv_bench")

# Temporary exceptions, each to be removed by the change that fixes it.
# Over the module size, to be split into two extension modules (setup.py lists them).
LONG_MODULES = {"hpcio/_core/_io.pyx"}


def _generated(path: str) -> bool:
    return path.endswith(".c") and os.path.exists(path[:-2] + ".pyx")


def source_files(paths) -> list[str]:
    found = []
    for top in paths:
        if os.path.isfile(top):
            found.append(top)
            continue
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("build", "__pycache__"))
            found.extend(os.path.join(root, f) for f in sorted(files) if f.endswith(SUFFIXES))
    return [f for f in found if not _generated(f)]


def _docstring_lines(node) -> int:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0].end_lineno - body[0].lineno + 1
    return 0


def python_functions(text: str) -> list[tuple[str, int, int]]:
    """``(qualified name, first line, line count)`` of every function, methods included."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    out.append((name, first, child.end_lineno - first + 1 - _docstring_lines(child)))
                visit(child, name + ".")

    visit(ast.parse(text), "")
    return out


_CYTHON_DEF = re.compile(r"^(\s*)(?:async\s+)?(?:c?p?def|cdef\s+inline|cpdef)\s+(?!class\b|extern\b)[^=]*?(\w+)\s*\(")


def cython_functions(lines: list[str]) -> list[tuple[str, int, int]]:
    """Functions of a .pyx/.pxd: from the ``def`` line to the last line indented deeper."""
    out = []
    for i, line in enumerate(lines):
        m = _CYTHON_DEF.match(line)
        if not m or line.rstrip().endswith(("nogil", "noexcept")) and ":" not in line:
            continue
        indent = len(m.group(1))
        last = i
        for j in range(i + 1, len(lines)):
            text = lines[j]
            if text.strip() and not text.lstrip().startswith("#"):
                if len(text) - len(text.lstrip()) <= indent:
                    break
                last = j
        if last > i:
            out.append((m.group(2), i + 1, last - i + 1))
    return out


_C_DEF = re.compile(r"^[A-Za-z_][\w\s\*]*?\b(\w+)\s*\([^;]*$")


def c_functions(lines: list[str]) -> list[tuple[str, int, int]]:
    """Functions of a .c/.h file: a line at column 0 naming a function, to its closing brace."""
    out = []
    i = 0
    while i < len(lines):
        m = _C_DEF.match(lines[i])
        if m and not lines[i].startswith(("static const", "typedef", "#", "return")):
            j = i
            while j < len(lines) and "{" not in lines[j] and ";" not in lines[j]:
                j += 1
            if j < len(lines) and "{" in lines[j]:
                k = j
                while k < len(lines) and lines[k].rstrip() != "}":
                    k += 1
                out.append((m.group(1), i + 1, k - i + 1))
                i = k
        i += 1
    return out


def functions(path: str, text: str) -> list[tuple[str, int, int]]:
    if path.endswith(".py"):
        return python_functions(text)
    if path.endswith((".pyx", ".pxd")):
        return cython_functions(text.splitlines())
    return c_functions(text.splitlines())


def main(argv: list[str]) -> int:
    over = 0
    for path in source_files(argv or DEFAULT_PATHS):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        count = text.count("\n")
        if count > MODULE_LINES and os.path.relpath(path).replace(os.sep, "/") not in LONG_MODULES:
            print(f"{path}: module of {count} lines (over {MODULE_LINES})")
            over += 1
        for name, first, length in functions(path, text):
            if length > FUNCTION_LINES:
                print(f"{path}:{first}: {name} is {length} lines (over {FUNCTION_LINES})")
                over += 1
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
