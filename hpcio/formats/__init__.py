"""One module per shard format, all exposing the same names.

``NAME``, ``CAPABILITIES``, ``sniff(path)``, ``Reader`` and ``Writer``; see
:mod:`hpcio.registry` for how they are found and :mod:`hpcio.formats.base` for the
reader and writer interfaces.
"""
