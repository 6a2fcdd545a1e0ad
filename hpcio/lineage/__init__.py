"""Provenance of converted samples: the lineage record and :func:`locate`.

* :mod:`.record` — the record ``hpcio convert`` leaves in ``<dataset>/.hpcio/`` and the
  mapping from a dataset index to the source sample it came from.
* :mod:`.places` — where a sample's bytes lie in a dataset or source file, per format.
* :mod:`.location` — :func:`locate`, both put together (``hpcio locate``).
"""

from ..errors import LineageNotFoundError
from .location import Location, locate
from .places import Place
from .record import Lineage, load_lineage

__all__ = ["Location", "Place", "locate", "Lineage", "LineageNotFoundError", "load_lineage"]
