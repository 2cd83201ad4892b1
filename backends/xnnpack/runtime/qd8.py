"""XNNPACK's dynamically quantized product: qdint8 activation rows' codes times int4 block weights.

XNNPACK runs a FullyConnected from a qdint8 input through a qbint4 filter with its qd8-f32-qb4w
microkernels: the int8 activation codes times the int4 weight codes, summed exactly in int32 per block, then in
float32 `ksum·zero point`, plus each block's sum times its bf16 scale (one fused multiply-add), times the row's
input scale, plus the bias. `ksum` is packed once with the weights: −Σ scale·Σ code, accumulated in float32 over
chunks of 16 inputs (the packing of kernels with kr 8 and two planes, the x86 ones). Doing the same float
operations in the same order gives XNNPACK's bits (checked against ExecuTorch's runtime: every output of a
512 → 1536 8da4w linear on 20 inputs), so the next dynamic quantization rounds as ExecuTorch's runtime does.
What decides it is the epilogue: the input scale multiplied, then the bias added, unfused. (XNNPACK's x86
AVX512-VNNI kernels take the codes unsigned, code + 128 and zero point + 128; with bf16 block scales the
block products are exact in float32 either way, and the signed form gave the same bits on that test.)
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from etbuild.backends.xnnpack.runtime import loops
from etbuild.backends.xnnpack.runtime.values import QuantizedRows, RowWeight
from etbuild.runtime.hugepages import place

CHUNK = 16  # inputs summed into ksum at a time by the packing (kr 8, two planes)


@dataclass(frozen=True)
class Int4Filter:
    """An int4 [N, K] weight for the integer product, in one of two forms. `compiled.qd8_qb4w_matvec`'s: nibbles
    (K/2, N) uint8 (input 2p low, 2p + 1 high, each code + 8) and scales (blocks, N) float32 holding bf16 numbers (a
    fifth of the bytes the loop reads: as bf16 bits, a sixth, but each block's scales took a pass of their own to
    widen, and the loop ran 20% slower); or, on AVX512-VNNI, `vnni.qd8_qb4w_rows`'s: tiles (N/16, bytes a tile)
    uint8 holding the weights and their scales (vnni.pack), nibbles and scales None. ksum (N,) float32 in both;
    blocks: the scales a column holds."""

    nibbles: np.ndarray | None
    scales: np.ndarray | None
    ksum: np.ndarray
    blocks: int
    tiles: np.ndarray | None = None


OUTPUTS_AT_A_TIME = 4096  # outputs packed at a time (a multiple of 16 · vnni.TILES): a vocabulary's head
# (152k outputs) holds a few MB of unpacked codes at once while it is packed, not three times its bytes


def int4_filter(rows: QuantizedRows | RowWeight, tiled: bool = False) -> Int4Filter | None:
    """The integer product's form of an int4 weight, codes (K, N) and scales (blocks, N) or a RowWeight, packed
    OUTPUTS_AT_A_TIME outputs at a time (tiled: the VNNI form where `vnni()` is on), or None unless a block is a
    multiple of CHUNK inputs (XNNPACK's qb4w kernels take multiples of 32) and the scales are bf16 numbers."""
    scales = rows.scales
    k = rows.codes.shape[0] if isinstance(rows, QuantizedRows) else rows.dims[1]
    if (k // scales.shape[0]) % CHUNK:
        return None
    bf16 = np.ascontiguousarray(scales).view(np.uint32) >> 16
    if not np.array_equal(bf16 << 16, scales.view(np.uint32)):
        return None  # scales that are not bf16 numbers: not XNNPACK's qb4w
    if isinstance(rows, QuantizedRows):
        n, codes_of = rows.codes.shape[1], lambda lo, hi: rows.codes[:, lo:hi]
    else:
        n, codes_of = rows.dims[0], lambda lo, hi: rows.ints(lo, hi).T
    parts = [_packed(np.ascontiguousarray(codes_of(lo, min(n, lo + OUTPUTS_AT_A_TIME))),
                     np.asarray(scales[:, lo : lo + OUTPUTS_AT_A_TIME], np.float32), tiled)
             for lo in range(0, max(n, 1), OUTPUTS_AT_A_TIME)]  # no outputs: one empty part
    first = parts[0]
    ksum = np.concatenate([f.ksum for f in parts])
    if first.tiles is not None:  # whole passes of tiles per part: the parts' tiles in order are the whole's
        tiles = first.tiles if len(parts) == 1 else np.concatenate([f.tiles for f in parts])
        return Int4Filter(None, None, ksum, first.blocks, place(tiles))
    nibbles = np.concatenate([f.nibbles for f in parts], axis=1)  # type: ignore[misc]
    return Int4Filter(place(nibbles), np.concatenate([f.scales for f in parts], axis=1), ksum,  # type: ignore[misc]
                      first.blocks)


def _packed(codes: np.ndarray, scales: np.ndarray, tiled: bool) -> Int4Filter:
    """The Int4Filter of codes (K, N) int8 and bf16 scales (blocks, N) float32."""
    ksum = packed_ksum(codes, scales)
    fast = vnni() if tiled else None
    if fast is not None:
        return Int4Filter(None, None, ksum, scales.shape[0], fast.pack(codes, scales))
    unsigned = (codes + 8).astype(np.uint8)
    nibbles = np.ascontiguousarray(unsigned[0::2] | (unsigned[1::2] << 4))
    return Int4Filter(nibbles, np.ascontiguousarray(scales), ksum, scales.shape[0])


def vnni() -> ModuleType | None:
    """The AVX512-VNNI product (module `vnni`), or None without numba, with numba's loops off, or on a CPU without
    AVX512-VNNI and AVX512BW."""
    return _vnni() if loops.compiled() is not None else None


@functools.cache
def _vnni() -> ModuleType | None:
    try:
        from llvmlite import binding

        features = binding.get_host_cpu_features()
        if not (features.get("avx512vnni", False) and features.get("avx512bw", False)):
            return None
        return importlib.import_module("etbuild.backends.xnnpack.runtime.vnni")
    except (ImportError, RuntimeError):  # no llvmlite, or it cannot read this host's features
        return None


def packed_ksum(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """−Σ_k scale·code per output, as XNNPACK's packing accumulates it: float32, CHUNK inputs at a time (blocks
    are multiples of CHUNK)."""
    k = codes.shape[0]
    group = k // scales.shape[0]
    ksum = np.zeros(codes.shape[1], np.float32)
    for start in range(0, k, CHUNK):
        chunk = codes[start : start + CHUNK].sum(axis=0, dtype=np.int32).astype(np.float32)
        ksum = ksum - chunk * scales[start // group]
    return ksum


SPLIT_OUTPUTS = 32768  # a tiled product of at least this many outputs (a real vocabulary's head) splits over the
# pool; smaller ones finish in about the time a worker takes to wake, and on a busy machine a worker that wakes late
# costs more than the split saves (the anchor's 8,192-output head at the default thread count, load 13-17: no gain)
BLOCKS_PER_THREAD = 4  # so that a worker descheduled mid-product holds back at most a small block


def tiled_rows(w: Int4Filter, codes: np.ndarray, params: np.ndarray, bias: np.ndarray, out: np.ndarray,
               count: int, run: Callable[[Callable[[int], object], int], None] | None) -> Callable[[], None]:
    """The step computing out (M, N) from M qdint8 rows' codes (M, K) and params (M, 2) through a tiled filter,
    split over `run` (Pool.run) into BLOCKS_PER_THREAD · `count` blocks of tiles when there is more than one thread
    and M · N ≥ SPLIT_OUTPUTS: each block writes its own outputs, the same bits on any number of threads."""
    fast = vnni()
    assert fast is not None and w.tiles is not None, "tiled_rows needs the VNNI form"
    tiles, blocks, (m, k) = w.tiles.shape[0], w.blocks, codes.shape
    if run is None or count < 2 or m * out.shape[1] < SPLIT_OUTPUTS:
        return functools.partial(fast.qd8_qb4w_rows, w.tiles, blocks, w.ksum, codes, params, bias,
                                 fast.scratch(m, k, blocks), out, 0, tiles)
    passes = -(-tiles // fast.TILES)  # blocks of whole passes: each block reads its own stretch front to back
    parts = min(passes, BLOCKS_PER_THREAD * count)
    bounds = [min(tiles, fast.TILES * (passes * i // parts)) for i in range(parts + 1)]
    scratches = [fast.scratch(m, k, blocks) for _ in range(parts)]
    product = fast.qd8_qb4w_rows

    def block(i: int) -> None:
        product(w.tiles, blocks, w.ksum, codes, params, bias, scratches[i], out, bounds[i], bounds[i + 1])

    return functools.partial(run, block, parts)
