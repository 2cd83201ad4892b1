"""`quantize.calibration.observer: auto`: the stage calibrates with each candidate observer and
keeps the one whose program (lowered and run in our runtime) is closest to float on the verify
samples, and says so in layers.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from etbuild.pipeline import compile_exported, program_bytes
from etbuild.quantize import auto, flow
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.program_judge import ProgramJudge
from etbuild.quantize.schemes import AUTO_CANDIDATES
from etbuild.recipe import BackendConfig, ModuleOverride, load_recipe
from etbuild.runtime import Program
from etbuild.stages.export import run_export
from etbuild.stages.quantize import run_quantize

MLP = """name: q
model:
  factory: etbuild.zoo:mlp
  kwargs: {sizes: [16, 32, 8]}
  inputs: [{shape: [2, 16], dtype: float32}]
quantize:
"""
QD = torch.ops.quantized_decomposed


def _quantize(tmp_path: Path, quantize: str) -> tuple[dict, torch.fx.GraphModule]:
    """Export and quantize the MLP: the method's layers.json record and its quantized graph."""
    path = tmp_path / "q.yaml"
    path.write_text(MLP + quantize)
    recipe = load_recipe(path)
    exports = {"forward": tmp_path / "export" / "forward.pt2"}
    run_export(recipe, exports)
    out, layers = tmp_path / "quantized" / "forward.pt2", tmp_path / "quantized" / "layers.json"
    run_quantize(recipe, exports, {"forward": out}, layers, program_bytes)
    return json.loads(layers.read_text())["methods"]["forward"], torch.export.load(str(out)).graph_module


def _input_scale(gm: torch.fx.GraphModule) -> float:
    """The scale of the first static quantize (the model's input)."""
    return float(next(n for n in gm.graph.nodes if n.target is QD.quantize_per_tensor.default).args[1])


def test_auto_keeps_the_candidate_whose_program_is_best_and_reports_both(tmp_path: Path) -> None:
    record, _ = _quantize(tmp_path, "  scheme: int8-static\n  calibration: {observer: auto}\n")
    chosen = record["observer"]
    candidates = {*AUTO_CANDIDATES, *(c + auto.UNCORRECTED for c in AUTO_CANDIDATES)}  # bias correction on and off
    assert set(chosen["snr_db"]) == set(chosen["program_snr_db"]) == candidates
    assert chosen["judged_by"] == "program"
    name = chosen["chosen"] + ("" if chosen["bias_corrected"] else auto.UNCORRECTED)
    assert chosen["program_snr_db"][name] == max(chosen["program_snr_db"].values())
    assert ("bias_correction" in record) == chosen["bias_corrected"]


def _linear_ep() -> tuple[torch.export.ExportedProgram, list[tuple[torch.Tensor]]]:
    """Six int8 layers: deep enough that some of XNNPACK's integer requantizations round apart."""
    torch.manual_seed(0)
    layers = [m for i in range(6) for m in (torch.nn.Linear(64 if i else 16, 64), torch.nn.ReLU())]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 8)).eval()
    samples = [(torch.randn(16, 16),) for _ in range(4)]
    return torch.export.export(model, samples[0]), samples


def test_the_judge_runs_the_candidates_program_not_its_converted_model() -> None:
    """The judge's outputs are those of the `.pte` the converted model lowers to with the recipe's
    backends, in our runtime: equal to compiling that model by hand, and not the converted model's own
    (XNNPACK requantizes in integers: the program rounds apart)."""
    ep, samples = _linear_ep()
    model = flow.quantize(ep, flow.Plan(SchemeMap("int8-static", observer="minmax")), samples)
    backends = (BackendConfig("xnnpack"),)
    judged = ProgramJudge("forward", samples[0], None, backends, samples, program_bytes)(model)
    exported = {"forward": flow.reexport(model, samples[0], None)}
    program = Program.from_bytes(compile_exported(exported, backends=backends).pte)
    method = program.load_method("forward")
    for sample, outs in zip(samples, judged):
        np.testing.assert_array_equal(outs[0].numpy(), method(sample[0].numpy())[0])
    converted = [model(*s) for s in samples]
    assert any(not torch.equal(c, j[0]) for c, j in zip(converted, judged))


