"""The keyed bijection kernel (csrc/order.c) against the numpy Feistel network it replaced."""

import re

import numpy as np
import pytest

from hpcio._bijection import ROUNDS, Bijection
from hpcio._core import _index
from hpcio.convert.order import SeededOrder
from hpcio.errors import IndexOutOfRangeError, InvalidArgumentError, WrongTypeError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


class Oracle:
    """The numpy evaluation that defined every seeded order before the kernel: the
    reference the kernel must match bit for bit."""

    def __init__(self, n, keys):
        self.n = int(n)
        self.keys = np.asarray(keys, dtype=np.uint64)
        bits = max(2, int(self.n - 1).bit_length())
        self._half = np.uint64((bits + 1) // 2)
        self._mask = np.uint64((1 << int(self._half)) - 1)

    def _mix(self, half, key):
        z = (half + key) * _GOLDEN
        z ^= z >> np.uint64(30)
        z *= _MIX1
        z ^= z >> np.uint64(27)
        z *= _MIX2
        z ^= z >> np.uint64(31)
        return z & self._mask

    def _encrypt(self, x):
        left, right = x >> self._half, x & self._mask
        for key in self.keys:
            left, right = right, left ^ self._mix(right, key)
        return (left << self._half) | right

    def _decrypt(self, x):
        left, right = x >> self._half, x & self._mask
        for key in self.keys[::-1]:
            left, right = right ^ self._mix(left, key), left
        return (left << self._half) | right

    def _walk(self, step, values):
        with np.errstate(over="ignore"):
            x = step(np.asarray(values, dtype=np.int64).astype(np.uint64))
            n = np.uint64(self.n)
            outside = np.flatnonzero(x >= n)
            while len(outside):
                x[outside] = step(x[outside])
                outside = outside[x[outside] >= n]
        return x.astype(np.int64)

    def forward(self, positions):
        return self._walk(self._encrypt, positions)

    def inverse(self, indices):
        return self._walk(self._decrypt, indices)


def seeded_keys(seed):
    """SeededOrder's keys: below 2**63."""
    return np.random.default_rng(seed).integers(0, 2**63, ROUNDS, dtype=np.int64).astype(np.uint64)


def full_keys(seed):
    """GlobalOrder's keys: any 64-bit word, so right + key wraps."""
    return np.random.SeedSequence([seed, 0]).generate_state(ROUNDS, np.uint64)


KEYS = {
    "seeded0": seeded_keys(0),
    "seeded1": seeded_keys(1),
    "full3": full_keys(3),
    "top": np.full(ROUNDS, 2**64 - 1, dtype=np.uint64),
    "zero": np.zeros(ROUNDS, dtype=np.uint64),
}

# Every width of the network, each at and around its power of two (where bits and half
# change), the largest n, and the sizes of real datasets.
LARGE_N = sorted(
    {n for p in range(1, 64) for n in (2**p - 1, 2**p, 2**p + 1) if 1 <= n < 2**63}
    | {1, 2, 3, 5, 6, 7, 10, 100, 1000, 10**6, 10**8, 10**9, 10**10, 10**12, 2**62 + 1,
       2**63 - 2, 2**63 - 1}
)
SMALL_N = list(range(1, 40)) + [63, 64, 65, 100, 255, 256, 257, 1000, 1023, 1024, 1025, 4099]


def probe_positions(n, seed=0, count=700):
    """Random positions of [0, n) and the ends of the range."""
    rng = np.random.default_rng(seed)
    edges = np.array([0, 1, n // 2, n - 2, n - 1], dtype=np.int64)
    edges = edges[(edges >= 0) & (edges < n)]
    return np.concatenate([edges, rng.integers(0, n, size=count, dtype=np.int64)])


@pytest.fixture(params=sorted(KEYS))
def keys(request):
    return KEYS[request.param]


# ---- equality with the numpy evaluation --------------------------------------------------

@pytest.mark.parametrize("n", LARGE_N)
def test_forward_and_inverse_match_the_numpy_oracle(n, keys):
    p = probe_positions(n)
    oracle = Oracle(n, keys)
    got = _index.bijection_forward(keys, n, p)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, oracle.forward(p))
    np.testing.assert_array_equal(_index.bijection_inverse(keys, n, p), oracle.inverse(p))


@pytest.mark.parametrize("n", LARGE_N)
def test_inverse_undoes_forward(n, keys):
    p = probe_positions(n, seed=1)
    b = Bijection(n, keys)
    np.testing.assert_array_equal(b.inverse(b.forward(p)), p)
    np.testing.assert_array_equal(b.forward(b.inverse(p)), p)


@pytest.mark.parametrize("n", [10**8, 10**10, 2**62 + 1, 2**63 - 1])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_forward_range_matches_forward_of_arange(n, where, keys):
    # 1000 positions: several of the kernel's blocks, the last one partial.
    count = 1000
    start = {"start": 0, "middle": n // 3, "end": n - count}[where]
    want = Oracle(n, keys).forward(np.arange(start, start + count, dtype=np.int64))
    np.testing.assert_array_equal(_index.bijection_forward_range(keys, n, start, count), want)
    np.testing.assert_array_equal(Bijection(n, keys).forward_range(start, count), want)


@pytest.mark.parametrize("n", [2**63 - 1, 10**10 + 7])
def test_seeded_order_gives_the_numpy_order(n):
    p = probe_positions(n, seed=2)
    for seed in (0, 1, 7):
        order, oracle = SeededOrder(n, seed), Oracle(n, seeded_keys(seed))
        np.testing.assert_array_equal(order.forward(p), oracle.forward(p))
        np.testing.assert_array_equal(order.inverse(p), oracle.inverse(p))


def test_seeded_order_golden_values():
    """Orders written down from the numpy evaluation: a change to the kernel and the
    oracle together still shows here."""
    assert SeededOrder(10, 1).forward(np.arange(10)).tolist() == [7, 2, 8, 5, 6, 3, 1, 0, 4, 9]
    assert SeededOrder(2**63 - 1, 7).forward(np.array([0, 1, 2**62, 2**63 - 2])).tolist() == [
        7513333093102482046, 2206617371759119021, 2774901607731616025, 1527900971868518202]
    assert SeededOrder(10**10, 0).forward(np.array([0, 1, 123456789, 10**10 - 1])).tolist() == [
        1135910726, 5964334903, 516561244, 2763951142]


# ---- a bijection of [0, n) -----------------------------------------------------------------

@pytest.mark.parametrize("n", SMALL_N)
def test_small_n_is_a_permutation_of_the_whole_range(n, keys):
    b = Bijection(n, keys)
    every = np.arange(n, dtype=np.int64)
    image = b.forward(every)
    np.testing.assert_array_equal(np.sort(image), every)
    np.testing.assert_array_equal(image, Oracle(n, keys).forward(every))
    np.testing.assert_array_equal(b.forward_range(0, n), image)
    np.testing.assert_array_equal(b.inverse(image), every)


def test_keys_change_the_order():
    a = Bijection(1000, KEYS["seeded0"]).forward_range(0, 1000)
    b = Bijection(1000, KEYS["seeded1"]).forward_range(0, 1000)
    assert (a != b).mean() > 0.9


def test_shape_is_kept():
    b = Bijection(100, KEYS["seeded0"])
    grid = np.arange(12).reshape(3, 4)
    out = b.forward(grid)
    assert out.shape == (3, 4)
    np.testing.assert_array_equal(out.ravel(), b.forward(grid.ravel()))
    assert b.forward(np.int64(5)).shape == ()
    assert int(b.forward(5)) == int(out.ravel()[5])


def test_empty_inputs():
    for n in (0, 1, 10):
        b = Bijection(n, KEYS["seeded0"])
        for got in (b.forward([]), b.inverse(np.empty(0, np.uint64)), b.forward_range(0, 0),
                    b.forward_range(n + 5, 0)):
            assert got.dtype == np.int64 and got.shape == (0,)


def test_unsigned_and_narrow_positions():
    b = Bijection(1000, KEYS["full3"])
    p = np.arange(1000)
    want = b.forward(p)
    for dtype in (np.uint64, np.int32, np.uint16):
        np.testing.assert_array_equal(b.forward(p.astype(dtype)), want)


# ---- errors --------------------------------------------------------------------------------

def out_of_range(text):
    return pytest.raises(IndexOutOfRangeError, match="^" + re.escape(text) + "$")


def test_position_out_of_range_is_named():
    b = Bijection(10, KEYS["seeded0"])
    with out_of_range("position 10 out of range [0, 10)") as info:
        b.forward([3, 10, 11])
    assert isinstance(info.value, IndexError)
    with out_of_range("position -1 out of range [0, 10)"):
        b.forward(np.array([0, -1]))
    with out_of_range("index 12 out of range [0, 10)"):
        b.inverse([12])
    with out_of_range(f"position {2**64 - 1} out of range [0, 10)"):
        b.forward(np.array([2**64 - 1], dtype=np.uint64))
    with out_of_range("position 0 out of range [0, 0)"):
        Bijection(0, KEYS["seeded0"]).forward([0])


def test_first_bad_position_past_a_block_is_named():
    p = np.arange(1000)
    p[700] = 5000
    p[900] = -3
    with out_of_range("position 5000 out of range [0, 1000)"):
        _index.bijection_forward(KEYS["seeded0"], 1000, p)


def test_forward_range_out_of_range():
    b = Bijection(10, KEYS["seeded0"])
    with out_of_range("position 10 out of range [0, 10)"):
        b.forward_range(5, 6)
    with out_of_range("position -1 out of range [0, 10)"):
        b.forward_range(-1, 2)
    with out_of_range("position 12 out of range [0, 10)"):
        b.forward_range(12, 1)
    with out_of_range(f"position {2**70} out of range [0, 10)"):
        b.forward_range(2**70, 1)
    with out_of_range(f"position {2**63 - 1} out of range [0, {2**63 - 1})"):
        _index.bijection_forward_range(KEYS["seeded0"], 2**63 - 1, 2**63 - 2, 2)
    with pytest.raises(InvalidArgumentError, match=r"^count must be >= 0, got -1$"):
        b.forward_range(0, -1)


@pytest.mark.parametrize("n", [-1, 2**63, 2**64])
def test_n_out_of_range(n):
    msg = rf"^a bijection covers 0 <= n < 2\*\*63 values, got n = {n}$"
    with pytest.raises(InvalidArgumentError, match=msg):
        Bijection(n, KEYS["seeded0"])
    with pytest.raises(InvalidArgumentError, match=msg):
        _index.bijection_forward(KEYS["seeded0"], n, [0])
    with pytest.raises(InvalidArgumentError, match=msg):
        _index.bijection_forward_range(KEYS["seeded0"], n, 0, 1)


def test_positions_must_be_integers():
    b = Bijection(10, KEYS["seeded0"])
    with pytest.raises(WrongTypeError, match=r"^positions must be integers, got dtype float64$"):
        b.forward([1.0])
    with pytest.raises(WrongTypeError, match=r"^indices must be integers, got dtype bool$"):
        b.inverse(np.array([True]))


def test_bad_key_arrays_in_the_kernel():
    with pytest.raises(WrongTypeError,
                       match=r"^bijection keys must be a uint64 array, got dtype int64$"):
        _index.bijection_forward(np.arange(ROUNDS), 10, [0])
    with pytest.raises(InvalidArgumentError,
                       match=r"^bijection keys must be 6 words \(one per round\), got shape \(5,\)$"):
        _index.bijection_forward(np.arange(5, dtype=np.uint64), 10, [0])
    with pytest.raises(InvalidArgumentError,
                       match=r"^bijection keys must be 6 words \(one per round\), got shape \(2, 6\)$"):
        _index.bijection_forward_range(np.zeros((2, ROUNDS), np.uint64), 10, 0, 1)
    assert _index.BIJECTION_ROUNDS == ROUNDS


def test_bad_key_arrays_in_bijection():
    with pytest.raises(WrongTypeError, match=r"^bijection keys must be integers, got dtype float64$"):
        Bijection(10, np.ones(ROUNDS))
    with pytest.raises(InvalidArgumentError, match=r"^bijection keys must be in \[0, 2\*\*64\), got -1$"):
        Bijection(10, [1, 2, 3, 4, 5, -1])
    with pytest.raises(InvalidArgumentError,
                       match=r"^bijection keys must be 6 words \(one per round\), got shape \(7,\)$"):
        Bijection(10, list(range(7)))
    # Python integers are taken as they are, the largest words included.
    b = Bijection(10, [2**64 - 1] * ROUNDS)
    np.testing.assert_array_equal(b.forward_range(0, 10), Oracle(10, KEYS["top"]).forward(np.arange(10)))
