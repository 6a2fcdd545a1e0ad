"""ragged_collate: stacking what stacks, lists for what is ragged, padding on request."""

from __future__ import annotations

import functools
import pickle
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is the optional [torch] extra")

from hpcio.collate import ragged_collate  # noqa: E402
from hpcio.errors import CollateError  # noqa: E402


def test_equal_shapes_stack_and_numbers_become_tensors_as_default_collate():
    batch = ragged_collate([{"x": np.full((2, 3), i, np.float32), "i": i, "f": i / 2, "b": i > 0}
                            for i in range(4)])
    assert batch["x"].shape == (4, 2, 3) and batch["x"].dtype == torch.float32
    assert batch["i"].dtype == torch.int64 and batch["i"].tolist() == [0, 1, 2, 3]
    assert batch["f"].dtype == torch.float64 and batch["b"].tolist() == [False, True, True, True]
    expected = torch.utils.data.default_collate([{"x": np.full((2, 3), i, np.float32), "i": i}
                                                 for i in range(4)])
    assert torch.equal(batch["x"], expected["x"]) and torch.equal(batch["i"], expected["i"])


def test_ragged_values_stay_lists_one_per_sample():
    samples = [
        {"image": torch.zeros(3, 4, 5), "images": [torch.zeros(3, 2, 2), torch.zeros(3, 4, 4)],
         "messages": [{"role": "user", "content": "hi"}], "text": "a", "raw": b"\xff", "tags": ["qa"]},
        {"image": torch.zeros(3, 6, 5), "images": [torch.zeros(3, 1, 1)],
         "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
         "text": "b", "raw": memoryview(b"\x00"), "tags": []},
    ]
    batch = ragged_collate(samples)
    assert [t.shape for t in batch["image"]] == [(3, 4, 5), (3, 6, 5)]
    assert [len(imgs) for imgs in batch["images"]] == [2, 1]
    assert batch["messages"] == [s["messages"] for s in samples]
    assert batch["text"] == ["a", "b"] and batch["tags"] == [["qa"], []]
    assert batch["raw"] == [b"\xff", b"\x00"] and type(batch["raw"][1]) is bytes
    pickle.dumps(batch)  # crosses from DataLoader workers


def test_mappings_with_the_same_keys_collate_field_by_field():
    batch = ragged_collate([{"meta": {"score": 0.5, "lang": "en"}}, {"meta": {"score": 0.25, "lang": "fr"}}])
    assert batch["meta"]["score"].tolist() == [0.5, 0.25] and batch["meta"]["lang"] == ["en", "fr"]
    other = ragged_collate([{"meta": {"a": 1}}, {"meta": {"b": 2}}])
    assert other["meta"] == [{"a": 1}, {"b": 2}]


def test_pad_fills_to_the_largest_shape_with_a_mask():
    samples = [{"tokens": np.array([1, 2, 3]), "image": torch.ones(1, 2, 2)},
               {"tokens": np.array([4]), "image": torch.ones(1, 3, 1)}]
    batch = ragged_collate(samples, pad=True, pad_value=-1)
    assert batch["tokens"].tolist() == [[1, 2, 3], [4, -1, -1]]
    assert batch["tokens_mask"].tolist() == [[True, True, True], [True, False, False]]
    assert batch["image"].shape == (2, 1, 3, 2) and batch["image_mask"].sum().item() == 4 + 3
    only = ragged_collate(samples, pad=["tokens"])
    assert only["tokens"].shape == (2, 3) and isinstance(only["image"], list) and "image_mask" not in only
    partial = functools.partial(ragged_collate, pad=True)
    assert pickle.loads(pickle.dumps(partial))(samples)["tokens"].shape == (2, 3)


def test_pad_refuses_tensors_of_different_ranks():
    with pytest.raises(CollateError, match="cannot pad field 'x': its tensors have \\[1, 2\\] dimensions"):
        ragged_collate([{"x": torch.zeros(2)}, {"x": torch.zeros(2, 2)}], pad=True)


def test_read_only_arrays_are_copied_without_a_warning():
    frozen = np.arange(4)
    frozen.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batch = ragged_collate([{"x": frozen}, {"x": frozen[:3]}, {"x": np.array([1], dtype=">i4")}])
    assert [t.tolist() for t in batch["x"]] == [[0, 1, 2, 3], [0, 1, 2], [1]]


def test_samples_that_are_not_mappings():
    assert ragged_collate([np.zeros(2), np.ones(2)]).tolist() == [[0, 0], [1, 1]]
    assert ragged_collate(["a", "b"]) == ["a", "b"]
    assert ragged_collate([]) == []
