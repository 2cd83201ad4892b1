"""XNNPACK's x86 AVX512F sigmoid, reciprocal square root, sine and cosine, element by element, compiled by numba
(importing this module needs numba; `loops.exact()` imports it only on a CPU with AVX512F).

ExecuTorch's runtime runs XNNPACK's microkernels for these on such a CPU, with denormals off (inputs read as zero,
results flushed to zero): `f32-vsigmoid` avx512f_rr2_lut32_p2_perm2_scalef_div, `f32-vrsqrt` avx512f_rsqrt and
`f32-vsin` / `f32-vcos` avx512f_rational_5_4_div (the kernels XNNPACK's unary-elementwise config picks for
AVX512F). These loops do the same float operations in the same order, with explicit fused multiply-adds where
the microkernel has them, so the results are the same bits (tests/backends/xnnpack/test_unary_exact.py checks
them against ExecuTorch's runtime). The reciprocal square root starts from the CPU's own 14-bit estimate
(`vrsqrt14ss`, the instruction XNNPACK's kernel uses), which is why the module is only imported where the CPU
has it.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

F = np.float32
I32 = ir.IntType(32)
SIGN = np.uint32(0x80000000)
SMALLEST_NORMAL = F(2.0**-126)

jit = numba.njit(cache=True, nogil=True, error_model="numpy")


@intrinsic
def fma32(typingctx, a, b, c):  # noqa: ANN001, ANN201, ARG001  (numba's intrinsic signature)
    """a·b + c rounded once (llvm.fma: the FMA instruction, or an exact software form without one)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        f = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f], fnty=ir.FunctionType(f, [f, f, f]))
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def bits(typingctx, x):  # noqa: ANN001, ANN201, ARG001
    """The IEEE bits of a float32 as a uint32."""
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.bitcast(args[0], I32)

    return sig, codegen


@intrinsic
def from_bits(typingctx, u):  # noqa: ANN001, ANN201, ARG001
    """The float32 whose IEEE bits are the uint32 u."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@intrinsic
def rsqrt14(typingctx, x):  # noqa: ANN001, ANN201, ARG001
    """The CPU's 14-bit estimate of 1/√x (AVX512F `vrsqrt14ss`; compiling it elsewhere fails)."""
    sig = types.float32(types.float32)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        v4 = ir.VectorType(ir.FloatType(), 4)
        fn = builder.module.declare_intrinsic("llvm.x86.avx512.rsqrt14.ss",
                                              fnty=ir.FunctionType(v4, [v4, v4, v4, ir.IntType(8)]))
        zero = ir.Constant(v4, None)
        vec = builder.insert_element(zero, args[0], ir.Constant(I32, 0))
        estimate = builder.call(fn, [zero, vec, zero, ir.Constant(ir.IntType(8), -1)])
        return builder.extract_element(estimate, ir.Constant(I32, 0))

    return sig, codegen


@jit
def flush(v: np.float32) -> np.float32:
    """v with a denormal read or written as zero of its sign (XNNPACK runs with denormals off)."""
    return v if not abs(v) < SMALLEST_NORMAL else v * F(0)


# f32-vsigmoid avx512f_rr2_lut32_p2_perm2_scalef: e^z = 2^n · 2^(j/32) · e^t for z ≤ 0, n rounded to 1/32 by a
# magic bias, 2^(j/32) from a 32-entry table, e^t ≈ 1 + t·(c1 + t·c2), ln 2 split in two (Cody–Waite).
EXP2_TABLE = np.array([float.fromhex(h) for h in (  # 2^(j/32) rounded to float32, j = 0 … 31
    "0x1.000000p+0", "0x1.059B0Ep+0", "0x1.0B5586p+0", "0x1.11301Ep+0", "0x1.172B84p+0", "0x1.1D4874p+0",
    "0x1.2387A6p+0", "0x1.29E9E0p+0", "0x1.306FE0p+0", "0x1.371A74p+0", "0x1.3DEA64p+0", "0x1.44E086p+0",
    "0x1.4BFDAEp+0", "0x1.5342B6p+0", "0x1.5AB07Ep+0", "0x1.6247ECp+0", "0x1.6A09E6p+0", "0x1.71F75Ep+0",
    "0x1.7A1148p+0", "0x1.82589Ap+0", "0x1.8ACE54p+0", "0x1.93737Cp+0", "0x1.9C4918p+0", "0x1.A5503Cp+0",
    "0x1.AE89FAp+0", "0x1.B7F770p+0", "0x1.C199BEp+0", "0x1.CB720Ep+0", "0x1.D5818Ep+0", "0x1.DFC974p+0",
    "0x1.EA4AFAp+0", "0x1.F50766p+0",
)], F)
MAGIC_BIAS = F(float.fromhex("0x1.8p18"))
LOG2E = F(float.fromhex("0x1.715476p0"))
MINUS_LN2_HI = F(float.fromhex("-0x1.62E430p-1"))
MINUS_LN2_LO = F(float.fromhex("0x1.05C61p-29"))
C1, C2 = F(float.fromhex("0x1.0000F6p0")), F(0.5)
ONE, HALF = F(1), F(0.5)


