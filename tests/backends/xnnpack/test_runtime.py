"""Our XNNPACK runtime on hand-built graphs (no executorch needed): semantics, boundaries, memory, registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime import BACKEND, XnnpackBackend
from etbuild.backends.xnnpack.runtime.grids import Grid
from etbuild.errors import KernelError
from etbuild.runtime import Program, threads
from etbuild.runtime import backend_registry as registry
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
    assert len(handle.steps) == 3  # the reshape runs no step
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


@pytest.mark.parametrize("native_loops", ["1", "0"], ids=["numba", "numpy"])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("form", ["int4-blocks", "int8-channels"])
def test_quantized_filters_give_one_product_for_any_row_count(form, rows, native_loops, monkeypatch):
    """One row (a decode step) reads the integer codes through numba's loop; more rows, or no numba, the
    dequantized float32 matrix: the same product within float32 rounding, the bias added."""
    monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=native_loops != "0"))
    rng = np.random.default_rng(4)
    n, k = 37, 64  # an odd output count, two blocks of 32
    gb = GraphBuilder()
    if form == "int4-blocks":
        codes = rng.integers(-8, 8, size=(n, k))
        packed = ((codes[:, 0::2] + 8) | ((codes[:, 1::2] + 8) << 4)).astype(np.uint8)
        scales = (rng.random((n, 2)) + 0.5).astype(np.float32)
        bf16 = (scales.view(np.uint32) >> 16).astype(np.uint16)
        scales = (bf16.astype(np.uint32) << 16).view(np.float32)
        quant = g.PerChannelGroupQuant([], 0, 32, gb.constant(bf16), n * 2)
        w = gb.tensor((n, k), DT.QBINT4, data=packed, quant=quant)
        weights = (codes.reshape(n, 2, 32) * scales.reshape(n, 2, 1)).reshape(n, k)
    else:
        codes = rng.integers(-127, 128, size=(n, k))
        scales = (rng.random(n) * 0.01 + 0.001).astype(np.float32)
        w = gb.tensor((n, k), DT.QCINT8, data=codes.astype(np.int8), quant=g.PerChannelQuant(list(scales), 0))
        weights = codes * scales.reshape(n, 1)
    bias_values = rng.standard_normal(n).astype(np.float32)
    x = gb.tensor((rows, k), flags=IN)
    bias = gb.tensor((n,), data=bias_values)
    out = gb.tensor((rows, n), flags=OUT)
    gb.node("FullyConnected", input1_id=x, filter_id=w, bias_id=bias, output_id=out)
    data = rng.standard_normal((rows, k)).astype(np.float32)
    y = np.empty((rows, n), np.float32)
    handle = gb.handle()
    handle.execute([data, y])
    expected = data.astype(np.float64) @ weights.T + bias_values
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4)
    handle.execute([data * 2, y])  # bound once: the step reads the input's memory anew
    np.testing.assert_allclose(y, 2 * data.astype(np.float64) @ weights.T + bias_values, rtol=1e-5, atol=2e-4)


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
    assert {name: b.id for name, b in registry.BACKENDS.items()} == {
        "xnnpack": "XnnpackBackend", "ethos-u": "EthosUBackend", "tosa": "TOSABackend"}
    assert registry.backend_ids() == ["EthosUBackend", "TOSABackend", "XnnpackBackend"]
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
    root = Path(__file__).resolve().parents[3]  # so that `tests` imports
    proc = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------- window nodes against torch, odd geometries

CONV_GEOMETRIES = [  # (batch, in channels, out channels, groups, h, w, kernel, stride, dilation, padding)
    (1, 4, 6, 1, 7, 8, (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, 3, 5, 1, 9, 7, (3, 2), (2, 1), (1, 2), (2, 0)),
    (1, 4, 6, 2, 10, 9, (3, 3), (2, 2), (2, 1), (1, 2)),
    (1, 5, 7, 1, 6, 5, (1, 1), (2, 2), (1, 1), (0, 0)),
    (3, 8, 4, 1, 5, 5, (1, 1), (1, 1), (1, 1), (0, 0)),
]
DEPTHWISE_GEOMETRIES = [  # (batch, channels, multiplier, h, w, kernel, stride, dilation, padding)
    (1, 4, 1, 7, 8, (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, 3, 2, 9, 7, (3, 3), (2, 2), (1, 1), (1, 1)),
    (1, 5, 1, 10, 10, (5, 5), (2, 2), (2, 2), (2, 2)),
    (1, 2, 3, 6, 5, (3, 2), (1, 2), (2, 1), (0, 1)),
    (1, 6, 1, 11, 9, (3, 3), (3, 3), (1, 1), (1, 1)),
]


def _nhwc(x):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def _conv_node(gb, x, w, b, out, kernel, stride, dilation, padding, groups, gin, gout, member="Conv2d", adjust=(0, 0)):
    gb.node(member, padding_top=padding[0], padding_bottom=padding[0], padding_left=padding[1],
            padding_right=padding[1], kernel_height=kernel[0], kernel_width=kernel[1], subsampling_height=stride[0],
            subsampling_width=stride[1], dilation_height=dilation[0], dilation_width=dilation[1],
            group_input_channels=gin, group_output_channels=gout, groups=groups, adjustment_height=adjust[0],
            adjustment_width=adjust[1], input1_id=x, filter_id=w, bias_id=b, output_id=out)


def _run_nhwc(gb, x, shape):
    out = np.empty(shape, np.float32)
    gb.handle().execute([_nhwc(x), out])
    return out.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("geometry", CONV_GEOMETRIES)
def test_conv2d_against_torch(geometry):
    torch = pytest.importorskip("torch")
    n, cin, cout, groups, h, w, kernel, stride, dilation, padding = geometry
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    weight = rng.standard_normal((cout, cin // groups, *kernel)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(bias), stride,
                                     padding, dilation, groups).numpy()
    gb = GraphBuilder()
    xi, wi = gb.tensor((n, h, w, cin), flags=IN), gb.tensor((cout, *kernel, cin // groups), data=_nhwc(weight))
    bi, oi = gb.tensor((cout,), data=bias), gb.tensor(_nhwc(ref).shape, flags=OUT)
    _conv_node(gb, xi, wi, bi, oi, kernel, stride, dilation, padding, groups, cin // groups, cout // groups)
    np.testing.assert_allclose(_run_nhwc(gb, x, _nhwc(ref).shape), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("geometry", DEPTHWISE_GEOMETRIES)
def test_depthwise_conv2d_against_torch(geometry):
    torch = pytest.importorskip("torch")
    n, c, mult, h, w, kernel, stride, dilation, padding = geometry
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((c * mult, 1, *kernel)).astype(np.float32)
    bias = rng.standard_normal(c * mult).astype(np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(bias), stride,
                                     padding, dilation, c).numpy()
    gb = GraphBuilder()
    xi = gb.tensor((n, h, w, c), flags=IN)
    wi = gb.tensor((1, *kernel, c * mult), data=np.ascontiguousarray(weight.transpose(1, 2, 3, 0)))
    bi, oi = gb.tensor((c * mult,), data=bias), gb.tensor(_nhwc(ref).shape, flags=OUT)
    _conv_node(gb, xi, wi, bi, oi, kernel, stride, dilation, padding, c, 1, mult, "DepthwiseConv2d")
    np.testing.assert_allclose(_run_nhwc(gb, x, _nhwc(ref).shape), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("groups", "stride", "dilation", "padding", "adjust"),
                         [(1, (2, 2), (1, 1), (1, 1), (1, 1)), (2, (2, 3), (1, 1), (0, 1), (1, 0)),
                          (1, (1, 1), (2, 1), (1, 0), (0, 0)), (3, (3, 2), (1, 2), (2, 1), (2, 1))])
def test_conv_transpose2d_against_torch(groups, stride, dilation, padding, adjust):
    torch = pytest.importorskip("torch")
    n, cin, cout, h, w, kernel = 2, 3 * groups, 2 * groups, 5, 4, (3, 2)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    weight = rng.standard_normal((cin, cout // groups, *kernel)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    ref = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(bias),
                                               stride, padding, adjust, groups, dilation).numpy()
    # OHWI per group: [G·Cout_g, KH, KW, Cin_g] from torch's [G·Cin_g, Cout_g, KH, KW]
    ohwi = weight.reshape(groups, cin // groups, cout // groups, *kernel).transpose(0, 2, 3, 4, 1)
    gb = GraphBuilder()
    xi = gb.tensor((n, h, w, cin), flags=IN)
    wi = gb.tensor((cout, *kernel, cin // groups), data=np.ascontiguousarray(ohwi.reshape(cout, *kernel, -1)))
    bi, oi = gb.tensor((cout,), data=bias), gb.tensor(_nhwc(ref).shape, flags=OUT)
    _conv_node(gb, xi, wi, bi, oi, kernel, stride, dilation, padding, groups, cin // groups, cout // groups,
               "ConvTranspose2d", adjust)
    np.testing.assert_allclose(_run_nhwc(gb, x, _nhwc(ref).shape), ref, rtol=1e-5, atol=1e-5)


POOLINGS = [
    ("MaxPooling2d", (3, 3), (2, 2), (1, 1), (1, 1)), ("MaxPooling2d", (2, 3), (1, 2), (2, 1), (0, 1)),
    ("AvgPooling2d", (3, 3), (2, 2), (1, 1), (1, 1)), ("AvgPooling2d", (2, 3), (2, 1), (1, 1), (1, 0)),
]


@pytest.mark.parametrize(("member", "kernel", "stride", "dilation", "padding"), POOLINGS)
def test_pooling_against_torch(member, kernel, stride, dilation, padding):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 8)).astype(np.float32)
    tx = torch.from_numpy(x)
    if member == "MaxPooling2d":
        ref = torch.nn.functional.max_pool2d(tx, kernel, stride, padding, dilation).numpy()
    else:
        ref = torch.nn.functional.avg_pool2d(tx, kernel, stride, padding, count_include_pad=False).numpy()
    gb = GraphBuilder()
    xi, oi = gb.tensor((2, 9, 8, 3), flags=IN), gb.tensor(_nhwc(ref).shape, flags=OUT)
    gb.node(member, padding_top=padding[0], padding_bottom=padding[0], padding_left=padding[1],
            padding_right=padding[1], pooling_height=kernel[0], pooling_width=kernel[1], stride_height=stride[0],
            stride_width=stride[1], dilation_height=dilation[0], dilation_width=dilation[1], input_id=xi, output_id=oi)
    np.testing.assert_allclose(_run_nhwc(gb, x, _nhwc(ref).shape), ref, rtol=1e-6, atol=1e-6)


def _unary_graph(member: str, shape: tuple[int, ...]) -> GraphBuilder:
    gb = GraphBuilder()
    x, out = gb.tensor(shape, flags=IN), gb.tensor(shape, flags=OUT)
    gb.node(member, input_id=x, output_id=out, flags=0)
    return gb


def _softmax64(x: np.ndarray) -> np.ndarray:
    shifted = x.astype(np.float64) - x.max(-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize(
    "case",
    [
        "plain",  # exp(x) / Σ exp(x): no row maxima
        "large",  # inputs past 87 − ln(n): shifted by each row's maximum
        "tiny_rows",  # rows whose exps sum below TINY_SUM: shifted
        "minus_inf",  # -inf entries are zeros; a row of only -inf is nan, as in torch
        "nan",
    ],
)
def test_softmax_without_and_with_the_row_maxima(case: str) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 5, 33)) * 4).astype(np.float32)
    if case == "large":
        x[1, 2] += 120
    elif case == "tiny_rows":
        x[0, 1] -= 150
    elif case == "minus_inf":
        x[0, 0, ::3] = -np.inf
        x[1, 4] = -np.inf
    elif case == "nan":
        x[1, 3, 7] = np.nan
    out = np.empty_like(x)
    handle = _unary_graph("Softmax", x.shape).handle()
    for _ in range(2):  # the second call reuses the bound step
        handle.execute([x, out])
        with np.errstate(invalid="ignore"):
            want = _softmax64(x)
        np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-7)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))


@pytest.mark.parametrize("setting", ["1", "0"])
@pytest.mark.parametrize(("member", "shape"), [("Gelu", (3, 70, 101)), ("Sigmoid", (2, 96)), ("Sigmoid", (3, 70, 101))])
def test_unary_nodes_with_and_without_the_compiled_loops(
    member: str, shape: tuple[int, ...], setting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=setting != "0"))
    x = (np.random.default_rng(4).standard_normal(shape) * 3).astype(np.float32)
    out = np.empty_like(x)
    _unary_graph(member, x.shape).handle().execute([x, out])
    want = {"Gelu": torch.nn.functional.gelu, "Sigmoid": torch.sigmoid}[member](torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize(
    ("grid", "bounds"),
    [
        (Grid(DT.QINT8, 0.05, 3), (-float("inf"), float("inf"))),
        (Grid(DT.QINT8, 0.05, 3), (0.0, 6.0)),  # a fused ReLU6: bounds quantized like the values
        (Grid(DT.QUINT8, 0.02, 128), (-float("inf"), float("inf"))),
        (Grid(DT.QDINT8, row_dims=1), (-float("inf"), float("inf"))),
    ],
)
def test_snapping_onto_grids_compiled_and_by_numpy_gives_the_same_bits(grid, bounds, monkeypatch) -> None:
    a = (np.random.default_rng(5).standard_normal((6, 37)) * 4).astype(np.float32)
    a[2] = 0.0  # a qdint8 row without range
    a[3] = np.abs(a[3])  # one without negatives
    results = []
    for setting in ("1", "0"):
        monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=setting != "0"))
        copy = a.copy()
        grid.snapper(*bounds)(copy)
        results.append(copy)
    assert results[0].tobytes() == results[1].tobytes()
    assert not np.array_equal(results[0], a)
