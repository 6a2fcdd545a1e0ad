"""A Reader over a Python list: a real in-memory format for the distributed tests."""

from __future__ import annotations

import numpy as np
import pytest

from hpcio.dataset import Dataset
from hpcio.formats.base import Reader, project


class ListReader(Reader):
    """Samples ``{"id": i, "text": "sample i"}``; counts ``read_many`` calls."""

    def __init__(self, n: int, path: str = "memory://list", shards=None):
        super().__init__(path)
        self.shards = shards
        self.samples = [{"id": i, "text": f"sample {i}"} for i in range(n)]
        self.fields = ["id", "text"]
        self.batch_calls = 0

    def __len__(self) -> int:
        return len(self.samples)

    def shard_sizes(self):
        return self.shards

    def read(self, i, fields=None):
        return project(self.samples[self.check_index(i)], fields)

    def read_many(self, indices, fields=None):
        self.batch_calls += 1
        return [project(self.samples[i], fields) for i in np.asarray(indices).tolist()]


@pytest.fixture
def make_dataset():
    return lambda n, shards=None: Dataset(ListReader(n, shards=shards))
