"""XNNPACK's dynamically quantized one-row product: qdint8 activation codes times int4 block weights.

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

from dataclasses import dataclass

import numpy as np

from etbuild.backends.xnnpack.runtime.values import QuantizedRows

CHUNK = 16  # inputs summed into ksum at a time by the packing (kr 8, two planes)


@dataclass(frozen=True)
class Int4Filter:
    """An int4 [N, K] weight for the one-row loop: nibbles (K/2, N) uint8 (input 2p low, 2p + 1 high, each code
    + 8), scales (blocks, N) float32 holding bf16 numbers (a fifth of the bytes the loop reads: as bf16 bits,
    a sixth, but each block's scales took a pass of their own to widen, and the loop ran 20% slower) and ksum
    (N,) float32."""

    nibbles: np.ndarray
    scales: np.ndarray
    ksum: np.ndarray


def int4_filter(rows: QuantizedRows) -> Int4Filter | None:
    """The one-row form of an int4 weight's codes (K, N) and scales, or None unless a block is a multiple of CHUNK
    inputs (XNNPACK's qb4w kernels take multiples of 32)."""
    k, _ = rows.codes.shape
    if (k // rows.scales.shape[0]) % CHUNK:
        return None
    unsigned = (rows.codes + 8).astype(np.uint8)
    nibbles = np.ascontiguousarray(unsigned[0::2] | (unsigned[1::2] << 4))
    bf16 = np.ascontiguousarray(rows.scales).view(np.uint32) >> 16
    if not np.array_equal(bf16 << 16, rows.scales.view(np.uint32)):
        return None  # scales that are not bf16 numbers: not XNNPACK's qb4w
    return Int4Filter(nibbles, np.ascontiguousarray(rows.scales, np.float32), packed_ksum(rows.codes, rows.scales))


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
