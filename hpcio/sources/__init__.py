"""The sources a conversion reads: the one layer between raw datasets and the converter.

* :mod:`.inputs` — which datasets (:class:`Source`, :func:`expand_sources`), how many
  samples and how big (:func:`measure_source`, :func:`size_windows`), and their readers
  (:func:`open_reader`, :class:`ReaderCache`).
* :mod:`.fields` — bytes carried as base64, ``data:`` URLs, references or Hugging Face
  ``{"bytes", "path"}`` structs, turned into bytes as samples are read.
* :mod:`.references` — file paths and ``tar://<shard>#<key>.<suffix>`` references.
* :mod:`.huggingface` — datasets saved by ``datasets.Dataset.save_to_disk``.

>>> import hpcio, os, tempfile
>>> from hpcio.sources import expand_sources, open_reader
>>> path = os.path.join(tempfile.mkdtemp(), "chat.jsonl")
>>> with open(path, "w") as f:
...     _ = f.write('{"image": "data:image/png;base64,iVBORw0KGgo=", "photo": "AAEC"}\\n')
>>> source, = expand_sources(path)
>>> with open_reader(source, {"base64_fields": "photo"}) as reader:
...     reader.read(0)
{'image': b'\\x89PNG\\r\\n\\x1a\\n', 'photo': b'\\x00\\x01\\x02'}
"""

from .fields import DATA_URL_FORMATS, FIELD_OPTIONS, FILE_STRUCT_FORMATS, DecodedReader, FieldDecoder, split_options
from .inputs import (
    BLOCK_BYTES,
    ReaderCache,
    Source,
    disk_bytes,
    expand_sources,
    load_libraries,
    measure_source,
    open_reader,
    size_windows,
    source_format,
)
from .references import References

__all__ = [
    "Source",
    "expand_sources",
    "measure_source",
    "size_windows",
    "disk_bytes",
    "open_reader",
    "source_format",
    "load_libraries",
    "ReaderCache",
    "BLOCK_BYTES",
    "FIELD_OPTIONS",
    "DATA_URL_FORMATS",
    "FILE_STRUCT_FORMATS",
    "FieldDecoder",
    "DecodedReader",
    "References",
    "split_options",
]
