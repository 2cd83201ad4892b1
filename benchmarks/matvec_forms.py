"""Weight forms for a decode step's matrix-vector products (issue 26): one token's row times a [K, N] weight, one
thread, in the three forms an 8da4w linear could keep its weights in our XNNPACK runtime.

    OPENBLAS_NUM_THREADS=1 python benchmarks/matvec_forms.py [K N] [--group 32]

- float32, dequantized at load (what backends/xnnpack/runtime does): BLAS sgemv, 4 bytes a weight;
- int8 with per-group scales: numpy has no int8 BLAS, so each call converts (np.dot on int8 is a slow loop);
- int4 packed two to a byte with per-group scales, a numba loop that unpacks and accumulates per group;
- int8 codes transposed to [K, N] with scales [groups, N], the runtime's one-row loop for float inputs
  (kernels/native_loops.grouped_matvec: the inner loop along the outputs, no horizontal sums);
- int4 packed [K/2, N] (two inputs a byte) times the input's qdint8 codes, the runtime's one-row loop for a
  qdint8 input (kernels/native_loops.qd8_qb4w_matvec, XNNPACK's integer product: int16 partial sums along N).
Prints the median µs per product, the weight bytes each reads, and the largest difference from float32 (the
qd8 row also rounds the input onto its int8 grid, so it differs by that rounding).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import results  # benchmarks/results.py (the script's folder is on sys.path)
from timing import median_us  # benchmarks/timing.py (the script's folder is on sys.path)


def int4_kernel():  # noqa: ANN201
    """A numba matvec over int4 weights packed [N, K/2] (low nibble first), scales [N, K/group]."""
    import numba

    @numba.njit(cache=True, fastmath=True)
    def matvec(x: np.ndarray, packed: np.ndarray, scales: np.ndarray, group: int, out: np.ndarray) -> None:
        n, half = packed.shape
        for j in range(n):
            total = np.float32(0.0)
            for gi in range(scales.shape[1]):
                acc = np.float32(0.0)
                for b in range(gi * group // 2, (gi + 1) * group // 2):
                    byte = packed[j, b]
                    acc += x[2 * b] * np.float32((byte & 15) - 8) + x[2 * b + 1] * np.float32((byte >> 4) - 8)
                total += acc * scales[j, gi]
            out[j] = total

    return matvec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", nargs="*", type=int, default=[512, 1536], metavar="K N")
    parser.add_argument("--group", type=int, default=32)
    results.add_option(parser, "matvec-forms")
    args = parser.parse_args()
    if len(args.shape) != 2:
        parser.error("give the weight's shape as two numbers, K N")
    (k, n), group = args.shape, args.group
    rng = np.random.default_rng(0)
    q = rng.integers(-8, 8, (n, k)).astype(np.int8)
    scales = (rng.random((n, k // group)) * 0.02 + 1e-3).astype(np.float32)
    scales = (scales.view(np.uint32) >> 16 << 16).view(np.float32)  # bf16 numbers, as XNNPACK's block scales
    w = (q.reshape(n, -1, group) * scales[..., None]).reshape(n, k).astype(np.float32)
    x = rng.standard_normal(k).astype(np.float32)
    w_kn, out = np.ascontiguousarray(w.T), np.empty(n, np.float32)
    packed = ((q[:, 0::2] + 8).astype(np.uint8) | ((q[:, 1::2] + 8).astype(np.uint8) << 4))
    matvec = int4_kernel()
    xg = x.reshape(-1, group)

    def int8_scales() -> np.ndarray:
        partial = np.einsum("ngk,gk->ng", q.reshape(n, -1, group).astype(np.float32), xg)  # per group sums
        return (partial * scales).sum(1)

    from etbuild.backends.xnnpack.runtime.qd8 import int4_filter
    from etbuild.backends.xnnpack.runtime.values import QuantizedRows
    from etbuild.kernels.native_loops import grouped_matvec, qd8_qb4w_matvec, snap_row_qdint8_codes

    codes_kn, scales_gn = np.ascontiguousarray(q.T), np.ascontiguousarray(scales.T)
    zeros, acc, out_kn = np.zeros(n, np.float32), np.empty(n, np.float32), np.empty(n, np.float32)
    grouped_matvec(codes_kn, scales_gn, x, zeros, acc, out_kn)
    reference = x @ w_kn
    int4 = int4_filter(QuantizedRows(codes_kn, scales_gn))
    codes, params, out_q4 = np.empty(k, np.int32), np.empty(2, np.float32), np.empty(n, np.float32)
    snap_row_qdint8_codes(x.copy(), codes, params)
    scratch = np.empty(n, np.int32), np.empty(n, np.int16), np.empty(n, np.int16)

    def qd8_int4() -> None:
        qd8_qb4w_matvec(int4.nibbles, int4.scales, int4.ksum, codes, params, zeros, *scratch, out_q4)

    qd8_int4()
    matvec(x, packed, scales, group, out)
    rows = [("float32 dequantized (BLAS)", lambda: np.dot(x, w_kn, out), w_kn.nbytes, reference),
            ("int8 + scales (numpy)", int8_scales, q.nbytes + scales.nbytes, int8_scales()),
            ("int4 + scales (numba)", lambda: matvec(x, packed, scales, group, out), packed.nbytes + scales.nbytes,
             out.copy()),
            ("int8 codes [K, N] (runtime loop)", lambda: grouped_matvec(codes_kn, scales_gn, x, zeros, acc, out_kn),
             codes_kn.nbytes + scales_gn.nbytes, out_kn.copy()),
            ("int4 [K/2, N] x qd8 codes (runtime)", qd8_int4, int4.nibbles.nbytes + int4.scales.nbytes, out_q4.copy())]
    print(f"K={k} N={n} group={group}; load average {os.getloadavg()[0]:.1f}")
    table = []
    for name, fn, nbytes, result in rows:
        us, diff = median_us(fn, 30, warmup=1), float(np.abs(result - reference).max())
        print(f"{name:36s} {us:9.1f} µs, {nbytes / 1e6:.2f} MB of weights, max |diff| {diff:.2e}")
        table.append({"form": name, "us": us, "weight_mb": nbytes / 1e6, "max_abs_diff": diff})
    if args.results:
        results.save(args.results, table, title=f"One row times a {k} x {n} weight, by the form of the weights",
                     notes=[f"group {group}; median of 30 products, one thread when OPENBLAS_NUM_THREADS=1"])


if __name__ == "__main__":
    main()
