"""The documentation builds with warnings as errors, and the doctests pass."""

from __future__ import annotations

import doctest
import importlib
import os
import pathlib
import subprocess
import sys

import pytest

from hpcio.cli.main import command_modules

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "hpcio"


def _modules_with_doctests() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__main__" or parts[1:2] == ["_core"]:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        examples = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ">>> " in ln]
        # a module whose every example is marked +SKIP has nothing doctest can run
        if any("doctest: +SKIP" not in ln for ln in examples):
            names.append(".".join(parts))
    return names


@pytest.mark.parametrize("module_name", _modules_with_doctests())
def test_doctests(module_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # and their mkdtemp() too
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {module_name}"


def test_doctested_modules_include_the_core_ones():
    assert {"hpcio", "hpcio.errors", "hpcio.registry", "hpcio.dataset", "hpcio.demo"} <= set(
        _modules_with_doctests()
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.parametrize("page", ["index", "install", "quickstart", "api", "cli"])
def test_docs_build_strict(site, page):
    html = site / "index.html" if page == "index" else site / page / "index.html"
    assert html.is_file()


def test_cli_page_has_every_command_help(site):
    html = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for name in command_modules():
        assert f"usage: hpcio {name} " in html, f"hpcio {name} is missing from docs/cli.md"
    assert "usage: hpcio demo generate " in html and "usage: hpcio demo run " in html


def _nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_every_page_is_in_the_navigation(site):
    import yaml

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = set(_nav_pages(config["nav"]))
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert pages - listed == set(), "pages missing from mkdocs.yml's nav"
    for page in listed:
        built = site / ("index.html" if page == "index.md" else page[:-3] + "/index.html")
        assert built.is_file(), page
