"""zstd and blosc2 codecs, batch decode with the GIL released (compiled)."""
import numpy as np
from numpy.typing import NDArray

DEFAULT_LIMIT: int  # 1 GiB: largest decompressed value accepted unless the caller says otherwise
# ``limit=None`` accepts any size (trusted data only).

def zstd_compress(data, level: int = 3, content_size: bool = True, checksum: bool = False) -> bytes: ...
def zstd_decompress(data, limit: int | None = ..., *, path: str | None = None, offset: int = -1,
                    sample: int = -1) -> bytes:
    """One frame, with or without the content size in its header (JINX frames lack it)."""
def zstd_decompress_file(in_fd: int, out_fd: int, limit: int | None = ..., *, path: str | None = None) -> int: ...
def zstd_decode_many(src, starts: NDArray[np.uint64], ends: NDArray[np.uint64], limit: int | None = ...,
                     nthreads: int = 1, *, path: str | None = None, sample_base: int = 0,
                     batch_limit: int | None = None) -> tuple[bytearray, NDArray[np.uint64]]:
    """Decode frames src[starts[j]:ends[j]] into one buffer: (data, m+1 positions).
    Each frame's output is bounded by ``limit``, their sum by ``batch_limit``
    (DecompressionLimitError)."""
def blosc2_compress(data, codec: str = "zstd", clevel: int = 5, typesize: int = 1,
                    shuffle: int = 1) -> bytes: ...
def blosc2_decompress(data, limit: int | None = ..., *, path: str | None = None, offset: int = -1,
                      sample: int = -1) -> bytes: ...
def blosc2_decode_many(src, starts: NDArray[np.uint64], ends: NDArray[np.uint64], limit: int | None = ...,
                       nthreads: int = 1, *, path: str | None = None, sample_base: int = 0,
                       batch_limit: int | None = None) -> tuple[bytearray, NDArray[np.uint64]]: ...
def build_info() -> dict:
    """Kernels built, compiler/SIMD flags, libzstd and C-Blosc2 versions.

    Keys: kernels (list of names), compiler, cflags, simd (list of macros such as
    __AVX2__), zstd and blosc2 (run-time library versions), debug and sanitize (bools)."""
