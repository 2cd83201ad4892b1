"""XNNPACK's qd8 × qb4w product on AVX512-VNNI (numba; imported only where `qd8.vnni()` finds the CPU
feature): the same integers and float operations as `compiled.qd8_qb4w_matvec`, so the same bits, at a few
instructions per 128 weights.

The weights are packed at load (`pack`) in the order the loop reads them, one stream front to back. A tile is 16
outputs; per 8 inputs a tile takes 64 bytes whose low nibbles hold its 16 outputs × inputs 0–3 (output-major, 4
inputs per output: the 4 bytes one int32 lane of `vpdpbusd` sums) and whose high nibbles hold inputs 4–7, each
weight + 8 (0–15, so the signed operand of `vpdpbusd` reads it as is). Tiles go TILES at a time (a pass): per
block, the pass's groups of 8 inputs, each TILES × 64 bytes side by side, then the TILES tiles' 16 block scales
(bf16 bits, 32 bytes a tile); the tiles after the last whole pass follow one by one in the same form. A decode step
streams every weight once and its time is the memory's: one sequential stream a pass, scales inline, reads ~30%
faster than a stream per tile beside a stream of scales (the anchor's 57 filters from memory, same bits). The
row's codes, unsigned (q + 128), are the other operand, 4 inputs broadcast to every lane. A block's 32-bit sums
are exact; float(Σ u·(w + 8) − 8·Σ u) times the block's scale is added with one fused multiply-add onto
ksum · zero point, block after block; then times the input scale, then plus the bias.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

F = np.float32
LANES = 16  # outputs per tile: one 512-bit vector of int32 sums
GROUP = 8  # inputs per 64-byte load (4 in the low nibbles, 4 in the high ones)
TILES = 4  # tiles a pass of the loop computes together (their sums' chains overlap)
jit = numba.njit(cache=True, nogil=True, error_model="numpy")

I8, I16, I32, FLT = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()
V64B, V16H = ir.VectorType(I8, 64), ir.VectorType(I16, LANES)
V16I, V16F = ir.VectorType(I32, LANES), ir.VectorType(FLT, LANES)


def _pointer(context, builder, arraytype, array, index, element):  # noqa: ANN001, ANN202
    """A pointer to `element`-typed memory at array.data[index]."""
    data = context.make_array(arraytype)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [index]), element.as_pointer())


def _splat(builder, value, vector):  # noqa: ANN001, ANN202
    undef = ir.Constant(vector, ir.Undefined)
    first = builder.insert_element(undef, value, ir.Constant(I32, 0))
    return builder.shuffle_vector(first, undef, ir.Constant(ir.VectorType(I32, vector.count), None))


def _intrinsics(mod):  # noqa: ANN001, ANN202
    """vpdpbusd on 512 bits and a 16-lane fused multiply-add, declared in the module."""
    dot = cgutils.get_or_insert_function(mod, ir.FunctionType(V16I, [V16I] * 3), "llvm.x86.avx512.vpdpbusd.512")
    return dot, cgutils.get_or_insert_function(mod, ir.FunctionType(V16F, [V16F] * 3), "llvm.fma.v16f32")


def _widened(builder, pointer):  # noqa: ANN001, ANN202
    """16 bf16 numbers at pointer as float32."""
    bf16 = builder.load(pointer, align=2)
    return builder.bitcast(builder.shl(builder.zext(bf16, V16I), _splat(builder, ir.Constant(I32, 16), V16I)), V16F)


def _tiles_codegen(count: int):  # noqa: ANN202
    """The code of `count` tiles' block loop (see tile_dot): per tile two chains of 32-bit sums (low and high
    nibbles) and its float total in registers; the row's codes loaded once per 8 inputs for every tile, so the
    2·count `vpdpbusd` chains overlap (one tile's two chains wait on the instruction's latency)."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        w_, wi_, a_, blocks_, per_, si_, offsets_, acc_, wstride_, sstride_, gstride_, bstride_ = args
        tw, _, ta, _, _, _, to, tacc, _, _, _, _ = signature.args
        dot, fma = _intrinsics(builder.module)
        index = wi_.type
        tiles = range(count)
        bases = [builder.add(wi_, builder.mul(wstride_, ir.Constant(index, u))) for u in tiles]
        sbases = [builder.add(si_, builder.mul(sstride_, ir.Constant(index, u))) for u in tiles]
        out_ptrs = [_pointer(context, builder, tacc, acc_, ir.Constant(index, LANES * u), V16F) for u in tiles]
        totals = [cgutils.alloca_once_value(builder, builder.load(p, align=4)) for p in out_ptrs]
        sums = [cgutils.alloca_once_value(builder, ir.Constant(V16I, None)) for _ in tiles]
        highs = [cgutils.alloca_once_value(builder, ir.Constant(V16I, None)) for _ in tiles]
        low, four = ir.Constant(V64B, [15] * 64), ir.Constant(V64B, [4] * 64)
        with cgutils.for_range(builder, blocks_) as blocks_loop:
            b = blocks_loop.index
            start = builder.mul(b, bstride_)
            for u in tiles:
                builder.store(ir.Constant(V16I, None), sums[u])
                builder.store(ir.Constant(V16I, None), highs[u])
            with cgutils.for_range(builder, per_) as groups_loop:
                g = builder.add(builder.mul(b, per_), groups_loop.index)
                k = builder.mul(g, ir.Constant(index, 2))
                a0 = _splat(builder, builder.load(_pointer(context, builder, ta, a_, k, I32)), V16I)
                a1 = _splat(builder, builder.load(
                    _pointer(context, builder, ta, a_, builder.add(k, ir.Constant(index, 1)), I32)), V16I)
                offset = builder.add(start, builder.mul(groups_loop.index, gstride_))
                for u in tiles:
                    ptr = _pointer(context, builder, tw, w_, builder.add(bases[u], offset), V64B)
                    bytes_ = builder.load(ptr, align=1)
                    lo = builder.bitcast(builder.and_(bytes_, low), V16I)
                    hi = builder.bitcast(builder.lshr(bytes_, four), V16I)
                    builder.store(builder.call(dot, [builder.load(sums[u]), a0, lo]), sums[u])
                    builder.store(builder.call(dot, [builder.load(highs[u]), a1, hi]), highs[u])
            off = _splat(builder, builder.load(_pointer(context, builder, to, offsets_, b, I32)), V16I)
            for u in tiles:
                exact = builder.sub(builder.add(builder.load(sums[u]), builder.load(highs[u])), off)
                scale = _widened(builder, _pointer(context, builder, tw, w_, builder.add(sbases[u], start), V16H))
                builder.store(builder.call(fma, [builder.sitofp(exact, V16F), scale, builder.load(totals[u])]),
                              totals[u])
        for u in tiles:
            builder.store(builder.load(totals[u]), out_ptrs[u], align=4)
        return context.get_dummy_value()

    return codegen


