"""The XNNPACK runtime's loops, compiled by numba (importing this module needs numba; `loops.compiled()` imports it
where numba's loops are on): epilogues, grid roundings, softmax, depthwise convolution and one-row products, each
with XNNPACK's bits where the docstring says so.

Module-level functions, so numba caches their machine code on disk; float division by IEEE rules.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from etbuild.kernels.native_loops import HALF, ONE, ZERO, _gelu1

F = np.float32
jit = numba.njit(cache=True, nogil=True, error_model="numpy")
jit_sums = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
jit_fma = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})


@jit
def bias_gelu_rows(rows: np.ndarray, bias: np.ndarray) -> None:
    """rows ← gelu(rows + bias) in place, rows (R, N) C-contiguous and bias (N,): numpy's add then the gelu loop,
    the same bits, in one pass (a FullyConnected's bias and the Gelu node after it)."""
    for r in range(rows.shape[0]):
        row = rows[r]
        for j in range(bias.shape[0]):
            row[j] = _gelu1(row[j] + bias[j])


@jit
def bias_add_rows(rows: np.ndarray, bias: np.ndarray, other: np.ndarray) -> None:
    """rows ← (rows + bias) + other in place, rows and other (R, N) C-contiguous, bias (N,): numpy's two adds, the
    same bits, in one pass (a FullyConnected's bias and the residual Add node after it)."""
    for r in range(rows.shape[0]):
        row, add = rows[r], other[r]
        for j in range(bias.shape[0]):
            row[j] = (row[j] + bias[j]) + add[j]


@jit
def snap_to_grid(a: np.ndarray, inv: np.float32, scale: np.float32, lo: np.float32, hi: np.float32) -> None:
    """a ← clamp(rint(a·inv), lo, hi)·scale in place (1-D float32): numpy's four passes in one, the same bits."""
    for i in range(a.shape[0]):
        a[i] = min(max(np.rint(a[i] * inv), lo), hi) * scale


@jit
def _qdint8_params(row: np.ndarray) -> tuple[np.float32, np.float32]:
    """XNNPACK's qdint8 parameters of one row (backends/xnnpack/runtime/grids.py): the inverse scale (the row
    range widened to 0, over 255 steps) and the nudged zero point, as float32."""
    low, high = ZERO, ZERO
    for j in range(row.shape[0]):
        low = min(low, row[j])
        high = max(high, row[j])
    span = high - low
    inv = F(255) / span if span > ZERO else ONE
    low, high = low * inv, high * inv
    zero = (F(-128) - low) if (F(-128) + low) + (F(127) + high) > ZERO else (F(127) - high)
    return inv, np.rint(min(max(zero, F(-128)), F(127)))


@jit
def snap_rows_qdint8(rows: np.ndarray) -> None:
    """Each row of rows (R, D) rounded in place onto its own int8 grid, XNNPACK's qdint8 parameters as
    backends/xnnpack/runtime/grids.py computes them (row range widened to 0, 255 steps, nudged zero point):
    the same float32 operations in the same order, so the same bits."""
    for r in range(rows.shape[0]):
        inv, zero = _qdint8_params(rows[r])
        for j in range(rows.shape[1]):
            q = min(max(np.rint(rows[r, j] * inv) + zero, F(-128)), F(127))
            rows[r, j] = (q - zero) / inv


@jit
def snap_row_qdint8_codes(row: np.ndarray, codes: np.ndarray, params: np.ndarray) -> None:
    """snap_rows_qdint8 of one row (D,) that also keeps what XNNPACK's x86 qd8 products read, the codes made
    unsigned (qdu8): q + 128 in codes (D,) int32, the zero point + 128 in params[0], and the scale 1/inv (float32
    division) in params[1]."""
    inv, zero = _qdint8_params(row)
    for j in range(row.shape[0]):
        q = min(max(np.rint(row[j] * inv) + zero, F(-128)), F(127))
        codes[j] = np.int32(q) + 128
        row[j] = (q - zero) / inv
    params[0] = zero + F(128)
    params[1] = ONE / inv


@jit
def snap_rows_qdint8_codes(rows: np.ndarray, codes: np.ndarray, params: np.ndarray) -> None:
    """snap_row_qdint8_codes of each row of rows (M, D), into codes (M, D) int32 and params (M, 2)."""
    for r in range(rows.shape[0]):
        snap_row_qdint8_codes(rows[r], codes[r], params[r])


# exp(t) = 2^n · p(r), n = round(t·log2 e), r = t − n·ln 2 in two parts (Cody and Waite: n·LN2_HI is exact for
# |n| < 2^9), p the degree-7 Taylor polynomial (|r| ≤ ln 2 / 2: truncation below 6e-9), 2^n built from its bits.
LOG2E, LN2_HI, LN2_LO = F(1.4426950408889634), F(0.693145751953125), F(1.4286068203094173e-06)
EXP_LO = F(-87.33)  # below this exp(t) is under float32's smallest normal: taken as 0
EXP_C = tuple(F(1 / math.factorial(k)) for k in range(8))
SHIFT_SUM = F(2.0 ** -40)  # exps under 1.2e-38 flush to 0: with a row sum above this, under 1.4e-26 of it


@jit_fma
def _exp_le0(t: np.float32) -> np.float32:
    """exp(t) for t ≤ 0 (nan gives nan), within 1 ulp of the exact value (0.93 at most over [EXP_LO, 0]); 0 below
    EXP_LO."""
    if t < EXP_LO:
        return ZERO
    n = np.floor(t * LOG2E + HALF)
    r = (t - n * LN2_HI) - n * LN2_LO
    p = EXP_C[7]
    p = p * r + EXP_C[6]
    p = p * r + EXP_C[5]
    p = p * r + EXP_C[4]
    p = p * r + EXP_C[3]
    p = p * r + EXP_C[2]
    p = p * r + EXP_C[1]
    p = p * r + EXP_C[0]
    return p * np.int32((np.int32(n) + 127) << 23).view(np.float32)


@jit
def _scaled_max(row: np.ndarray, scale: np.float32) -> np.float32:
    """max(row · scale) (a scalar loop: numba does not vectorize it)."""
    m = F(-np.inf)
    for j in range(row.shape[0]):
        m = max(m, row[j] * scale)
    return m


@jit_sums
def _shifted_exps(row: np.ndarray, scale: np.float32, shift: np.float32, o: np.ndarray) -> np.float32:
    """o = exp(row · scale − shift); their sum (reassociated, so it vectorizes; `_exp_le0` keeps its own order)."""
    total = ZERO
    for j in range(row.shape[0]):
        e = _exp_le0(row[j] * scale - shift)
        o[j] = e
        total += e
    return total


@jit
def softmax_rows(x: np.ndarray, scale: np.float32, bound: np.float32, out: np.ndarray) -> None:
    """out[r] = softmax(x[r] · scale) per row of x (R, N) into out (R, N), both C-contiguous and disjoint; t = x · scale
    rounded as numpy's multiply rounds it (a Multiply node's output, or scale 1).

    Each row is shifted by m = bound · scale, bound the largest of all x when scale ≥ 0 (the smallest when not), so
    m ≥ every t and no exp overflows; softmax does not depend on the shift. A row whose exps then sum below
    SHIFT_SUM (its own largest t far below m, where exps could flush to 0) is redone shifted by its own maximum,
    as is every row when m is not finite (nan or inf somewhere: such a row gives nan, as in torch)."""
    m = bound * scale
    exact = not (abs(m) < np.inf)
    for r in range(x.shape[0]):
        row, o = x[r], out[r]
        total = ZERO if exact else _shifted_exps(row, scale, m, o)
        if not total >= SHIFT_SUM:
            total = _shifted_exps(row, scale, _scaled_max(row, scale), o)
        inv = ONE / total
        for j in range(row.shape[0]):
            o[j] *= inv


@jit
def depthwise_nhwc(
    x: np.ndarray, taps: np.ndarray, bias: np.ndarray, out: np.ndarray, stride: tuple[int, int],
    dilation: tuple[int, int], pad: tuple[int, int], mult: int, lo: np.float32, hi: np.float32,
) -> None:
    """out = clamp(bias + Σ taps x·w, lo, hi): a depthwise convolution of x [N, H, W, C] (NHWC float32) into
    out [N, OH, OW, C·mult] (output channel k reads input channel k // mult), all C-contiguous.

    taps [KH, KW, OW·C·mult] and bias [OW·C·mult] are the filter and the bias tiled along one output row.
    Per output row: the row set to the bias, then per kernel tap one pass over the output pixels that tap
    reads inside the input (the zero padding is never read), then the clamp. pad is (top, left): bottom
    and right padding only decide the output's size. The sums run in tap order from the bias."""
    n_, h, w_in, c = x.shape
    kh, kw, _ = taps.shape
    _, oh, ow, co = out.shape
    sh, sw = stride
    dh, dw = dilation
    top, left = pad
    xf, of = x.reshape(-1), out.reshape(-1)
    row, xrow = ow * co, w_in * c
    for n in range(n_):
        for oy in range(oh):
            o = of[(n * oh + oy) * row : (n * oh + oy + 1) * row]
            o[:] = bias
            for ky in range(kh):
                iy = oy * sh - top + ky * dh
                if 0 <= iy < h:
                    xr = xf[(n * h + iy) * xrow : (n * h + iy + 1) * xrow]
                    for kx in range(kw):
                        _depthwise_tap(o, xr, taps[ky, kx], kx * dw - left, sw, c, co, mult)
            clamp(o, lo, hi)


@jit
def _depthwise_tap(
    o: np.ndarray, xr: np.ndarray, wt: np.ndarray, shift: int, sw: int, c: int, co: int, mult: int
) -> None:
    """o += one tap's products along an output row: pixel ox reads input pixel ox·sw + shift of the row xr
    where that lies inside it. Slices indexed by range variables, so that numba knows the indices are not
    negative and the loops vectorize; with stride 1 one contiguous loop over pixels and channels alike."""
    w_in, ow = xr.shape[0] // c, o.shape[0] // co
    first = max(0, (sw - 1 - shift) // sw)
    last = min(ow, (w_in - 1 - shift) // sw + 1) if shift < w_in else 0
    if first >= last:
        return
    if mult == 1 and sw == 1:
        xs, os, ws = xr[(first + shift) * c :], o[first * co :], wt[first * co :]
        for j in range((last - first) * co):
            os[j] += xs[j] * ws[j]
        return
    for ox in range(first, last):
        xs, os, ws = xr[(ox * sw + shift) * c :], o[ox * co :], wt[ox * co :]
        if mult == 1:
            for k in range(co):
                os[k] += xs[k] * ws[k]
        else:
            for k in range(co):
                os[k] += xs[k // mult] * ws[k]


@jit
def clamp(o: np.ndarray, lo: np.float32, hi: np.float32) -> None:
    """o clamped to [lo, hi] in place by comparisons (a nan stays nan, as numpy's clip leaves it)."""
    for j in range(o.shape[0]):
        v = o[j]
        if v < lo:
            o[j] = lo
        elif v > hi:
            o[j] = hi


@numba.njit(inline="always", error_model="numpy")
def _clamped(v: np.float32, lo: np.float32, hi: np.float32) -> np.float32:
    """v clamped to [lo, hi] by comparisons, as numpy's clip does it (a nan stays nan). Inlined into its callers
    with one return: with a return per branch, or as a cached function of its own, their loops no longer
    vectorize ([2304, 48]: 26 µs against 16 µs)."""
    if v < lo:
        v = lo
    elif v > hi:
        v = hi
    return v


@jit
def bias_clamp_rows(rows: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32) -> None:
    """rows ← clamp(rows + bias, lo, hi) in place, rows (R, N) C-contiguous and bias (N,): numpy's add then clip
    (the same bits, a nan stays nan) in one pass. Each row is read and written through one slice: a call per row
    with the source and destination as two arguments kept LLVM from vectorizing it ([2304, 48]: 164 µs against
    13 µs)."""
    for r in range(rows.shape[0]):
        o = rows[r]
        for j in range(bias.shape[0]):
            o[j] = _clamped(o[j] + bias[j], lo, hi)


@jit
def bias_clamp_blocks(blocks: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, out: np.ndarray) -> None:
    """out[:, b·nb + j] = clamp(blocks[b, :, j] + bias[b·nb + j], lo, hi): a product computed in column blocks
    blocks (B, R, nb) put together into out (R, B·nb) with its bias and clamp, in one pass."""
    nblocks, rows, nb = blocks.shape
    for b in range(nblocks):
        for r in range(rows):
            src, dst = blocks[b, r], out[r, b * nb : (b + 1) * nb]
            for j in range(nb):
                dst[j] = _clamped(src[j] + bias[b * nb + j], lo, hi)


@jit_fma
def grouped_matvec(codes: np.ndarray, scales: np.ndarray, x: np.ndarray, bias: np.ndarray,
                   acc: np.ndarray, out: np.ndarray) -> None:
    """out = bias + Σ_g scales[g] · Σ_{k in group g} codes[k] · x[k]: one row through quantized weights kept
    as integers. codes (K, N) int8, the K inputs in groups of K / B; scales (B, N); x (K,); bias, acc, out (N,).
    The inner loop runs along N (contiguous), so it vectorizes without reassociating any sum: a quarter of the
    bytes of a float32 matrix–vector product for int8 codes, the same int4 codes unpacked."""
    k_total, n = codes.shape
    group = k_total // scales.shape[0]
    for i in range(n):
        out[i] = bias[i]
    for g in range(scales.shape[0]):
        for i in range(n):
            acc[i] = ZERO
        for k in range(g * group, (g + 1) * group):
            xk = x[k]
            for i in range(n):
                acc[i] += F(codes[k, i]) * xk
        for i in range(n):
            out[i] += acc[i] * scales[g, i]


@jit_fma
def qd8_qb4w_matvec(nibbles: np.ndarray, scales: np.ndarray, ksum: np.ndarray, codes: np.ndarray,
                    params: np.ndarray, bias: np.ndarray, acc: np.ndarray, part: np.ndarray,
                    more: np.ndarray, out: np.ndarray) -> None:
    """One qdint8 row times int4 weights, as XNNPACK's x86 qd8-f32-qb4w microkernels compute it.

    nibbles (K/2, N) uint8: input 2p in the low nibble, 2p + 1 in the high one, each weight + 8; scales (B, N)
    float32 holding bf16 numbers, per block of K / B inputs, a multiple of 16; ksum (N,) float32, the packed
    −Σ scale·Σ weight (etbuild.backends.xnnpack.runtime.qd8); codes (K,) int32 and params (zero point, scale) from
    snap_row_qdint8_codes: unsigned, u = q + 128 and the zero point + 128, as the AVX512-VNNI kernels take them;
    acc (N,) int32, part and more (N,) int16 scratch; bias, out (N,) float32.
    out = (ksum·zero + Σ_b float(Σ_k u_k·w_k)·scale_b)·input scale + bias, each block's sum exact in
    integers and added with one fused multiply-add; the input scale and the bias after, unfused. The inner loops
    run along N on the unsigned nibbles in 16-bit integers (16 inputs at a time: Σ ≤ 16·255·15 < 2^16, summed
    in int16 modulo 2^16 and read back unsigned), so they vectorize 32 wide; the weights' 8 is subtracted once
    per block (8·Σ u). A block of 32 inputs (two such sums) goes to `out` in the pass that adds its second."""
    half, n = nibbles.shape
    per = half // scales.shape[0]
    for i in range(n):
        out[i] = ksum[i] * params[0]
    for b in range(scales.shape[0]):
        first = b * per
        total = 0
        for k in range(2 * first, 2 * (first + per)):
            total += codes[k]
        offset = np.int32(8 * total)
        scale = scales[b]
        _nibble_sums8(nibbles, codes, first, part)
        if per == 16:
            _nibble_sums8(nibbles, codes, first + 8, more)
            for i in range(n):
                out[i] += F((np.int32(part[i]) & 0xFFFF) + (np.int32(more[i]) & 0xFFFF) - offset) * scale[i]
            continue
        for i in range(n):
            acc[i] = np.int32(part[i]) & 0xFFFF
        for p0 in range(first + 8, first + per, 8):
            _nibble_sums8(nibbles, codes, p0, part)
            for i in range(n):
                acc[i] += np.int32(part[i]) & 0xFFFF
        for i in range(n):
            out[i] += F(acc[i] - offset) * scale[i]
    # a multiply, then an add, never fused (a jitted helper would inherit this function's contract flag)
    for i in range(n):
        out[i] *= params[1]
    for i in range(n):
        out[i] += bias[i]


@jit
def _nibble_sums8(nibbles: np.ndarray, codes: np.ndarray, first: int, part: np.ndarray) -> None:
    """part ← Σ_k u_k·nibble_k over the 8 byte rows from `first` (inputs 2·first … 2·first + 15), in int16
    (wrapping: read it back unsigned)."""
    n = nibbles.shape[1]
    low, four = np.int16(15), np.int16(4)
    a0, a1 = np.int16(codes[2 * first]), np.int16(codes[2 * first + 1])
    row = nibbles[first]
    for i in range(n):
        v = np.int16(row[i])
        part[i] = np.int16(a0 * (v & low) + a1 * (v >> four))
    for p in range(first + 1, first + 8):
        a0, a1 = np.int16(codes[2 * p]), np.int16(codes[2 * p + 1])
        row = nibbles[p]
        for i in range(n):
            v = np.int16(row[i])
            part[i] += np.int16(a0 * (v & low) + a1 * (v >> four))


@jit_fma
def fma_matvec(w: np.ndarray, x: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
    """out = bias + Σ_k x[k]·w[k] with one fused multiply-add per k, k ascending: XNNPACK's f32 FullyConnected
    of one row (its gemm microkernels broadcast each input along the outputs), so the same bits. w (K, N)
    float32; x (K,); bias, out (N,). For few outputs: each k walks all of out (see tiled_matvec for many)."""
    for i in range(out.shape[0]):
        out[i] = bias[i]
    for k in range(w.shape[0]):
        xk = x[k]
        for i in range(out.shape[0]):
            out[i] += xk * w[k, i]


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
def row_dots(w: np.ndarray, x: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
    """out[n] = bias[n] + Σ_k w[n, k] · x[k]: one row through a filter kept as [N, K] float32 C-contiguous, each
    output a dot product streamed from memory (reassociated, so it vectorizes: not XNNPACK's bits, which
    tiled_matvec gives through a filter packed for it). x (K,); bias, out (N,)."""
    for n in range(out.shape[0]):
        total = F(0)
        for k in range(x.shape[0]):
            total += w[n, k] * x[k]
        out[n] = total + bias[n]


TILE = 128  # outputs per tile of a one-row float product's packed filter: 8 AVX-512 accumulators


@jit_fma
def tiled_matvec(tiles: np.ndarray, x: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
    """out = bias + Σ_k x[k]·w[k] with one fused multiply-add per k, k ascending: XNNPACK's f32 FullyConnected of
    one row (its gemm microkernels broadcast each input along the outputs), so the same bits. The filter is packed
    as tiles (N / TILE rounded up, K, TILE) float32 (`pack_tiles`), so each tile's K × TILE weights stream from
    memory in one contiguous run while its TILE sums stay in registers: the product runs at the speed memory
    delivers the filter. x (K,); bias, out (N,)."""
    count, k_total, tile = tiles.shape
    n_total = out.shape[0]
    acc = np.empty(tile, np.float32)
    for t in range(count):
        n0 = t * tile
        width = min(tile, n_total - n0)
        for i in range(width):
            acc[i] = bias[n0 + i]
        for i in range(width, tile):
            acc[i] = ZERO
        for k in range(k_total):
            xk = x[k]
            row = tiles[t, k]
            for i in range(tile):
                acc[i] += xk * row[i]
        for i in range(width):
            out[n0 + i] = acc[i]


def pack_tiles(w: np.ndarray) -> np.ndarray:
    """A [K, N] float32 filter as `tiled_matvec`'s tiles (N / TILE rounded up, K, TILE), the last padded with 0."""
    k, n = w.shape
    count = -(-n // TILE)
    padded = np.zeros((k, count * TILE), np.float32)
    padded[:, :n] = w
    return np.ascontiguousarray(padded.reshape(k, count, TILE).transpose(1, 0, 2))
