"""The format contract: check_format, register_format, and formats installed through the
``hpcio.formats`` entry-point group by a real (temporary) distribution."""

from __future__ import annotations

import os
import re
import sys
import textwrap
import types

import pytest

import hpcio
from hpcio import registry
from hpcio.errors import CapabilityError, FormatContractError, FormatPluginError, UnknownFormatError
from hpcio.formats import jsonl
from hpcio.registry import Capabilities, check_format, format_hook


def fake_format(name="fake", **hooks) -> types.ModuleType:
    """A format module borrowing jsonl's reader and writer, with the given hooks."""
    module = types.ModuleType(f"fake_{name}")
    module.NAME = name
    module.CAPABILITIES = Capabilities()
    module.sniff = lambda path: False
    module.Reader = hooks.pop("Reader", jsonl.Reader)
    module.Writer = hooks.pop("Writer", jsonl.Writer)
    for key, value in hooks.items():
        setattr(module, key, value)
    return module


@pytest.fixture
def clean_registry():
    """The registry as it is, restored after the test (entry points scanned afresh)."""
    saved = (dict(registry._registered), registry._entry_points_scanned, dict(registry._plugin_errors))
    registry._entry_points_scanned = False
    registry._plugin_errors.clear()
    yield registry
    registry._registered.clear()
    registry._registered.update(saved[0])
    registry._entry_points_scanned = saved[1]
    registry._plugin_errors.clear()
    registry._plugin_errors.update(saved[2])


def test_missing_and_mistyped_names():
    module = types.ModuleType("bare")
    assert check_format(module) == [f"bare lacks {n}" for n in ("NAME", "CAPABILITIES", "sniff", "Reader", "Writer")]
    module = fake_format(NAME="", CAPABILITIES={"random_access": True}, Reader=object())
    assert check_format(module) == [
        "fake_fake.NAME must be a non-empty str, not ''",
        "fake_fake.CAPABILITIES must be a hpcio.registry.Capabilities, not dict",
        "fake_fake.Reader must be a class",
    ]


def test_hook_signatures_are_compared_with_the_protocols():
    def verify(path):
        return {}

    def inspect(path, level):
        return {}

    assert check_format(fake_format(verify=verify, inspect=inspect)) == [
        "fake_fake.inspect(path): parameter 'level' needs a default: the contract does not pass it",
        "fake_fake.verify(path, *, allow_pickle=False, max_errors=1000): lacks the keyword parameter 'allow_pickle'",
        "fake_fake.verify(path, *, allow_pickle=False, max_errors=1000): lacks the keyword parameter 'max_errors'",
    ]

    def verify_defaults(path, *, allow_pickle=True, max_errors=1000, strict):
        return {}

    def verify_kwargs(path, **options):
        return {}

    assert check_format(fake_format(verify=verify_defaults)) == [
        "fake_fake.verify(path, *, allow_pickle=False, max_errors=1000): parameter 'allow_pickle' "
        "defaults to True, the contract says False",
        "fake_fake.verify(path, *, allow_pickle=False, max_errors=1000): keyword parameter 'strict' "
        "needs a default: the contract does not pass it",
    ]
    assert check_format(fake_format(verify=verify_kwargs))[0].endswith(
        "lacks the keyword parameter 'allow_pickle' (taking it through **kwargs hides its default)")
    assert check_format(fake_format(inspect=os)) == [
        "fake_fake.inspect is a module, not the inspect hook (import it under another name)"]
    assert check_format(fake_format(sniff=lambda: True)) == [
        "fake_fake.sniff(path): takes 0 positional parameters, the contract passes 1"]


def test_hook_groups_must_be_complete():
    def merge_index(directory, parts, **options):
        pass

    def record_encoder(path, *, columns, **options):  # options it names need no default
        pass

    assert check_format(fake_format(merge_index=merge_index)) == [
        "fake_fake.Writer.__init__(path, *, shard_id, num_shards, **options): lacks the keyword parameter 'shard_id'",
        "fake_fake.Writer.__init__(path, *, shard_id, num_shards, **options): lacks the keyword parameter 'num_shards'",
        "fake_fake.Writer lacks index_part, part of the sharded-writing hook",
    ]
    assert check_format(fake_format(record_encoder=record_encoder, record_layout=record_encoder)) == [
        "fake_fake.record_layout(shard_id, lengths, **options): takes 1 positional parameters, the contract passes 2",
        "fake_fake lacks record_options, part of the encoded-record hook",
        "fake_fake lacks merge_index, part of the encoded-record hook",
        "fake_fake.Writer lacks write_record, part of the encoded-record hook",
    ]
    assert check_format(fake_format(record_layout=lambda shard_id, lengths, **o: None)) == [
        "fake_fake has record_layout but not record_encoder, which the placed-record hook needs"]


def test_reader_sample_nbytes_takes_a_window():
    class Whole(jsonl.Reader):
        def sample_nbytes(self):
            pass

    class NoDefaults(jsonl.Reader):
        def sample_nbytes(self, first, last=-1):
            pass

    class Renamed(jsonl.Reader):  # positional names are free
        def sample_nbytes(self, a=0, b=None, *, step=1):
            pass

    assert check_format(fake_format(Reader=Whole)) == [
        "fake_fake.Reader.sample_nbytes(start=0, stop=None): takes 1 positional parameters, the contract passes 3"]
    assert check_format(fake_format(Reader=NoDefaults)) == [
        "fake_fake.Reader.sample_nbytes(start=0, stop=None): " + why for why in (
            "parameter 'first' defaults to nothing, the contract says 0",
            "parameter 'last' defaults to -1, the contract says None")]
    assert check_format(fake_format(Reader=Renamed)) == [] == check_format(fake_format())


