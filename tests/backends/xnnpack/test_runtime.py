"""Our XNNPACK runtime on hand-built graphs (no executorch needed): semantics, boundaries, memory, registry."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from etbuild.backends import registry
from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime import BACKEND, XnnpackBackend
from etbuild.errors import KernelError
from etbuild.runtime import Program
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program, write_program
from tests.backends.xnnpack.graphs import DT, GraphBuilder, fc_graph, float_tensor

IN, OUT = g.FLAG_EXTERNAL_INPUT, g.FLAG_EXTERNAL_OUTPUT


def test_fully_connected_with_fused_relu():
    gb, w, b = fc_graph(k=5, n=3, rows=4)
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    out = np.empty((4, 3), np.float32)
    result = gb.handle().execute([x, out])
    assert result[0] is out
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), rtol=1e-6, atol=1e-6)


def test_dynamic_batch_resizes_through_the_graph():
    gb, w, b = fc_graph(k=4, n=3, rows=8)
    tensors = [float_tensor(8, 4), float_tensor(8, 3)]
    for t in tensors:
        t.shape_dynamism = fb.TensorShapeDynamism.DYNAMIC_BOUND
    method = Program(gb.pte(tensors)).load_method()
    for rows in (8, 3, 1, 5):
        x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
        (y,) = method(x)
        assert y.shape == (rows, 3)
        np.testing.assert_allclose(y, np.maximum(x @ w.T + b, 0), rtol=1e-6, atol=1e-6)


def test_static_output_cannot_change_shape():
    gb, _, _ = fc_graph(rows=2)
    handle = gb.handle()
    with pytest.raises(KernelError, match="static shape"):
        handle.execute([np.zeros((3, 4), np.float32), np.zeros((2, 3), np.float32)])


def test_processed_data_inline_in_the_program():
    gb, w, b = fc_graph()
    pte = gb.pte([float_tensor(2, 4), float_tensor(2, 3)])
    program, _ = read_program(pte)
    blob = gb.blob()
    program.execution_plan[0].delegates[0].processed = fb.BackendDelegateDataReference(fb.DataLocation.INLINE, 0)
    program.backend_delegate_data = [fb.BackendDelegateInlineData(blob)]
    named = [b"", b""] + list(gb.named.values())
    x = np.ones((2, 4), np.float32)
    (y,) = Program(write_program(program, named)).load_method()(x)
    np.testing.assert_allclose(y, np.maximum(x @ w.T + b, 0), rtol=1e-6)


def test_reshape_is_a_view_and_values_share_the_arena():
    gb = GraphBuilder()
    x = gb.tensor((2, 6), flags=IN)
    a, v, c = gb.tensor((2, 6)), gb.tensor((3, 4)), gb.tensor((3, 4))
    out = gb.tensor((3, 4), flags=OUT)
    gb.node("Sigmoid", input_id=x, output_id=a)
    gb.node("StaticReshape", num_dims=2, new_shape=[0, 4], input_id=a, output_id=v)
    gb.node("Tanh", input_id=v, output_id=c)
    gb.node("Negate", input_id=c, output_id=out)
    handle = gb.handle()
    data = np.linspace(-2, 2, 12, dtype=np.float32).reshape(2, 6)
    y = np.empty((3, 4), np.float32)
    handle.execute([data, y])
    np.testing.assert_allclose(y, -np.tanh(1 / (1 + np.exp(-data))).reshape(3, 4), rtol=1e-6)
    assert len(handle._steps) == 3  # the reshape runs no step
    assert handle._arena.nbytes < 3 * 12 * 4  # sigmoid's buffer is reused once dead


def test_quantized_boundary_and_requantization():
    """int8 in, int8 out: Convert nodes are not needed when the externals are quantized themselves."""
    gb = GraphBuilder()
    x = gb.tensor((5,), DT.QINT8, flags=IN, quant=g.PerTensorQuant(0.1, 3))
    y = gb.tensor((5,), DT.QUINT8, flags=OUT, quant=g.PerTensorQuant(0.05, 128))
    gb.node("Clamp", clamp=(-1.0, 2.0), input_id=x, output_id=y)
    codes = np.array([-128, -10, 3, 40, 127], np.int8)
    out = np.empty(5, np.uint8)
    gb.handle().execute([codes, out])
    real = np.clip((codes.astype(np.float32) - 3) * np.float32(0.1), -1.0, 2.0)
    np.testing.assert_array_equal(out, np.clip(np.rint(real / np.float32(0.05)) + 128, 0, 255).astype(np.uint8))


def test_block_quantized_int4_weights():
    """qbint4: two codes per byte, even index in the low nibble, zero point 8, one bf16 scale per block."""
    rng = np.random.default_rng(0)
    codes = rng.integers(-8, 8, size=(3, 8))
    packed = ((codes[:, 0::2] + 8) | ((codes[:, 1::2] + 8) << 4)).astype(np.uint8)
    scales = np.array([0.5, 0.25, 1.0, 2.0, 0.125, 4.0], np.float32)  # exact in bf16
    bf16 = (scales.view(np.uint32) >> 16).astype(np.uint16)
    gb = GraphBuilder()
    x = gb.tensor((2, 8), flags=IN)
    w = gb.tensor((3, 8), DT.QBINT4, data=packed, quant=g.PerChannelGroupQuant([], 0, 4, gb.constant(bf16), 6))
    out = gb.tensor((2, 3), flags=OUT)
    gb.node("FullyConnected", input1_id=x, filter_id=w, bias_id=g.NO_ID, output_id=out)
    data = rng.standard_normal((2, 8)).astype(np.float32)
    y = np.empty((2, 3), np.float32)
    gb.handle().execute([data, y])
    weights = (codes.reshape(3, 2, 4) * scales.reshape(3, 2, 1)).reshape(3, 8)
    np.testing.assert_allclose(y, data @ weights.T, rtol=1e-5, atol=1e-5)


def test_legacy_dynamic_quantization_of_an_input():
    """dq_datatype qint8 on an fp32 input: the graph sees the input quantized per row (as a qdint8 Convert gives)."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((3, 6)).astype(np.float32)
    data = rng.standard_normal((4, 6)).astype(np.float32)
    results = []
    for legacy in (True, False):
        gb = GraphBuilder()
        x = gb.tensor((4, 6), flags=IN)
        src = x
        if legacy:
            gb.values[x].value.dq_datatype = DT.QINT8
        else:
            src = gb.tensor((4, 6), DT.QDINT8, quant=g.PerTokenDynamicQuant(1))
            gb.node("Convert", input_id=x, output_id=src)
        wid, out = gb.tensor((3, 6), data=w), gb.tensor((4, 3), flags=OUT)
        gb.node("FullyConnected", input1_id=src, filter_id=wid, bias_id=g.NO_ID, output_id=out)
        y = np.empty((4, 3), np.float32)
        gb.handle().execute([data.copy(), y])
        results.append(y)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], data @ w.T, atol=0.05)
    assert not np.array_equal(results[0], data @ w.T)  # it was quantized


