"""The loops of `etbuild.kernels.native`, compiled by numba (importing this module needs numba): GELU and layer
norm, which portable kernels and backends share (a backend's own loops live under it, e.g.
etbuild.backends.xnnpack.runtime.compiled).

Module-level functions, so numba caches their machine code on disk. No fast-math flags but
reassociation in the layer norm's and one-token attention's sums (so they vectorize); float division by IEEE rules.
"""

from __future__ import annotations

import numba
import numpy as np

from etbuild.kernels.numerics.erf import GELU_CLAMP, GELU_P, GELU_Q

F = np.float32
P0, P1, P2, P3, P4, P5 = (F(c) for c in GELU_P)
Q0, Q1, Q2, Q3, Q4, Q5 = (F(c) for c in GELU_Q)
LO, HI, HALF, ONE, ZERO = F(-GELU_CLAMP), F(GELU_CLAMP), F(0.5), F(1), F(0)

# error_model="numpy": a float division follows IEEE (no ZeroDivisionError check), so loops vectorize.
jit = numba.njit(cache=True, nogil=True, error_model="numpy")
jit_sums = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})


@jit
def _gelu1(v: np.float32) -> np.float32:
    """gelu(v) of one float32: v/2 + v/2·erf(v/√2), erf a rational function of v² (GELU_P, GELU_Q)."""
    u = min(max(v, LO), HI)
    z = u * u
    p = ((((P5 * z + P4) * z + P3) * z + P2) * z + P1) * z + P0
    q = ((((Q5 * z + Q4) * z + Q3) * z + Q2) * z + Q1) * z + Q0
    e = min(max(u * p / q, -ONE), ONE)
    h = HALF * v
    return h + h * e


@jit
def gelu(x: np.ndarray, out: np.ndarray) -> None:
    """out = gelu(x), both 1-D float32 of one length (out may be x)."""
    for i in range(x.shape[0]):
        out[i] = _gelu1(x[i])


@jit_sums
def row_moments(x: np.ndarray, eps: np.float32, mean: np.ndarray, rstd: np.ndarray) -> None:
    """Per row of x (R, D): the mean and 1/sqrt(biased variance + eps), two passes (the variance of x − mean)."""
    n = F(x.shape[1])
    for r in range(x.shape[0]):
        s = ZERO
        for j in range(x.shape[1]):
            s += x[r, j]
        m = s / n
        s = ZERO
        for j in range(x.shape[1]):
            d = x[r, j] - m
            s += d * d
        mean[r] = m
        rstd[r] = ONE / np.sqrt(s / n + eps)


@jit
def layer_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: np.float32,
    out: np.ndarray, mean: np.ndarray, rstd: np.ndarray,
) -> None:
    """Rows of x (R, D) normalized into out (R, D): (x − mean)·rstd·weight + bias; mean and rstd (R,)."""
    row_moments(x, eps, mean, rstd)
    for r in range(x.shape[0]):
        m, s = mean[r], rstd[r]
        for j in range(x.shape[1]):
            out[r, j] = (x[r, j] - m) * s * weight[j] + bias[j]


@jit_sums
def _head_scores(q: np.ndarray, k: np.ndarray, b: int, s: int, c: int, n: int, scale: np.float32,
                 scores: np.ndarray) -> None:
    """scores[g, j] = q[b, s, c·G + g]·k[b, j, c] · scale for the G query heads of cache head c, j < n: one pass over
    the keys."""
    group, width = scores.shape[0], q.shape[3]
    for j in range(n):
        for g in range(group):
            dot = ZERO
            for d in range(width):
                dot += q[b, s, c * group + g, d] * k[b, j, c, d]
            scores[g, j] = dot * scale


@jit_sums
def _probabilities(scores: np.ndarray, n: int) -> None:
    """Each row of scores[:, :n] as softmax probabilities, normalised (divided by the row's sum) in place."""
    for g in range(scores.shape[0]):
        top = np.float32(-np.inf)
        for j in range(n):
            top = max(top, scores[g, j])
        total = ZERO
        for j in range(n):
            scores[g, j] = np.exp(scores[g, j] - top)
            total += scores[g, j]
        for j in range(n):
            scores[g, j] = scores[g, j] / total


@jit_sums
def rows_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int, causal: bool, scale: np.float32,
                   out: np.ndarray) -> None:
    """Queries at positions start … start + S − 1 over a KV cache: out[b, s, h] = softmax(q[b, s, h]·k[b, :n,
    h // G]ᵀ · scale) · v[b, :n, h // G] (G = H / H_kv), n = start + s + 1 when causal, else start + S; the
    probabilities normalised before the weighted sum as the numpy path does. q, out (B, S, H, D); k, v (B, S_max,
    H_kv, D); float32. The G query heads of a cache head take their scores in one pass over its keys and their sums
    in one pass over its values; sums reassociated (they vectorize: attention's sums have no reference order here,
    ExecuTorch's runtime takes them from a gemm)."""
    rows, width = q.shape[1], q.shape[3]
    group = q.shape[2] // k.shape[2]
    scores = np.empty((group, start + rows), np.float32)
    acc = np.empty((group, width), np.float32)
    for b in range(q.shape[0]):
        for s in range(rows):
            n = start + s + 1 if causal else start + rows
            for c in range(k.shape[2]):
                _head_scores(q, k, b, s, c, n, scale, scores)
                _probabilities(scores, n)
                acc[:] = ZERO
                for j in range(n):
                    for g in range(group):
                        p = scores[g, j]
                        for d in range(width):
                            acc[g, d] += p * v[b, j, c, d]
                out[b, s, c * group : (c + 1) * group] = acc


@jit
def sequential_means(rows: np.ndarray, count: np.float32, means: np.ndarray) -> None:
    """means[i] = (rows[i, 0] + rows[i, 1] + ... in index order) / count, float32 throughout (ExecuTorch's
    portable mean: kernels/portable/reduction.py); rows (outer, count > 0)."""
    for i in range(rows.shape[0]):
        total = rows[i, 0]
        for j in range(1, rows.shape[1]):
            total += rows[i, j]
        means[i] = total / count