@intrinsic
def tile_dot(typingctx, w, wi, a, blocks, per, si, offsets, acc, wstride, sstride, gstride, bstride):  # noqa: ANN001, ANN201, ARG001
    """acc[0:16] ← fma(float(Σ u·w − offsets[b]), scales of block b, acc[0:16]) for b = 0 … blocks − 1, in order,
    for one tile of 16 outputs in the packed bytes w (uint8): block b's group j (of `per`) is the 64 bytes at
    w[wi + b·bstride + j·gstride], its 16 scales (bf16 bits) at w[si + b·bstride]; against the row's packed codes
    a[2g], a[2g + 1] (int32, 4 unsigned codes each; g = b·per + j). acc stays in a register throughout.
    (wstride, sstride: unused, tile_dots' signature.)"""
    return types.void(w, wi, a, blocks, per, si, offsets, acc, wstride, sstride, gstride, bstride), _tiles_codegen(1)


@intrinsic
def tile_dots(typingctx, w, wi, a, blocks, per, si, offsets, acc, wstride, sstride, gstride, bstride):  # noqa: ANN001, ANN201, ARG001
    """tile_dot for TILES tiles at once: tile u's weights from wi + u·wstride on, its scales from si + u·sstride,
    its outputs in acc[16u : 16u + 16]. The same integers and float operations per output, so the same bits;
    2·TILES independent `vpdpbusd` chains instead of 2."""
    return types.void(w, wi, a, blocks, per, si, offsets, acc, wstride, sstride, gstride, bstride), \
        _tiles_codegen(TILES)


