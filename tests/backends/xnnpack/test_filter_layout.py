"""A delegate called only with static shapes holds each float filter of a many-row product in the one layout its
BLAS reads faster (kernels/numerics/filter_layout.py); a delegate with dynamic shapes keeps the [N, K] form its
one-row loops read."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.runtime import XnnpackBackend, loops
from etbuild.backends.xnnpack.runtime.ops import gemm
from etbuild.runtime import Program, delegates
from etbuild.runtime.format import program as fb
from tests.backends.xnnpack.graphs import fc_graph, float_tensor

ROWS, K, N = 32, 256, 128


def _program(dynamic: bool) -> tuple[bytes, np.ndarray, np.ndarray]:
    gb, w, b = fc_graph(k=K, n=N, rows=ROWS)
    tensors = [float_tensor(ROWS, K), float_tensor(ROWS, N)]
    if dynamic:
        for t in tensors:
            t.shape_dynamism = fb.TensorShapeDynamism.DYNAMIC_BOUND
    return gb.pte(tensors), w, b


def _fully_connected(method) -> gemm.FullyConnected:
    (handle,) = method.delegates.values()
    (op,) = [op for op in handle.graph.ops if isinstance(op, gemm.FullyConnected)]
    return op


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_plan_tells_the_backend_whether_its_shapes_are_fixed(monkeypatch, dynamic):
    seen = []
    init = XnnpackBackend.init

    def recording(self, *args):
        seen.append(delegates.fixed_shapes())
        return init(self, *args)

    monkeypatch.setattr(XnnpackBackend, "init", recording)
    Program(_program(dynamic)[0]).load_method()
    assert seen == [not dynamic]
    assert delegates.fixed_shapes() is False  # only while the delegate initialises


def test_either_layout_gives_the_same_bits_and_only_one_is_held(monkeypatch):
    pte, w, b = _program(dynamic=False)
    x = np.random.default_rng(3).standard_normal((ROWS, K)).astype(np.float32)
    results = {}
    for kn in (True, False):
        monkeypatch.setattr(gemm, "kn_faster", lambda m, k, n, default, kn=kn: kn)
        method = Program(pte).load_method()
        op = _fully_connected(method)
        assert op.by_output is None and op.packed.shape == (K, N)
        assert op.packed.flags.c_contiguous is kn and op.packed.flags.f_contiguous is not kn
        (results[kn],) = method(x)
    np.testing.assert_array_equal(results[True], results[False])
    np.testing.assert_allclose(results[True], np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(loops.compiled() is None, reason="the [N, K] form is for numba's one-row loops")
def test_a_dynamic_delegate_keeps_the_form_one_row_reads(monkeypatch):
    monkeypatch.setattr(gemm, "kn_faster", lambda *args, **kwargs: pytest.fail("a dynamic delegate was probed"))
    pte, w, b = _program(dynamic=True)
    method = Program(pte).load_method()
    op = _fully_connected(method)
    assert op.by_output is not None and op.by_output.shape == (N, K)
    x = np.random.default_rng(4).standard_normal((1, K)).astype(np.float32)
    (y,) = method(x)
    np.testing.assert_allclose(y, np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)