@jit
def sigmoid(x: np.ndarray, out: np.ndarray, table: np.ndarray, lut: np.ndarray) -> None:
    """out = σ(x) with XNNPACK's AVX512F bits, x, out and lut 1-D float32 of one length (out may be x; lut is
    scratch) and table EXP2_TABLE: e = e^−|x|, f = e / (e + 1), 1 − f for x ≥ +0. An x of magnitude above
    ~2.3e38 or infinite gives 0 or 1, one in (~1e27, 2.3e38) NaN, as ExecuTorch's runtime does.

    Two passes: the table lookups alone (a gather keeps LLVM from vectorizing a loop), then the arithmetic,
    which vectorizes."""
    for i in range(x.shape[0]):
        lut[i] = table[bits(fma32(-abs(flush(x[i])), LOG2E, MAGIC_BIAS)) & np.uint32(31)]
    for i in range(x.shape[0]):
        v = x[i]
        z = -abs(flush(v))
        n = fma32(z, LOG2E, MAGIC_BIAS) - MAGIC_BIAS
        t = fma32(n, MINUS_LN2_HI, z)
        t = fma32(n, MINUS_LN2_LO, t)
        p = fma32(t, C2, C1)
        t = t * lut[i]
        p = fma32(t, p, lut[i])
        # scalef(p, n) = p · 2^floor(n), n ≤ 0; below 2^-126 flushed (2^-127 taken as 0), an infinite or NaN p
        # stays NaN; where z·log2(e) overflowed to −∞ ExecuTorch's runtime gives 0.
        k = n if n > F(-127) else F(-127)
        e = flush(p * from_bits(np.uint32(np.int32(np.floor(k)) + 127) << np.uint32(23)))
        e = F(0) if n == -np.inf else e
        f = e / (e + ONE)
        out[i] = ONE - f if bits(v) < SIGN else f


@jit
def rsqrt(x: np.ndarray, out: np.ndarray) -> None:
    """out = 1/√x with XNNPACK's AVX512F bits: the 14-bit estimate y, then one Newton–Raphson step
    y − (x·y² − 1)·(y/2) in separate roundings; 0 at +∞. Both 1-D float32 of one length (out may be x)."""
    for i in range(x.shape[0]):
        a = flush(x[i])
        y = rsqrt14(a)
        t = flush(a * flush(y * y)) - ONE
        r = flush(y - flush(flush(t) * flush(HALF * y)))
        out[i] = F(0) if a == F(np.inf) else r


# f32-vsin / f32-vcos avx512f_rational_5_4_div: x − round(x/2π)·2π (2π in two parts, fused), folded into
# [−π/2, π/2] by min/max with ±π − x (cos first takes π/2 − x), then x·(1 + α3x² + α5x⁴) / (1 + β2x² + β4x⁴).
PI, PI_HALF, TWO_PI_INV = F(3.1415927), F(1.5707964), F(0.15915494)
TWO_PI_HI, TWO_PI_LO = F(6.28125), F(1.9353072e-3)
ALPHA3, ALPHA5 = F(-1.3314664364e-01), F(3.2340581529e-03)
BETA2, BETA4 = F(3.3519912511e-02), F(4.8770775902e-04)


@jit
def _vmin(a: np.float32, b: np.float32) -> np.float32:
    return a if a < b else b  # minps: the second operand unless a < b (so a NaN gives b)


@jit
def _vmax(a: np.float32, b: np.float32) -> np.float32:
    return a if a > b else b


@jit
def _reduced(x: np.float32) -> np.float32:
    k = np.rint(x * TWO_PI_INV)
    return fma32(-k, TWO_PI_LO, fma32(-k, TWO_PI_HI, x))


@jit
def _rational(r: np.float32) -> np.float32:
    r = _vmin(r, PI - r)
    r = _vmax(r, -PI - r)
    r = _vmin(r, PI - r)
    r2 = flush(r * r)
    p = flush(r * fma32(r2, fma32(r2, ALPHA5, ALPHA3), ONE))
    q = fma32(r2, fma32(r2, BETA4, BETA2), ONE)
    return flush(p / q)


@jit
def sin(x: np.ndarray, out: np.ndarray) -> None:
    """out = sin(x) with XNNPACK's AVX512F bits (1-D float32 of one length; out may be x)."""
    for i in range(x.shape[0]):
        out[i] = _rational(_reduced(flush(x[i])))


@jit
def cos(x: np.ndarray, out: np.ndarray) -> None:
    """out = cos(x) with XNNPACK's AVX512F bits (1-D float32 of one length; out may be x)."""
    for i in range(x.shape[0]):
        out[i] = _rational(PI_HALF - _reduced(flush(x[i])))