def pack(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """int4 codes (K, N) (−8 … 7) and block scales (B, N) (bf16 numbers) as the loop reads them (module docstring):
    (tiles, B · (K/B/8 · 64 + 32)) uint8, N padded with zero weights and scales to a multiple of 16."""
    k, n = codes.shape
    tiles, blocks = -(-n // LANES), scales.shape[0]
    per = k // GROUP // blocks
    u = np.zeros((k, tiles * LANES), np.uint8)
    u[:, :n] = codes + 8
    # [K/8, 2 (low, high), 4 inputs, tiles, 16 outputs] -> [tiles, K/8, 16 outputs, 4 inputs] per nibble plane
    planes = u.reshape(k // GROUP, 2, 4, tiles, LANES).transpose(3, 0, 1, 4, 2)
    weights = np.ascontiguousarray(planes[:, :, 0] | (planes[:, :, 1] << 4)).reshape(tiles, k // GROUP, 64)
    bf16 = np.zeros((blocks, tiles * LANES), np.uint16)
    bf16[:, :n] = np.ascontiguousarray(scales, np.float32).view(np.uint32) >> 16
    block_scales = np.ascontiguousarray(bf16.reshape(blocks, tiles, LANES).transpose(1, 0, 2)).view(np.uint8)
    packed = np.empty((tiles, blocks * (per * 64 + 2 * LANES)), np.uint8)
    full = tiles // TILES * TILES
    for first, last, side in ((0, full, TILES), (full, tiles, 1)):  # whole passes, then the tiles left one by one
        if last > first:
            parts = [_by_pass(a[first:last], side).reshape((last - first) // side, blocks, -1)
                     for a in (weights, block_scales)]
            packed[first:last].reshape(parts[0].shape[:2] + (-1,))[:] = np.concatenate(parts, axis=2)
    return packed


def _by_pass(a: np.ndarray, side: int) -> np.ndarray:
    """(tiles, units, bytes) as (tiles / side, units, side · bytes): each pass's tiles side by side, unit by unit
    (a group of 8 inputs, or a block's scales)."""
    count, units = a.shape[0] // side, a.shape[1]
    return a.reshape(count, side, units, -1).transpose(0, 2, 1, 3).reshape(count, units, -1)


@jit
def qd8_qb4w_rows(weights: np.ndarray, blocks: int, ksum: np.ndarray, codes: np.ndarray, params: np.ndarray,
                  bias: np.ndarray, scratch: np.ndarray, out: np.ndarray, first: int, last: int) -> None:
    """out[r, 16·first : 16·last] (of N) for each qdint8 row r (codes (M, K) int32 unsigned, params (M, 2): zero
    point + 128, scale; from snap_row_qdint8_codes) through tiles first … last − 1 of the packed int4 weights
    (`pack`, in `blocks` blocks), with ksum (N,) and bias (N,) float32; scratch from `scratch(M, K, blocks)`.
    XNNPACK's bits (module docstring). Disjoint tile ranges write disjoint outputs: blocks of one product may run on
    several threads. A whole pass at a time where the range holds one, else one tile at a time; each pass's bytes
    (a few tens of KB) serve every row while they are in cache, so M rows stream the weights once."""
    tiles, tile_bytes = weights.shape
    m, groups = codes.shape[0], codes.shape[1] // GROUP
    per = groups // blocks
    n = out.shape[1]
    width = 2 * groups + blocks  # per row: its codes four to an int32, then its blocks' offsets
    acc = scratch[m * width : m * width + TILES * LANES].view(np.float32)
    _pack_rows(codes, blocks, scratch, width)
    flat = weights.reshape(-1)
    last = min(last, tiles)
    full = tiles // TILES * TILES
    t = first
    while t < last:
        whole = t % TILES == 0 and t + TILES <= min(last, full)
        count = TILES if whole else 1
        start = t * LANES
        if t < full:  # in a pass: tile t % TILES of pass t // TILES
            base, side = (t - t % TILES) * tile_bytes, TILES
        else:
            base, side = t * tile_bytes, 1
        wi = base + (t % side) * 64
        si = base + per * 64 * side + (t % side) * 2 * LANES
        for r in range(m):
            packed, offsets = scratch[r * width : r * width + 2 * groups], scratch[r * width + 2 * groups :]
            zero, inscale = params[r, 0], params[r, 1]
            for j in range(count * LANES):
                acc[j] = ksum[start + j] * zero if start + j < n else F(0)
            if whole:
                tile_dots(flat, wi, packed, blocks, per, si, offsets, acc, 64, 2 * LANES, 64 * side,
                          tile_bytes * side // blocks)
            else:
                tile_dot(flat, wi, packed, blocks, per, si, offsets, acc, 64, 2 * LANES, 64 * side,
                         tile_bytes * side // blocks)
            for j in range(min(count * LANES, n - start)):  # the input scale, then the bias: two roundings
                v = acc[j] * inscale
                out[r, start + j] = v + bias[start + j]
        t += count


@jit
def _pack_rows(codes: np.ndarray, blocks: int, scratch: np.ndarray, width: int) -> None:
    """Per row r of codes (M, K), at scratch[r · width:]: its unsigned codes four to an int32 (inputs 8q … 8q + 3,
    then 8q + 4 … 8q + 7: one byte each), then each block's offset 8 · Σ codes."""
    groups = codes.shape[1] // GROUP
    per = groups // blocks
    for r in range(codes.shape[0]):
        packed, offsets = scratch[r * width : r * width + 2 * groups], scratch[r * width + 2 * groups : (r + 1) * width]
        for q in range(groups):
            c = codes[r, 8 * q : 8 * q + 8]
            packed[2 * q] = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24)
            packed[2 * q + 1] = c[4] | (c[5] << 8) | (c[6] << 16) | (c[7] << 24)
        for b in range(blocks):
            total = 0
            for k in range(b * GROUP * per, (b + 1) * GROUP * per):
                total += codes[r, k]
            offsets[b] = 8 * total


def scratch(rows: int, k: int, blocks: int) -> np.ndarray:
    """The scratch one call of qd8_qb4w_rows takes for `rows` rows of K inputs in `blocks` blocks."""
    return np.zeros(rows * (k // 4 + blocks) + TILES * LANES, np.int32)
