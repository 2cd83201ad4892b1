"""Elementwise nodes: unary math and activations, binary arithmetic with broadcasting, Convert, Copy.

Every function works on the working form (float32 real numbers), so the same step serves
fp32 and quantized values: the output grid rounds afterwards. Clamp is the identity, its
bounds being the node's output_min_max; Convert and Copy move numbers and let the output
grid requantize (fp32 → qint8, → per-row qdint8, qint8 → fp32, ...).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime import loops
from etbuild.backends.xnnpack.runtime.ops.base import Context, Op, Shape, broadcast, builds
from etbuild.kernels import native
from etbuild.kernels.numerics.erf import ERF_SQRT_HALF_CLAMP, ERF_SQRT_HALF_TANH, erf32
from etbuild.kernels.numerics.ufuncs import as_out_shape, bound_ufunc
from etbuild.runtime.steps import Step

UnaryFn = Callable[[np.ndarray, np.ndarray], None]
F = np.float32


# Outputs are passed positionally throughout: a ufunc's `out=` keyword costs more than its work on small arrays.
HALF = F(0.5)


def _sigmoid(x: np.ndarray, o: np.ndarray) -> None:
    np.multiply(x, HALF, o)  # σ(x) = (1 + tanh(x/2))/2: no overflow for large |x|
    np.tanh(o, o)
    np.multiply(o, HALF, o)
    np.add(o, HALF, o)


def _gelu(x: np.ndarray, o: np.ndarray) -> None:
    np.multiply(x, F(math.sqrt(0.5)), o)
    erf32(o, o)
    np.add(o, F(1), o)
    np.multiply(o, x, o)
    np.multiply(o, HALF, o)


def _hardswish(x: np.ndarray, o: np.ndarray) -> None:
    np.add(x, F(3), o)
    np.clip(o, F(0), F(6), out=o)
    np.multiply(o, x, o)
    np.multiply(o, F(1 / 6), o)


def _rsqrt(x: np.ndarray, o: np.ndarray) -> None:
    np.sqrt(x, o)
    np.divide(F(1), o, o)


def _copy(x: np.ndarray, o: np.ndarray) -> None:
    np.copyto(o, x)


# Each is called fn(x, o); for a ufunc the second positional argument is its output.
UNARY: dict[str, UnaryFn] = {
    "Sigmoid": _sigmoid, "Tanh": np.tanh, "Gelu": _gelu, "Hardswish": _hardswish, "Abs": np.abs,
    "Negate": np.negative, "Floor": np.floor, "Ceiling": np.ceil, "Square": np.square, "SquareRoot": np.sqrt,
    "ReciprocalSquareRoot": _rsqrt, "Exp": np.exp, "Log": np.log, "Sin": np.sin, "Cos": np.cos,
    "Clamp": _copy, "Convert": _copy, "Copy": _copy,
}


SPECIAL = {"Exp", "Log", "SquareRoot", "ReciprocalSquareRoot", "Square", "Div", "Gelu"}  # see Op.special
BLOCK = 16384  # elements per block of a multi-pass function: its passes then run in cache


def blocks(fn: UnaryFn, x: np.ndarray, o: np.ndarray) -> Step:
    """fn over contiguous x and o: one call, or (for long arrays) one per block of flat views."""
    if x.size <= BLOCK or not (x.flags.c_contiguous and o.flags.c_contiguous):
        return functools.partial(fn, x, o)
    xf, of = x.reshape(-1), o.reshape(-1)
    parts = [(xf[s : s + BLOCK], of[s : s + BLOCK]) for s in range(0, x.size, BLOCK)]

    def blockwise() -> None:
        for a, b in parts:
            fn(a, b)

    return blockwise


class Unary(Op):
    """out = fn(in), same shape."""

    def __init__(self, name: str, fn: UnaryFn, x: int, out: int) -> None:
        super().__init__([x], [out])
        self.name, self.fn, self.special = name, fn, name in SPECIAL

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        return [shapes[0]]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        x, o = ins[0], outs[0]
        exact = _xnnpack_bits(self.fn, x, o)
        if exact is not None:
            return exact
        if isinstance(self.fn, np.ufunc) or self.fn is _copy:
            return functools.partial(self.fn, x, o)
        fused = native.loops() if self.fn is _gelu else None
        pair = native.flat_pair(x, o) if fused is not None else None
        if pair is not None:  # the compiled loop: one pass
            return functools.partial(fused.gelu, *pair)
        if self.fn is _sigmoid and o.size <= BLOCK:
            return _small_sigmoid(x, o)
        if self.fn is _gelu and x.flags.c_contiguous and o.flags.c_contiguous and not np.may_share_memory(x, o):
            return _gelu_step(x, o)
        return blocks(self.fn, x, o)  # several passes: block by block


def _xnnpack_bits(fn: UnaryFn, x: np.ndarray, o: np.ndarray) -> Step | None:
    """Sigmoid, rsqrt, sin or cos as XNNPACK's AVX512F microkernels compute them (the same bits as ExecuTorch's
    runtime, exact.py), when the CPU has AVX512F, numba is there and x, o are flat-viewable float32;
    else None (the caller's forms: σ by tanh, 1/√x correctly rounded, numpy's sin and cos)."""
    xnn = loops.exact() if fn in (_sigmoid, _rsqrt, np.sin, np.cos) else None
    pair = native.flat_pair(x, o) if xnn is not None else None
    if pair is None:
        return None
    if fn is _sigmoid:
        return functools.partial(xnn.sigmoid, *pair, xnn.EXP2_TABLE, np.empty(o.size, F))
    loop = {_rsqrt: xnn.rsqrt, np.sin: xnn.sin, np.cos: xnn.cos}[fn]
    return functools.partial(loop, *pair)


def _gelu_step(x: np.ndarray, o: np.ndarray) -> Step:
    """Gelu over contiguous x into o (not sharing memory), block by block with scratch of its own:
    19 passes, no allocation per call. gelu(x) = x·(1 + erf(x/√2))/2 with erf(x/√2) = tanh(x·Q(x²)), erf32's
    form with the 1/√2 folded in (etbuild.kernels.numerics.erf)."""
    xf, of = x.reshape(-1), o.reshape(-1)
    width = min(x.size, BLOCK)
    z, t = np.empty(width, F), np.empty(width, F)
    parts = [(xf[s : s + BLOCK], of[s : s + BLOCK], z[: min(BLOCK, x.size - s)], t[: min(BLOCK, x.size - s)])
             for s in range(0, x.size, BLOCK)]
    q, lo, hi, one = ERF_SQRT_HALF_TANH, -ERF_SQRT_HALF_CLAMP, ERF_SQRT_HALF_CLAMP, F(1)
    clip, square, multiply, add, tanh = np.clip, np.square, np.multiply, np.add, np.tanh

    def gelu() -> None:
        for a, b, zz, tt in parts:
            clip(a, lo, hi, out=b)
            square(b, zz)
            multiply(zz, q[-1], tt)
            add(tt, q[-2], tt)
            for c in q[-3::-1]:
                multiply(tt, zz, tt)
                add(tt, c, tt)
            multiply(tt, b, tt)
            tanh(tt, tt)
            add(tt, one, tt)
            multiply(tt, a, b)
            multiply(b, HALF, b)

    return gelu


def _small_sigmoid(x: np.ndarray, o: np.ndarray) -> Step:
    """_sigmoid on a small array: its constant as an array of o's shape (a scalar operand costs a
    ufunc call more than its work here), the same numbers."""
    half, multiply, tanh, add = np.full(o.shape, HALF), np.multiply, np.tanh, np.add

    def sigmoid() -> None:
        multiply(x, half, o)
        tanh(o, o)
        multiply(o, half, o)
        add(o, half, o)

    return sigmoid


class Move(Unary):
    """Copy and Convert: the output holds the input's numbers, rounded by the output grid."""

    same_grid = True
    view = True


