"""A small real format for the cache tests: a directory holding one JSON list.

It implements the registry's module surface (NAME, CAPABILITIES, sniff, Reader,
Writer) so ``Pipeline.cache(format="testjson")`` goes through ``hpcio.open_writer`` and
``hpcio.open`` exactly as with a built-in format.
"""

from __future__ import annotations

import json
import os
import shutil

from hpcio.formats.base import Reader as BaseReader, Writer as BaseWriter, project
from hpcio.registry import Capabilities, register_format

NAME = "testjson"
CAPABILITIES = Capabilities(random_access=True)
FILE = "samples.json"


def sniff(path) -> bool:
    return os.path.isfile(os.path.join(path, FILE))


class Reader(BaseReader):
    def __init__(self, path, **options):
        super().__init__(path)
        with open(os.path.join(self.path, FILE)) as f:
            self.samples = json.load(f)

    def __len__(self):
        return len(self.samples)

    def read(self, i, fields=None):
        return project(self.samples[self.check_index(i)], fields)


class Writer(BaseWriter):
    def __init__(self, path, **options):
        super().__init__(path)
        self.samples = []
        os.makedirs(self.path)

    def write(self, sample):
        self.samples.append(dict(sample))
        self.count += 1

    def close(self):
        tmp = os.path.join(self.path, FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(self.samples, f)
        os.replace(tmp, os.path.join(self.path, FILE))

    def abort(self):
        shutil.rmtree(self.path, ignore_errors=True)


def register():
    import sys

    register_format(sys.modules[__name__])