def test_argmax_pooling_gives_each_windows_maximum_and_its_position():
    gb = GraphBuilder()
    x = gb.tensor((1, 4, 6, 2), flags=IN)
    values, index = gb.tensor((1, 2, 2, 2), flags=OUT), gb.tensor((1, 2, 2, 2), DT.INT32, flags=OUT)
    gb.node("ArgMaxPooling2d", pooling_height=2, pooling_width=3, input_id=x, output_value_id=values,
            output_index_id=index)
    data = np.random.default_rng(3).standard_normal((1, 4, 6, 2)).astype(np.float32)
    got_values, got_index = np.empty((1, 2, 2, 2), np.float32), np.empty((1, 2, 2, 2), np.int32)
    gb.handle().execute([data, got_values, got_index])
    windows = data.reshape(1, 2, 2, 2, 3, 2).transpose(0, 1, 3, 2, 4, 5).reshape(1, 2, 2, 6, 2)
    np.testing.assert_array_equal(got_values, windows.max(axis=3))
    np.testing.assert_array_equal(got_index, windows.argmax(axis=3))


def test_half_precision_values_round_at_every_node():
    gb = GraphBuilder()
    a, b = gb.tensor((7,), DT.FP16, flags=IN), gb.tensor((7,), DT.FP16, flags=IN)
    out = gb.tensor((7,), DT.FP16, flags=OUT)
    gb.node("Multiply", input1_id=a, input2_id=b, output_id=out)
    x = np.linspace(0.1, 7, 7).astype(np.float16)
    y = np.empty(7, np.float16)
    gb.handle().execute([x, x, y])
    np.testing.assert_array_equal(y, (x.astype(np.float32) ** 2).astype(np.float16))


def test_registry_table_and_lookup():
    assert {name: b.id for name, b in registry.BACKENDS.items()} == {"xnnpack": "XnnpackBackend"}
    assert registry.backend_ids() == ["XnnpackBackend"]
    assert registry.backend("XnnpackBackend") is BACKEND and isinstance(BACKEND, XnnpackBackend)
    assert registry.backend("VulkanBackend") is None


TORCH_FREE = """
import sys
sys.modules["torch"] = None
import numpy as np
from tests.backends.xnnpack.graphs import fc_graph
gb, w, b = fc_graph()
x = np.ones((2, 4), np.float32)
y = np.empty((2, 3), np.float32)
gb.handle().execute([x, y])
assert np.allclose(y, np.maximum(x @ w.T + b, 0), atol=1e-6)
assert "torch" not in {m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}
"""


def test_runtime_is_torch_free():
    proc = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
