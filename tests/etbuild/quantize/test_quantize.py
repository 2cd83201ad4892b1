"""The quantize stage's errors and reports on a small MLP: calibration files that do not fit
the inputs, globs that match no module, a failing accuracy gate naming its worst layer, and
`fallback: auto` keeping layers float until the gate holds."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from etbuild.errors import RecipeError, VerificationError
from etbuild.quantize.calibration import calibration_inputs
from etbuild.recipe import load_recipe
from etbuild.stages.export import run_export
from etbuild.stages.quantize import run_quantize

MLP = """name: q
model:
  factory: etbuild.zoo:mlp
  kwargs: {sizes: [16, 32, 8]}
  inputs: [{shape: [2, 16], dtype: float32}]
"""


def _recipe(tmp_path: Path, quantize: str):
    path = tmp_path / "q.yaml"
    path.write_text(MLP + "quantize:\n" + quantize)
    return load_recipe(path)


def _quantize(tmp_path: Path, quantize: str) -> Path:
    """Export and quantize the MLP; the path of layers.json."""
    recipe = _recipe(tmp_path, quantize)
    exports = {"forward": tmp_path / "export" / "forward.pt2"}
    run_export(recipe, exports)
    layers = tmp_path / "quantized" / "layers.json"
    run_quantize(recipe, exports, {"forward": tmp_path / "quantized" / "forward.pt2"}, layers)
    return layers


def test_calibration_array_of_the_wrong_shape_names_array_shape_and_expected(tmp_path: Path) -> None:
    np.savez(tmp_path / "calib.npz", in0=np.zeros((4, 2, 15), np.float32))
    recipe = _recipe(tmp_path, "  scheme: int8-static\n  calibration: {data: calib.npz}\n")
    with pytest.raises(RecipeError) as info:
        calibration_inputs(recipe, "forward")
    assert str(info.value).endswith(
        f"quantize.calibration.data: {tmp_path / 'calib.npz'}: array 'in0' has shape [4, 2, 15]; "
        "expected [N, 2, 16] (N >= 1 samples of the input)"
    )


def test_calibration_file_without_the_array_lists_what_it_has(tmp_path: Path) -> None:
    np.savez(tmp_path / "calib.npz", x=np.zeros((4, 2, 16), np.float32))
    recipe = _recipe(tmp_path, "  scheme: int8-static\n  calibration: {data: calib.npz}\n")
    with pytest.raises(RecipeError, match=r"expected an array 'in0'; the file has x$"):
        calibration_inputs(recipe, "forward")


def test_calibration_array_of_the_wrong_dtype(tmp_path: Path) -> None:
    np.savez(tmp_path / "calib.npz", in0=np.zeros((4, 2, 16), np.float64))
    recipe = _recipe(tmp_path, "  scheme: int8-static\n  calibration: {data: calib.npz}\n")
    with pytest.raises(RecipeError, match=r"array 'in0' has dtype float64; expected float32$"):
        calibration_inputs(recipe, "forward")


def test_calibration_file_is_read(tmp_path: Path) -> None:
    np.savez(tmp_path / "calib.npz", in0=np.ones((3, 2, 16), np.float32))
    recipe = _recipe(tmp_path, "  scheme: int8-static\n  calibration: {data: calib.npz}\n")
    samples = calibration_inputs(recipe, "forward")
    assert len(samples) == 3 and samples[0][0].shape == (2, 16) and float(samples[2][0].sum()) == 32.0


def test_a_glob_that_matches_no_module_says_so(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as info:
        _quantize(tmp_path, "  scheme: int8-dynamic\n  modules: {'head*': float}\n")
    assert "quantize.modules.head*: matches no module of the model (its modules: 0, 1, 2)" in str(info.value)


def test_a_failing_gate_names_the_worst_layer(tmp_path: Path) -> None:
    with pytest.raises(VerificationError) as info:
        _quantize(tmp_path, "  scheme: int8-static\n  accuracy: {min_snr_db: 90}\n")
    message = str(info.value)
    assert "quantize.accuracy: min_snr_db 90 fails on the" in message
    assert "the layer that loses the most is linear" in message
    assert "accuracy.fallback: auto searches observers per layer, then keeps layers at higher precision" in message
    assert (tmp_path / "quantized" / "layers.json").exists()


def test_fallback_auto_keeps_layers_float_until_the_gate_holds(tmp_path: Path) -> None:
    # weight-only int8: 48.5 dB with both layers quantized, 51.3 with linear_1 float (the layer
    # whose quantization alone costs the output the most), so a 50.8 dB gate keeps that one
    layers = _quantize(tmp_path, "  scheme: int8-weight-only\n  accuracy: {min_snr_db: 50.8, fallback: auto}\n")
    report = json.loads(layers.read_text())["methods"]["forward"]
    assert report["gate"]["passed"] and report["gate"]["value"] >= 50.8
    assert report["kept_float"] == [{"module": "2", "node": "linear_1", "op": "linear.default"}]
    assert report["modules"] == {"0": "int8-weight-only", "2": "float"}


def test_the_report_has_schemes_per_layer_snr_and_weight_bytes(tmp_path: Path) -> None:
    report = json.loads(_quantize(tmp_path, "  scheme: int8-weight-only\n").read_text())
    forward = report["methods"]["forward"]
    assert report["scheme"] == "int8-weight-only"
    assert forward["modules"] == {"0": "int8-weight-only", "2": "int8-weight-only"}
    assert all(isinstance(layer["snr_db"], float) for layer in forward["layers"])
    assert forward["weight_bytes"]["quantized"] < forward["weight_bytes"]["float"] / 2


def test_a_quantized_build_preloads_dequantized_weights_and_reports_them(tmp_path: Path) -> None:
    from etbuild.build.driver import build
    from etbuild.runtime import Program
    from etbuild.runtime.inspect import describe, format_description
    from etbuild.runtime.preload import preloadable

    path = tmp_path / "q.yaml"
    path.write_text(MLP + "quantize: {scheme: int8-weight-only}\n")
    result = build([path], tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    root = tmp_path / "build" / "q"
    pte = root / "q.pte"
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    preloaded, per_call = (Program.load(pte).load_method(preload=p) for p in (True, False))
    np.testing.assert_array_equal(preloaded(x)[0], per_call(x)[0])
    plan = Program.load(pte).plan("forward")
    assert len(preloadable(plan, plan.chains[0].instructions)) == 2  # one dequantize per weight
    memory = json.loads((root / "memory.json").read_text())
    assert memory["methods"]["forward"]["runtime_allocations"]["preloaded_bytes"] == 4 * (16 * 32 + 32 * 8)
    report = json.loads((root / "quantize.json").read_text())
    assert report["pte_bytes"]["quantized"] == pte.stat().st_size and report["verify"]["accuracy"]["forward"]["passed"]
    text = format_description(describe(pte))
    assert "quantization: int8-weight-only" in text and "quantize: scheme int8-weight-only" in text
    _malformed_preloads_raise_typed_errors(pte.read_bytes())


def _malformed_preloads_raise_typed_errors(data: bytes) -> None:
    """Preloading runs after the load checks, and a kernel failing on its constants raises
    KernelError (the fuzz tier's mutants: raw ValueErrors and IndexErrors before)."""
    from etbuild.errors import InvalidProgram, KernelError
    from etbuild.runtime import Program
    from etbuild.runtime.preload import preloadable
    from tests.fuzz.mutators import edited

    def first_preloaded(program):  # noqa: ANN001, ANN202
        plan = program.execution_plan[0]
        return plan, plan.chains[0].instructions[preloadable(plan, plan.chains[0].instructions)[0]].instr_args

    def fewer_scales(program) -> None:  # noqa: ANN001
        plan, call = first_preloaded(program)
        scales = plan.values[call.args[1]].val
        scales.sizes = [scales.sizes[0] - 1]

    def scales_out_of_range(program) -> None:  # noqa: ANN001
        plan, call = first_preloaded(program)
        call.args = [call.args[0], 10**6, *call.args[2:]]

    with pytest.raises(KernelError, match="run once at load"):
        Program.from_bytes(edited(data, fewer_scales)).load_method()
    with pytest.raises(InvalidProgram, match="out of range"):
        Program.from_bytes(edited(data, scales_out_of_range)).load_method()
