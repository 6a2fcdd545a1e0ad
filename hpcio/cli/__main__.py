"""``python -m hpcio.cli``: the same as the ``hpcio`` command."""

import sys

from .main import main

sys.exit(main())
