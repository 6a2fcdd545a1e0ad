"""Collating samples with ragged fields into a batch for PyTorch.

``torch.utils.data.default_collate`` needs every field to have the same shape in every
sample; real samples do not (chat turns, 1-4 images of different sizes, tags).
:func:`ragged_collate` builds a dict of fields where each field is:

- a stacked tensor, when every sample's value is a tensor or numpy array of the same
  shape and dtype, or a number (``int`` gives int64, ``float`` float64, as
  ``default_collate``);
- with ``pad=``, tensors of different shapes padded to the largest with ``pad_value``,
  plus a boolean ``<field>_mask`` marking the real elements;
- a dict of collated fields, when every value is a mapping with the same keys;
- otherwise a list of the values, one per sample: strings, bytes, ``None``, chat
  messages, lists (a sample's list of images stays that sample's list), tensors of
  different shapes.

Numpy arrays become tensors (read-only ones are copied, so torch never shares a
read-only buffer) and ``memoryview`` values become ``bytes``, so batches cross from
DataLoader workers to the main process.

>>> import numpy as np
>>> batch = ragged_collate([{"id": 0, "tokens": np.arange(3), "text": "a"},
...                         {"id": 1, "tokens": np.arange(2), "text": "b"}], pad=True)
>>> batch["id"].tolist(), batch["tokens"].tolist(), batch["tokens_mask"].tolist(), batch["text"]
([0, 1], [[0, 1, 2], [0, 1, 0]], [[True, True, True], [True, True, False]], ['a', 'b'])
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from .errors import CollateError, MissingDependencyError

try:
    import torch
except ImportError as exc:
    raise MissingDependencyError("hpcio.collate needs PyTorch: pip install torch") from exc

__all__ = ["ragged_collate"]


def ragged_collate(samples: Sequence, *, pad: bool | Collection[str] = False, pad_value=0):
    """Collate ``samples`` (mappings, usually) into one batch; see the module doc.

    Parameters
    ----------
    samples : sequence
        The samples of one batch.
    pad : bool or collection of str
        Pad tensors of different shapes (all fields, or the fields named) to the
        largest shape, adding a ``<field>_mask``; without it they stay a list.
    pad_value : number
        The value padded positions hold.
    """
    padded = (lambda name: True) if pad is True else (lambda name: bool(pad) and name in pad)  # type: ignore[operator]
    values = [_prepare(s) for s in samples]
    return _collate(values, None, padded, pad_value)


def _prepare(value):
    """Arrays as tensors, memoryviews as bytes, mappings as dicts, tuples as lists."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        if not value.dtype.isnative:
            value = value.astype(value.dtype.newbyteorder("="))
        return torch.from_numpy(value if value.flags.writeable else value.copy())
    if isinstance(value, (np.number, np.bool_)):
        return torch.as_tensor(value)
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, Mapping):
        return {k: _prepare(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_prepare(v) for v in value]
    return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float))  # bool included: it is an int


def _collate(values: list, name, padded, pad_value):
    if not values:
        return values
    first = values[0]
    if all(isinstance(v, torch.Tensor) for v in values):
        if all(v.shape == first.shape and v.dtype == first.dtype for v in values):
            return torch.stack(values)
        return _pad(values, name, pad_value) if padded(name) else values
    if all(_is_number(v) for v in values):
        floating = any(isinstance(v, float) for v in values)
        return torch.tensor(values, dtype=torch.float64 if floating else None)
    if all(isinstance(v, dict) for v in values) and all(v.keys() == first.keys() for v in values):
        out = {}
        for key in first:
            out[key] = _collate([v[key] for v in values], key, padded, pad_value)
            if isinstance(out[key], tuple):  # padded: the values and their mask
                out[key], out[f"{key}_mask"] = out[key]
        return out
    return values


def _pad(values: list, name, pad_value) -> tuple:
    """Tensors of one rank padded to the largest shape, and the mask of real elements."""
    ndims = {v.ndim for v in values}
    if len(ndims) != 1:
        raise CollateError(f"cannot pad field {name!r}: its tensors have {sorted(ndims)} dimensions")
    shape = [len(values)] + [max(v.shape[d] for v in values) for d in range(values[0].ndim)]
    dtype = functools.reduce(torch.promote_types, {v.dtype for v in values})
    out = torch.full(shape, pad_value, dtype=dtype)
    mask = torch.zeros(shape, dtype=torch.bool)
    for i, v in enumerate(values):
        region = (i,) + tuple(slice(0, n) for n in v.shape)
        out[region] = v
        mask[region] = True
    return out, mask
