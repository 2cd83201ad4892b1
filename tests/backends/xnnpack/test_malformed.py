"""Malformed XNNPACK blobs raise InvalidProgram, quickly: never an IndexError, a hang or a huge allocation."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.blob import write_blob
from etbuild.backends.xnnpack.runtime import BACKEND
from etbuild.errors import InvalidProgram
from etbuild.runtime import Program
from tests.backends.xnnpack.graphs import DT, GraphBuilder, fc_graph, float_tensor
from tests.fuzz.blob_mutators import BlobByteMutator, BlobStructureMutator
from tests.fuzz.harness import campaign


def _init(blob: bytes, named: dict[str, bytes]) -> None:
    BACKEND.init(memoryview(blob), {}, {k: memoryview(v) for k, v in named.items()})


def _rejects(gb: GraphBuilder, match: str) -> None:
    start = time.perf_counter()
    with pytest.raises(InvalidProgram, match=match):
        _init(write_blob(gb.graph()), gb.named)
    assert time.perf_counter() - start < 2.0


def test_every_truncation_is_invalid():
    gb, _, _ = fc_graph()
    blob = write_blob(gb.graph())
    for n in range(len(blob)):
        with pytest.raises(InvalidProgram):
            _init(blob[:n], gb.named)


def test_random_corruption_is_invalid_or_harmless():
    gb, _, _ = fc_graph()
    blob = write_blob(gb.graph())
    rng = random.Random(0)
    start = time.perf_counter()
    for _ in range(400):
        data = bytearray(blob)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            handle = BACKEND.init(memoryview(bytes(data)), {}, {k: memoryview(v) for k, v in gb.named.items()})
        except InvalidProgram:
            continue
        assert handle.arg_count >= 0
    assert time.perf_counter() - start < 60


def _mutated(**changes) -> GraphBuilder:
    gb, _, _ = fc_graph()
    for path, value in changes.items():
        obj = gb
        *parts, last = path.split("__")
        for part in parts:
            obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
        if last.isdigit():
            obj[int(last)] = value
        else:
            setattr(obj, last, value)
    return gb


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"nodes__0__node__input1_id": 17}, "input id 17 names no value"),
        ({"nodes__0__node__filter_id": g.NO_ID}, "filter id .* names no value"),
        ({"values__3__value__id_out": 0}, "defined twice"),
        ({"values__0__value__external_id": 9}, "not below num_externs"),
        ({"values__0__value__flags": 4}, "flags"),
        ({"values__1__value__flags": 3}, "both an external input and an external output"),
        ({"values__0__value__num_dims": 3}, "num_dims 3 but 2 dims"),
        ({"values__0__value__dims": [2, 4, 1, 1, 1, 1, 1], "values__0__value__num_dims": 7}, "rank 7"),
        ({"values__1__value__dims": [3, 5]}, "holds 48 bytes, 60 are needed"),
        ({"values__1__value__dims": [1 << 16, 1 << 16]}, "more than 2147483648 elements|bytes"),
        ({"values__2__value__dims": [1]}, "bias dims"),
        ({"values__1__value__datatype": 99}, "datatype 99"),
        ({"values__1__value__datatype": DT.QINT8}, "needs PerTensorQuant"),
        ({"values__1__value__constant_buffer_idx": 7}, "constant 7 does not exist"),
        ({"values__0__value__constant_buffer_idx": 1}, "both external and constant"),
        ({"constants__1__named_key": "nope"}, "named data 'nope'"),
        ({"nodes__0__node__output_id": 0}, "is an input"),
        ({"nodes__0__output_min_max": g.OutputMinMax(1.0, -1.0)}, "exceeds output_max"),
        ({"nodes__0__node__flags": 0x80}, "flags 0x80"),
        ({"externs": 5000}, "num_externs 5000"),
        ({"nodes__0__node": g.ScaledDotProductAttention()}, "no ScaledDotProductAttention"),
    ],
)
def test_malformed_graph_is_rejected(changes, match):
    _rejects(_mutated(**changes), match)


def test_output_nothing_computes():
    gb, _, _ = fc_graph()
    gb.nodes.clear()
    _rejects(gb, "external output that no node computes")


def test_node_order_is_checked():
    gb, _, _ = fc_graph()
    mid = gb.tensor((2, 3))
    gb.node("Sigmoid", input_id=mid, output_id=3)
    gb.nodes[0].node.output_id = mid
    gb.nodes.reverse()
    _rejects(gb, "not computed before it")


def test_quantization_parameters_are_checked():
    gb = GraphBuilder()
    x = gb.tensor((2, 4), flags=g.FLAG_EXTERNAL_INPUT)
    q = gb.tensor((2, 4), DT.QINT8, quant=g.PerTensorQuant(0.0, 0))
    out = gb.tensor((2, 4), flags=g.FLAG_EXTERNAL_OUTPUT)
    gb.node("Convert", input_id=x, output_id=q)
    gb.node("Convert", input_id=q, output_id=out)
    _rejects(gb, "scales must be positive")
    gb.values[1].value.quant_params = g.PerTensorQuant(0.5, 300)
    _rejects(gb, "zero point 300")
    gb.values[1].value.quant_params = g.PerChannelQuant([], 5, 0, 4)
    _rejects(gb, "needs PerTensorQuant")


def test_per_channel_scales_are_checked():
    gb, w, _ = fc_graph()
    q = np.clip(np.rint(w * 10), -127, 127).astype(np.int8)
    gb.values[1].value = g.QuantizedTensorValue(
        g.TensorValue(DT.QCINT8, 2, [3, 4], gb.constant(q), g.NO_ID, 0, 1),
        g.PerChannelQuant([], 0, gb.constant(np.full(2, 0.1, np.float32)), 2),
    )
    _rejects(gb, "num_scales 2, expected 3")
    gb.values[1].value.quant_params = g.PerChannelQuant([], 2, 0, 0)
    _rejects(gb, "channel_dim 2")


def test_huge_work_buffers_are_refused():
    gb = GraphBuilder()
    x = gb.tensor((1, 64, 64, 1), flags=g.FLAG_EXTERNAL_INPUT)
    w = gb.tensor((1, 60, 60, 1), data=np.ones((1, 60, 60, 1), np.float32))
    out = gb.tensor((1, 65000, 65000, 1), flags=g.FLAG_EXTERNAL_OUTPUT)
    gb.node("Conv2d", padding_top=32000, padding_bottom=32000, padding_left=32000, padding_right=32000,
            kernel_height=60, kernel_width=60, subsampling_height=1, subsampling_width=1, dilation_height=1,
            dilation_width=1, group_input_channels=1, group_output_channels=1, groups=1, input1_id=x, filter_id=w,
            bias_id=g.NO_ID, output_id=out)
    _rejects(gb, "more than|work buffer")


def test_program_naming_a_backend_the_runtime_lacks():
    gb, _, _ = fc_graph()
    pte = gb.pte([float_tensor(2, 4), float_tensor(2, 3)], backend_id="NoSuchBackend")
    message = (r"delegate 0 \(NoSuchBackend\): this runtime has no backend 'NoSuchBackend' "
               r"\(it has: EthosUBackend, TOSABackend, XnnpackBackend\)")
    with pytest.raises(InvalidProgram, match=message):
        Program(pte).load_method()


def test_delegate_call_with_the_wrong_argument_count():
    gb, _, _ = fc_graph()
    pte = gb.pte([float_tensor(2, 4), float_tensor(2, 3), float_tensor(2, 3)])
    with pytest.raises(InvalidProgram, match="the delegate takes 2 values, the call passes 3"):
        Program(pte).load_method()


def test_malformed_blob_inside_a_program_names_the_delegate():
    gb, _, _ = fc_graph()
    gb.nodes[0].node.bias_id = 42
    pte = gb.pte([float_tensor(2, 4), float_tensor(2, 3)])
    with pytest.raises(InvalidProgram, match=r"delegate 0 \(XnnpackBackend\): node 0 \(FullyConnected\): bias id 42"):
        Program(pte).load_method()


def test_registered_backend_whose_package_is_not_shipped(monkeypatch):
    from etbuild.runtime import backend_registry as registry

    away = registry.Backend(id="TrimmedBackend", runtime="etbuild.backends.trimmed_away.runtime", aot="", options="")
    monkeypatch.setitem(registry.BACKENDS, "trimmed", away)
    gb, _, _ = fc_graph()
    pte = gb.pte([float_tensor(2, 4), float_tensor(2, 3)], backend_id="TrimmedBackend")
    with pytest.raises(InvalidProgram, match="backend 'TrimmedBackend' is not shipped with this"):
        Program(pte).load_method()


@pytest.mark.parametrize(("mutator", "count"), [(BlobByteMutator(), 150), (BlobStructureMutator(), 80)])
def test_seeded_blob_mutants_raise_only_etbuild_errors(mutator, count):
    """A small sample of the fuzz tier's blob campaigns (tests/fuzz) on a hand-built delegated program."""
    gb, _, _ = fc_graph()
    tally = campaign([gb.pte([float_tensor(2, 4), float_tensor(2, 3)])], mutator, count, seed=1234)
    assert tally.breaches == []
    assert tally.outcomes["InvalidProgram"] > count // 4  # the mutants do reach the blob checks


def test_a_delegates_working_memory_counts_against_the_memory_limit():
    gb = GraphBuilder()  # x → Negate → mid → Negate → out: mid lives in the delegate's arena
    x, mid = gb.tensor((2, 3), flags=g.FLAG_EXTERNAL_INPUT), gb.tensor((2, 3))
    out = gb.tensor((2, 3), flags=g.FLAG_EXTERNAL_OUTPUT)
    gb.node("Negate", input_id=x, output_id=mid)
    gb.node("Negate", input_id=mid, output_id=out)
    program = Program.from_bytes(gb.pte([float_tensor(2, 3), float_tensor(2, 3)]))
    planned = sum(program.plan("forward").non_const_buffer_sizes)
    held = program.load_method().delegates[0].planned_bytes
    assert held >= 24
    with pytest.raises(InvalidProgram) as err:
        program.load_method(max_planned_bytes=planned + held - 1)
    assert str(err.value) == (
        f"<bytes>: method 'forward': its delegates hold {held} bytes of working memory, more than the {held - 1}"
        " bytes that max_planned_bytes leaves beside the planned memory"
    )
    program.load_method(max_planned_bytes=planned + held)