def test_auto_chooses_by_the_judge_when_it_disagrees_with_the_converted_models() -> None:
    """A judge whose outputs favour histogram's candidate makes it the choice, whichever converted
    model is closer to float; the record keeps both measurements."""
    ep, samples = _linear_ep()
    reference = flow.float_reference(ep)
    expected = [[reference(*s)] for s in samples]
    favoured = {"histogram": 0.01, "minmax": 1.0}
    calls = iter(AUTO_CANDIDATES)

    def judge(model: torch.fx.GraphModule) -> list[list[torch.Tensor]]:
        noise = favoured[next(calls)]
        return [[e[0] + noise] for e in expected]

    plan = flow.Plan(SchemeMap("int8-static", observer="auto"))
    chosen = auto.quantize(ep, plan, samples, samples, reference, judge)
    assert chosen.record["chosen"] == "histogram" and chosen.record["judged_by"] == "program"
    assert chosen.record["program_snr_db"]["histogram"] > chosen.record["program_snr_db"]["minmax"]
    assert set(chosen.record["snr_db"]) == set(AUTO_CANDIDATES)


def test_the_candidate_that_clips_a_calibration_outlier_wins(tmp_path: Path, monkeypatch) -> None:
    """Min/max spends the int8 range on one calibration outlier; percentile clips it (one value in
    64,000) and is chosen, and the saved program carries its ranges. torchao's histogram, like mse,
    keeps a lone outlier (its clipping costs more squared error than the rounding it saves), so
    percentile stands in for a candidate that clips."""
    monkeypatch.setattr(auto, "AUTO_CANDIDATES", ("minmax", "percentile"))
    data = np.random.default_rng(0).standard_normal((2000, 2, 16)).astype(np.float32)
    data[3, 0, 5] = 500.0
    np.savez(tmp_path / "calib.npz", in0=data)
    record, gm = _quantize(tmp_path, "  scheme: int8-static\n  calibration: {data: calib.npz, observer: auto}\n")
    snr = record["observer"]["snr_db"]
    assert record["observer"]["chosen"] == "percentile" and snr["percentile"] > snr["minmax"] + 10, snr
    assert _input_scale(gm) < 50 / 255  # not min/max's range, which holds the outlier


def test_auto_in_a_module_override_is_resolved_too() -> None:
    schemes = SchemeMap("int8-static", (ModuleOverride("net.0", observer="auto"),
                                        ModuleOverride("net.2", observer="mse")), "auto")
    resolved = schemes.resolving_auto("histogram")
    assert schemes.uses_auto and not resolved.uses_auto
    assert resolved.observer == "histogram"
    assert [o.observer for o in resolved.overrides] == ["histogram", "mse"]


def test_without_static_activations_auto_calibrates_nothing() -> None:
    torch.manual_seed(0)
    ep = torch.export.export(torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),))
    plan = flow.Plan(SchemeMap("int8-dynamic", observer="auto"))
    chosen = auto.quantize(ep, plan, [(torch.randn(1, 4),)], [(torch.randn(1, 4),)], flow.float_reference(ep))
    assert chosen.record is None and not chosen.plan.schemes.uses_auto
    assert not any(n.target is QD.quantize_per_tensor.default for n in chosen.model.graph.nodes)


def test_a_plan_without_auto_is_left_as_it_is() -> None:
    torch.manual_seed(0)
    ep = torch.export.export(torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),))
    plan = flow.Plan(SchemeMap("int8-static", observer="minmax"))
    chosen = auto.quantize(ep, plan, [(torch.randn(1, 4),)], [(torch.randn(1, 4),)], flow.float_reference(ep))
    assert chosen.plan is plan and chosen.record is None
