"""WebDataset: samples as groups of tar members ``<key>.<field>`` in ``shard-%06d.tar``.

Writing follows the conventions the ``webdataset`` library reads: one member per field,
named ``<key>.<suffix>``, where the suffix ends with an extension saying how the bytes
decode (``.txt`` str, ``.json`` JSON, ``.cls`` int, ``.npy`` array, ``.jpg``/``.png``
image bytes as given, ``.bin`` other bytes).  Members are in a fixed order with fixed
owner and time, so equal samples give equal shard bytes.  A list of bytes takes one
member per item (``<key>.images.0.jpg``, ``<key>.images.1.jpg``, ...) and a mapping's bytes
one member per key beside the mapping's JSON, grouped back on reading
(:mod:`hpcio.formats._nested`).

Reading accepts any WebDataset-style tar.  The key of a member is its path up to the
first dot of the basename (``key_dots=0``, webdataset's ``base_plus_ext``); ``key_dots=k``
keeps ``k`` more dots in the key (``img.0001.jpg`` has key ``img.0001`` with ``key_dots=1``).
Consecutive members with the same key form a sample.  Random access goes through a member
index built by the compiled tar scanner from the headers alone; :func:`iter_tar` streams
a tar from any file object (pipes, object stores) without an index.

"Sidecar" shard sets hold other modalities of the same samples with the same keys in
the same order (for example captions next to images); ``sidecars=[...]`` merges their
fields into each sample, checking that the keys agree.

The package: ``members`` (member names and value decoding), ``reader`` (member index,
random access, streaming), ``writer`` and, here, ``sniff``, ``inspect`` and ``verify``.
"""

from __future__ import annotations

import os

from ...registry import Capabilities
from ..base import files_bytes, inspect_report, verify_samples
from ..reports import InspectReport, VerifyReport
from ..tar_gzip import is_gzip_file, is_gzip_name
from .members import decode_member, member_field, member_suffix, split_name
from .reader import Reader, _is_shard_name, iter_tar, list_shards
from .writer import FIXED_MTIME, SHARD_PATTERN, Writer, merge_index

__all__ = ["NAME", "CAPABILITIES", "sniff", "Reader", "Writer", "iter_tar", "split_name",
           "member_suffix", "member_field", "decode_member", "list_shards", "merge_index", "inspect", "verify",
           "FIXED_MTIME", "SHARD_PATTERN"]

NAME = "webdataset"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)


def sniff(path) -> bool:
    path = os.fspath(path)
    if os.path.isdir(path):
        return any(_is_shard_name(n) for n in os.listdir(path))
    if not os.path.isfile(path):
        return False
    if is_gzip_name(path):
        return is_gzip_file(path)
    with open(path, "rb") as f:
        block = f.read(512)
    # ustar/GNU magic at 257: both the POSIX and the GNU spelling start with "ustar"
    return len(block) == 512 and block[257:262] == b"ustar"


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> InspectReport:
    """Samples, shards and fields of a WebDataset shard set (``fields`` maps each field of
    the first sample to the extension of its member; ``jpg[]`` for a list of members)."""
    with Reader(path) as r:
        fields = {}
        first = next((s for s in r.shards if len(s)), None)
        if first is not None:
            for m in first.members(0):
                suffix = first.suffixes[m]
                field, kind = member_field(suffix)
                ext = suffix.rpartition(".")[2].lower() if kind else None
                head, _, last = field.rpartition(".")
                if head and last.isdigit() and head not in fields:  # a list item: "jpg[]"
                    fields[head] = f"{ext}[]"
                elif not (head and last.isdigit() and fields.get(head) == f"{ext}[]"):
                    fields[field] = ext
        return inspect_report(NAME, path, samples=len(r), shards=len(r.shards), fields=fields,
                              stored_bytes=files_bytes(s.path for s in r.shards),
                              details={"members": sum(len(s.suffixes) for s in r.shards)})


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Check every shard against its ``hashes.json`` entry, then decode every member of
    every sample; ``hashes_checked`` counts the shard hashes and the tar header checksums
    compared (a damaged header ends the check of the dataset)."""
    headers = []

    def open_reader():
        reader = Reader(path)
        headers.append(sum(s.headers for s in reader.shards))
        return reader

    report = verify_samples(NAME, path, open_reader, list_shards, max_errors=max_errors, manifest=True)
    report["hashes_checked"] += sum(headers)
    return report
