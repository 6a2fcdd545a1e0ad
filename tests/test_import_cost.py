"""``import hpcio`` binds its public names on first use: a fresh process imports what it
reads, and the names behave as if imported eagerly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hpcio

ROOT = Path(__file__).resolve().parents[1]


def _fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter; the JSON it prints last."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


MODULES = "import json, sys; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('hpcio', 'numpy', 'torch'))))"


def test_import_hpcio_imports_none_of_its_modules():
    assert _fresh("import hpcio\n" + MODULES) == ["hpcio", "hpcio._version"]


def test_reading_mds_imports_no_other_format_nor_service(tmp_path):
    path = tmp_path / "ds"
    with hpcio.open_writer(path, format="mds", columns={"id": "int", "text": "str"}) as w:
        w.write({"id": 1, "text": "one"})
    loaded = _fresh(f"import hpcio\nds = hpcio.open({str(path)!r})\nassert ds[0] == {{'id': 1, 'text': 'one'}}\n"
                    + MODULES)
    assert "hpcio.formats.mds.reader" in loaded
    unwanted = ("hpcio.formats.jinx", "hpcio.formats.parquet", "hpcio.formats.webdataset", "hpcio.formats.zarr",
                "hpcio.formats.hdf5", "hpcio.nodecache", "hpcio.mixture", "hpcio.convert", "hpcio.lineage",
                "hpcio.staging", "hpcio.distributed.context", "torch")
    assert [m for m in loaded if m.startswith(unwanted)] == []


def test_the_distributed_names_bind_on_first_use():
    got = _fresh("import sys, json\nfrom hpcio.distributed import GlobalOrder\n"
                 "before = 'hpcio.distributed.context' in sys.modules\n"
                 "import hpcio.distributed as d\n"
                 "print(json.dumps([before, d.RuntimeContext.__module__, 'infer_context' in dir(d),"
                 " [n for n in d.__all__ if getattr(d, n, None) is None]]))")
    assert got == [False, "hpcio.distributed.context", True, []]
    with pytest.raises(AttributeError, match=r"^module 'hpcio.distributed' has no attribute 'Order'$"):
        hpcio.distributed.Order  # noqa: B018


def test_convert_is_the_function_whichever_module_is_imported_first():
    got = _fresh("import hpcio.convert.spec, hpcio, json\n"
                 "from hpcio.convert import ConvertOptions\n"
                 "from hpcio.convert.api import convert\n"
                 "print(json.dumps([hpcio.convert is convert, ConvertOptions.__name__]))")
    assert got == [True, "ConvertOptions"]


def test_every_public_name_resolves():
    got = _fresh("import hpcio, json\n"
                 "print(json.dumps([n for n in hpcio.__all__ if getattr(hpcio, n, None) is None]"
                 " + [n for n in hpcio.__all__ if n not in dir(hpcio)]))")
    assert got == []
    assert hpcio.open.__module__ == "hpcio.dataset" and hpcio.Mixture.__name__ == "Mixture"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match=r"^module 'hpcio' has no attribute 'opne'$"):
        hpcio.opne  # noqa: B018
