"""The AVX512-VNNI qd8 × qb4w one-row product (backends/xnnpack/runtime/vnni.py, qd8.tiled_row): the same bits as
a straightforward numpy reference of XNNPACK's operations and as the portable loop (compiled.qd8_qb4w_matvec), at
odd output counts, block sizes of 16 to 128, rows of zeros and extreme codes, and split over threads."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.runtime import loops, qd8
from etbuild.backends.xnnpack.runtime.values import QuantizedRows
from etbuild.runtime import threads

F = np.float32
LOOPS = loops.compiled()
VNNI = qd8.vnni()
pytestmark = pytest.mark.skipif(VNNI is None, reason="no numba, or a CPU without AVX512-VNNI")


def _problem(k: int, n: int, group: int, seed: int, row_scale: float = 1.0) -> tuple[np.ndarray, ...]:
    """int4 codes (K, N), bf16 block scales, a bias, and one row's unsigned qdint8 codes and params."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(-8, 8, (k, n)).astype(np.int8)
    scales = (rng.random((k // group, n)).astype(F) * F(0.02)).view(np.uint32) >> 16 << 16
    row = (rng.standard_normal(k) * row_scale).astype(F)
    unsigned, params = np.zeros(k, np.int32), np.zeros(2, F)
    LOOPS.snap_row_qdint8_codes(row, unsigned, params)
    return codes, scales.view(F), rng.standard_normal(n).astype(F), unsigned, params


def _reference(codes: np.ndarray, scales: np.ndarray, bias: np.ndarray, unsigned: np.ndarray,
               params: np.ndarray) -> np.ndarray:
    """XNNPACK's operations in numpy: ksum · zero, then per block an exact integer sum times the scale added with
    one rounding (float64 holds the product and sum of two float32 exactly enough: the sum rounded once), then
    times the input scale, then plus the bias."""
    k, n = codes.shape
    group = k // scales.shape[0]
    out = qd8.packed_ksum(codes, scales) * params[0]
    for b in range(scales.shape[0]):
        u = unsigned[b * group : (b + 1) * group].astype(np.int64)
        block = (u[:, None] * codes[b * group : (b + 1) * group].astype(np.int64)).sum(axis=0)
        out = (block.astype(np.float64) * scales[b] + out.astype(np.float64)).astype(F)
    return (out * params[1]).astype(F) + bias


def _tiled(codes: np.ndarray, scales: np.ndarray, bias: np.ndarray, unsigned: np.ndarray, params: np.ndarray,
           count: int = 1) -> np.ndarray:
    f = qd8.int4_filter(QuantizedRows(codes, scales), tiled=True)
    assert f is not None and f.tiles is not None and f.nibbles is None
    out = np.full(codes.shape[1], np.nan, F)
    run = threads.pool(count).run if count > 1 else None
    qd8.tiled_rows(f, unsigned.reshape(1, -1), params.reshape(1, 2), bias, out.reshape(1, -1), count, run)()
    return out


@pytest.mark.parametrize(("k", "n", "group"), [(64, 40, 32), (512, 1, 32), (96, 17, 32), (128, 33, 16),
                                               (256, 48, 128), (32, 16, 32), (160, 100, 32)])
def test_the_tiled_product_gives_the_references_bits(k: int, n: int, group: int) -> None:
    codes, scales, bias, unsigned, params = _problem(k, n, group, seed=k + n)
    expected = _reference(codes, scales, bias, unsigned, params)
    np.testing.assert_array_equal(_tiled(codes, scales, bias, unsigned, params), expected)
    portable = qd8.int4_filter(QuantizedRows(codes, scales))
    assert portable is not None and portable.tiles is None
    out = np.empty(n, F)
    LOOPS.qd8_qb4w_matvec(portable.nibbles, portable.scales, portable.ksum, unsigned, params, bias,
                          np.empty(n, np.int32), np.empty(n, np.int16), np.empty(n, np.int16), out)
    np.testing.assert_array_equal(out, expected)


def test_a_row_of_zeros_and_the_extreme_codes() -> None:
    codes, scales, bias, unsigned, params = _problem(128, 37, 32, seed=3, row_scale=0.0)
    assert (unsigned == params[0]).all()  # a row of zeros: every code is the zero point
    np.testing.assert_array_equal(_tiled(codes, scales, bias, unsigned, params),
                                  _reference(codes, scales, bias, unsigned, params))
    for weight, code in ((-8, 255), (7, 255), (-8, 0), (7, 0)):  # the largest block sums either sign
        extreme = np.full((128, 37), weight, np.int8)
        row = np.full(128, code, np.int32)
        np.testing.assert_array_equal(_tiled(extreme, scales, bias, row, params),
                                      _reference(extreme, scales, bias, row, params))


@pytest.mark.parametrize("count", [2, 3])
def test_split_over_threads_gives_the_same_bits(count: int) -> None:
    codes, scales, bias, unsigned, params = _problem(64, qd8.SPLIT_OUTPUTS + 40, 32, seed=5)
    np.testing.assert_array_equal(_tiled(codes, scales, bias, unsigned, params, count),
                                  _tiled(codes, scales, bias, unsigned, params))


def test_pack_puts_four_inputs_per_output_in_each_nibble_plane() -> None:
    codes = np.arange(8 * 16).reshape(8, 16).astype(np.int8) % 16 - 8  # input k, output j: (16k + j) % 16 - 8
    tiles = VNNI.pack(codes, np.full((1, 16), 1.5, F))
    assert tiles.shape == (1, 64 + 32)  # one tile: its 8 inputs' 64 bytes, then its block's 16 scales
    low, high = tiles[0, :64] & 15, tiles[0, :64] >> 4
    np.testing.assert_array_equal(low.reshape(16, 4), (codes[:4] + 8).T)
    np.testing.assert_array_equal(high.reshape(16, 4), (codes[4:] + 8).T)
    np.testing.assert_array_equal(tiles[0, 64:].view(np.uint16), np.full(16, np.float32(1.5).view(np.uint32) >> 16))


def test_pack_lays_a_pass_out_as_one_stream_with_its_scales_inline() -> None:
    """Per block: the pass's groups of 8 inputs with its tiles' 64 bytes side by side, then the tiles' scales;
    the tiles after the last whole pass one by one."""
    k, n, group = 64, 16 * (VNNI.TILES + 1), 32
    codes = np.random.default_rng(0).integers(-8, 8, (k, n)).astype(np.int8)
    scales = (np.arange(1, 1 + (k // group) * n, dtype=F).reshape(k // group, n)).view(np.uint32) >> 16 << 16
    packed = VNNI.pack(codes, scales.view(F))
    alone = [VNNI.pack(codes[:, 16 * t : 16 * t + 16], scales.view(F)[:, 16 * t : 16 * t + 16])[0]
             for t in range(n // 16)]  # each tile packed by itself: [block][group][64], then [block][scales]
    per, side = group // 8, VNNI.TILES
    stream = packed[:side].reshape(-1)
    block_bytes = side * (per * 64 + 32)
    for b in range(k // group):
        for t in range(side):
            one = alone[t].reshape(k // group, per * 64 + 32)[b]
            for j in range(per):
                at = b * block_bytes + j * side * 64 + t * 64
                np.testing.assert_array_equal(stream[at : at + 64], one[64 * j : 64 * j + 64])
            at = b * block_bytes + side * per * 64 + 32 * t
            np.testing.assert_array_equal(stream[at : at + 32], one[per * 64 :])
    np.testing.assert_array_equal(packed[side], alone[side])


def test_any_range_of_tiles_gives_the_whole_products_bits() -> None:
    """Ranges that start or end inside a pass (a split's blocks) read their tiles one at a time: the same bits."""
    codes, scales, bias, unsigned, params = _problem(96, 16 * (2 * VNNI.TILES + 3) - 5, 32, seed=9)
    f = qd8.int4_filter(QuantizedRows(codes, scales), tiled=True)
    whole = _tiled(codes, scales, bias, unsigned, params)
    out = np.full(codes.shape[1], np.nan, F)
    tiles = f.tiles.shape[0]
    for first, last in ((0, 3), (3, 6), (6, 9), (9, tiles)):
        VNNI.qd8_qb4w_rows(f.tiles, f.blocks, f.ksum, unsigned.reshape(1, -1), params.reshape(1, 2), bias,
                           VNNI.scratch(1, 96, f.blocks), out.reshape(1, -1), first, last)
    np.testing.assert_array_equal(out, whole)


@pytest.mark.parametrize("tiled", [True, False])
def test_a_stored_weight_packed_part_by_part_is_the_whole_packed_at_once(tiled: bool, monkeypatch) -> None:
    """A program's int4 weight (values.RowWeight: its stored bytes) is packed OUTPUTS_AT_A_TIME outputs at a time:
    the parts, in order, are the weight packed at once, tiles (whole passes per part, the last part's tiles one by
    one) or nibbles, scales and ksum alike; its codes read from the stored bytes by output range are the weight's."""
    from etbuild.backends.xnnpack.runtime.values import RowWeight

    monkeypatch.setattr(qd8, "OUTPUTS_AT_A_TIME", 16 * VNNI.TILES * 2)
    rng = np.random.default_rng(4)
    n, k = 16 * VNNI.TILES * 5 + 21, 96
    codes = rng.integers(-8, 8, (n, k)).astype(np.int8)
    stored = ((codes.reshape(-1)[0::2] + 8) | ((codes.reshape(-1)[1::2] + 8) << 4)).astype(np.uint8)
    scales = _problem(k, n, 32, seed=1)[1]
    weight = RowWeight(stored, (n, k), scales)
    np.testing.assert_array_equal(weight.ints(5, 70), codes[5:70])
    parts, whole = qd8.int4_filter(weight, tiled), qd8.int4_filter(QuantizedRows(codes.T.copy(), scales), tiled)
    for name in ("tiles", "nibbles", "scales", "ksum"):
        a, b = getattr(parts, name), getattr(whole, name)
        assert (a is None) == (b is None) and (a is None or np.array_equal(a, b)), name