@builds(*UNARY)
def build_unary(node: g.UnaryNode, ctx: Context) -> Op:
    name = type(node).__name__
    ctx.check_flags(node.flags)
    x, out = ctx.value(node.input_id), ctx.value(node.output_id, "output")
    if name in ("Copy", "Convert"):
        return Move(name, UNARY[name], x.id, out.id)
    return Unary(name, UNARY[name], x.id, out.id)


@builds("LeakyReLU", "ELU")
def build_parametric(node: g.LeakyReLU | g.ELU, ctx: Context) -> Op:
    ctx.check_flags(node.flags)
    x, out = ctx.value(node.input_id), ctx.value(node.output_id, "output")
    if isinstance(node, g.LeakyReLU):
        return Unary("LeakyReLU", _leaky(F(node.negative_slope)), x.id, out.id)
    return Unary("ELU", _elu(F(node.alpha)), x.id, out.id)


def _leaky(slope: np.float32) -> UnaryFn:
    def leaky(x: np.ndarray, o: np.ndarray) -> None:
        np.multiply(x, slope, out=o)
        np.copyto(o, x, where=x >= 0)

    return leaky


def _elu(alpha: np.float32) -> UnaryFn:
    def elu(x: np.ndarray, o: np.ndarray) -> None:
        np.minimum(x, F(0), out=o)
        np.expm1(o, out=o)
        np.multiply(o, alpha, out=o)
        np.copyto(o, x, where=x > 0)

    return elu


def _prelu(x: np.ndarray, slope: np.ndarray, o: np.ndarray) -> None:
    np.multiply(x, slope, out=o)
    np.copyto(o, x, where=x >= 0)


BINARY: dict[str, Callable[..., object]] = {
    "Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Div": np.divide,
    "Minimum": np.minimum, "Maximum": np.maximum, "PReLU": _prelu,
}


class Binary(Op):
    """out = fn(a, b) with NumPy broadcasting."""

    def __init__(self, name: str, a: int, b: int, out: int) -> None:
        super().__init__([a, b], [out])
        self.name, self.fn, self.special = name, BINARY[name], name in SPECIAL

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        return [broadcast(shapes[0], shapes[1], self)]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        if self.fn is _prelu:
            return functools.partial(_prelu, ins[0], ins[1], outs[0])
        a, b, o = ins[0], ins[1], outs[0]  # unit-dim broadcasts bound as views of out's shape
        return bound_ufunc(self.fn, as_out_shape(a, o.shape), as_out_shape(b, o.shape), out=o)


@builds(*BINARY)
def build_binary(node: g.BinaryNode, ctx: Context) -> Op:
    ctx.check_flags(node.flags)
    a, b = ctx.value(node.input1_id), ctx.value(node.input2_id)
    return Binary(type(node).__name__, a.id, b.id, ctx.value(node.output_id, "output").id)
