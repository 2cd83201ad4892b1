"""etbuild.quantize.checks: the program against its converted model, the gate, the worst layer."""

from __future__ import annotations

import operator

import numpy as np
import torch
from torch import fx

from etbuild.quantize.checks import FLIP_MARGIN_DB, NOISE_MARGIN_DB, Float64, Outputs, gate, tight, worst_layer
from etbuild.recipe import AccuracyConfig

F = np.float32


def test_tight_passes_within_one_step_and_reports_the_worst_difference() -> None:
    converted = [[np.array([0.0, 1.0, 2.0], F)], [np.array([3.0, 4.0, 5.0], F)]]
    actual = [[np.array([0.0, 1.1, 2.0], F)], [np.array([3.0, 4.0, 4.75], F)]]
    [report] = tight(Outputs(converted, converted, actual, converted), steps=[0.25], rtol=0.0, atol=0.0)
    assert report["index"] == 0 and report["within_step"] and report["passed"] and report["passed_by"] == "step"
    assert report["max_abs_error"] == 0.25 and report["step"] == 0.25
    assert report["snr_vs_converted_db"] is not None and report["converted64_snr_vs_converted_db"] is None


def test_tight_fails_beyond_the_step_unless_the_snr_is_close_to_float64s() -> None:
    converted = [[np.array([1.0, 2.0, 3.0], F)]]
    off = [[np.array([1.0, 2.0, 4.0], F)]]
    [far] = tight(Outputs(converted, converted, off, converted), steps=[0.25], rtol=0.0, atol=0.0)
    assert not far["within_step"] and not far["passed"]  # converted64 equals converted: infinite SNR
    noisy64 = [[np.array([1.0, 2.0, 3.9], F)]]
    [close] = tight(Outputs(converted, noisy64, off, converted), steps=[0.25], rtol=0.0, atol=0.0)
    assert not close["within_step"] and close["passed"]
    assert close["snr_vs_converted_db"] >= close["converted64_snr_vs_converted_db"] - FLIP_MARGIN_DB
    assert close["passed_by"] == "float64"


def test_tight_passes_a_difference_no_larger_than_quantizing_made() -> None:
    """A deep int8 program differs from its converted model by as much as quantizing does (ExecuTorch's own too)."""
    rng = np.random.default_rng(0)
    reference = [[rng.standard_normal(256).astype(F)] for _ in range(4)]
    converted = [[r[0] + 0.03 * rng.standard_normal(256).astype(F)] for r in reference]  # ~30 dB of quantization
    program = [[c[0] + 0.05 * rng.standard_normal(256).astype(F)] for c in converted]  # ~26 dB from converted
    [report] = tight(Outputs(converted, converted, program, reference), steps=[0.0], rtol=0.0, atol=0.0)
    assert report["passed_by"] == "quantization_noise" and report["passed"]
    assert report["snr_vs_converted_db"] < report["converted_snr_vs_float_db"]
    assert report["snr_vs_converted_db"] >= report["converted_snr_vs_float_db"] - NOISE_MARGIN_DB
    wrong = [[c[0] * 1.5] for c in converted]  # a wrong scale: 6 dB from converted, far below the noise
    [bad] = tight(Outputs(converted, converted, wrong, reference), steps=[0.0], rtol=0.0, atol=0.0)
    assert bad["passed_by"] is None and not bad["passed"]


def test_tight_counts_a_shape_mismatch_as_outside() -> None:
    converted = [[np.zeros(3, F)]]
    [report] = tight(Outputs(converted, converted, [[np.zeros(2, F)]], converted), steps=[1.0], rtol=0.0, atol=0.0)
    assert not report["within_step"] and report["snr_vs_converted_db"] is None


def test_gate_measures_snr_and_top1_against_the_float_model() -> None:
    reference = [[np.array([[1.0, 0.0], [0.0, 1.0]], F)]]
    actual = [[np.array([[1.0, 0.1], [0.1, 1.0]], F)]]
    result = gate(AccuracyConfig(min_snr_db=30), reference, actual)
    assert result == {"snr_db": 20.0, "top1_agreement": 1.0, "passed": False}
    assert gate(AccuracyConfig(min_snr_db=19.9), reference, actual)["passed"]
    assert gate(AccuracyConfig(top1_agreement=1.0), reference, actual)["passed"]
    assert gate(None, reference, actual)["passed"]


def test_worst_layer_names_the_lowest_own_snr() -> None:
    layers = [
        {"node": "linear", "op": "aten.linear.default", "module": "fc1", "own_snr_db": 40.0},
        {"node": "linear_1", "op": "aten.linear.default", "module": "fc2", "own_snr_db": 12.5},
        {"node": "conv", "op": "aten.conv2d.default", "module": "c", "own_snr_db": None},
    ]
    assert worst_layer(layers) == ("; the layer that loses the most is linear_1 (aten.linear.default in module fc2, "
                                   "12.5 dB SNR of its own)")
    assert worst_layer(layers[2:]) == "" and worst_layer([]) == ""


def test_float64_runs_wrapped_regions_in_float64_and_assertions_on_float32() -> None:
    # what torch.export makes of a Llama rotary table: a no_grad region (wrap_with_set_grad_enabled)
    # and _assert_tensor_metadata(dtype=float32) checks, which stopped verify with "dtype mismatch"
    aten = torch.ops.aten
    body = fx.Graph()
    bx = body.placeholder("x")
    square = body.call_function(aten.mul.Tensor, (bx, bx))
    body.call_function(aten._assert_tensor_metadata.default, (square, None, None, torch.float32))
    body.output((square,))
    root = torch.nn.Module()
    root.body = fx.GraphModule(torch.nn.Module(), body)
    graph = fx.Graph()
    x = graph.placeholder("x")
    wrapped = graph.call_function(torch.ops.higher_order.wrap_with_set_grad_enabled, (False, graph.get_attr("body"), x))
    graph.call_function(aten._assert_tensor_metadata.default, (x, None, None, torch.float32))
    graph.output(graph.call_function(aten.add.Tensor, (graph.call_function(operator.getitem, (wrapped, 0)), x)))
    t = torch.randn(5) / 3
    precise = Float64(fx.GraphModule(root, graph)).run(t)
    assert precise.dtype == torch.float64
    assert torch.equal(precise, t.double() * t.double() + t.double())