def test_register_format_refuses_a_broken_module(clean_registry):
    with pytest.raises(FormatContractError, match=(
            r"^format module 'fake_broken' breaks the format contract: fake_broken.verify\(path, \*, "
            r"allow_pickle=False, max_errors=1000\): lacks the keyword parameter 'allow_pickle'; ")):
        registry.register_format(fake_format("broken", verify=lambda path: {}))
    assert "broken" not in registry.available_formats()


def test_format_hook(clean_registry):
    module = fake_format("hooked", verify=lambda path: {})
    registry._registered["hooked"] = module  # as a built-in would be: checked when used
    with pytest.raises(CapabilityError, match=r"^format 'hooked' has no inspect$"):
        format_hook(module, "inspect")
    with pytest.raises(FormatContractError, match=r"^format 'hooked': .*lacks the keyword parameter 'allow_pickle'"):
        format_hook(module, "verify")
    assert format_hook(hpcio.get_format("jsonl"), "verify") is jsonl.verify


# --- entry points ---------------------------------------------------------------------
PLUGIN = '''
from hpcio.formats.jsonl import CAPABILITIES, Reader, Writer, inspect as _inspect, verify as _verify

NAME = "plugfmt"


def sniff(path):
    return str(path).endswith(".plug")


def inspect(path):
    return {**_inspect(path), "format": NAME}


def verify(path, *, allow_pickle=False, max_errors=1000):
    return {**_verify(path, max_errors=max_errors), "format": NAME}
'''


@pytest.fixture
def installed_plugins(tmp_path, monkeypatch, clean_registry):
    """A distribution ``hpcio-test-plugins`` installed on sys.path with four entry points:
    a working format, one that fails to import, one that breaks the contract, and one
    that claims a built-in name."""
    site = tmp_path / "site"
    dist = site / "hpcio_test_plugins-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hpcio-test-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""\
        [hpcio.formats]
        plugfmt = hpcio_test_plug
        brokenfmt = hpcio_test_broken
        badfmt = hpcio_test_bad:module
        mds = hpcio_test_plug
        """))
    (site / "hpcio_test_plug.py").write_text(PLUGIN)
    (site / "hpcio_test_broken.py").write_text("raise RuntimeError('cannot start')\n")
    (site / "hpcio_test_bad.py").write_text(
        "import types\nmodule = types.ModuleType('bad')\nmodule.NAME = 'badfmt'\n")
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in ("hpcio_test_plug", "hpcio_test_broken", "hpcio_test_bad"):
        sys.modules.pop(name, None)


DIST = "(group hpcio.formats) of distribution hpcio-test-plugins 1.0"


def test_entry_point_formats_load_lazily(installed_plugins):
    assert "plugfmt" not in registry._registered  # nothing scanned on import
    names = registry.available_formats()
    assert names[:len(registry._BUILTIN)] == list(registry._BUILTIN)
    assert names[len(registry._BUILTIN):] == ["plugfmt", "brokenfmt", "badfmt"]
    assert "hpcio_test_plug" not in sys.modules  # listed, not imported
    module = hpcio.get_format("plugfmt")
    assert module.NAME == "plugfmt" and module is sys.modules["hpcio_test_plug"]


def test_an_unknown_name_scans_the_entry_points(installed_plugins):
    assert hpcio.get_format("plugfmt").NAME == "plugfmt"
    with pytest.raises(UnknownFormatError, match=r"known formats: .*jsonl, plugfmt, brokenfmt, badfmt$"):
        hpcio.get_format("nope")


def test_broken_entry_points_say_which_distribution(installed_plugins):
    with pytest.raises(FormatPluginError, match=(
            rf"^entry point brokenfmt = hpcio_test_broken {re.escape(DIST)} fails to import: "
            r"RuntimeError: cannot start$")):
        hpcio.get_format("brokenfmt")
    with pytest.raises(FormatContractError, match=(
            rf"^entry point badfmt = hpcio_test_bad:module {re.escape(DIST)} breaks the format contract: "
            r"bad lacks CAPABILITIES; bad lacks sniff; bad lacks Reader; bad lacks Writer$")):
        hpcio.get_format("badfmt")
    errors = registry.plugin_errors()
    assert sorted(errors) == ["badfmt", "brokenfmt", "mds"]
    assert str(errors["mds"]) == (
        f"entry point mds = hpcio_test_plug {DIST} names the format 'mds', which is already "
        "registered; ignored")


def test_broken_entry_points_never_break_builtin_formats(installed_plugins, tmp_path):
    assert hpcio.get_format("mds").__name__ == "hpcio.formats.mds"
    path = str(tmp_path / "a.jsonl")
    with hpcio.open_writer(path, format="jsonl") as w:
        w.write({"x": 1})
    assert hpcio.sniff_format(path).NAME == "jsonl"
    plug = str(tmp_path / "b.plug")
    os.rename(path, plug)
    assert hpcio.sniff_format(plug).NAME == "plugfmt"  # after the built-ins decline
    assert hpcio.get_format("plugfmt").verify(plug)["ok"] is True


def test_a_format_registered_by_import_path_is_checked_when_first_used(clean_registry, tmp_path, monkeypatch):
    (tmp_path / "hpcio_test_lazy.py").write_text("NAME = 'lazyfmt'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.register_format("hpcio_test_lazy", name="lazyfmt")
    try:
        with pytest.raises(FormatContractError, match=(
                r"^format module 'hpcio_test_lazy' breaks the format contract: hpcio_test_lazy lacks CAPABILITIES; ")):
            hpcio.get_format("lazyfmt")
    finally:
        sys.modules.pop("hpcio_test_lazy", None)
