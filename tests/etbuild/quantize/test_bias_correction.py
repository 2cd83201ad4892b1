"""Empirical bias correction: each int8-static convolution's and linear layer's mean output per
channel on the calibration samples equals the float graph's, and held-out outputs come closer to float."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from etbuild.quantize import bias_correction, flow
from etbuild.quantize.accuracy import _Recorder
from etbuild.quantize.metrics import snr_db
from etbuild.quantize.modules import SchemeMap
from etbuild.recipe import load_recipe
from etbuild.stages.export import run_export
from etbuild.stages.quantize import run_quantize
from tests.etbuild.quantize.test_auto import MLP
from tests.etbuild.quantize.test_calibration import RunningTotal


class Depthwise(torch.nn.Module):
    """Few products per channel (3×3 depthwise) after ReLUs: rounding shifts the channel means."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.dw1 = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = torch.nn.Conv2d(16, 24, 1)
        self.dw2 = torch.nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.head = torch.nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = torch.relu(self.dw1(x))
        x = torch.relu(self.pw(x))
        x = torch.relu(self.dw2(x))
        return self.head(x.mean((2, 3)))


Samples = list[tuple[torch.Tensor]]


def _exported() -> tuple[torch.export.ExportedProgram, Samples, Samples]:
    torch.manual_seed(0)
    model = Depthwise().eval()
    calibration = [(torch.rand(1, 3, 12, 12),) for _ in range(16)]
    held_out = [(torch.rand(1, 3, 12, 12),) for _ in range(16)]
    return torch.export.export(model, calibration[0]), calibration, held_out


def _plan(correct: bool, scheme: str = "int8-static") -> flow.Plan:
    return flow.Plan(SchemeMap(scheme, observer="minmax"), bias_correction=correct)


class Built:
    """The exported model, its samples, and its converted graphs without and with correction."""

    def __init__(self) -> None:
        self.ep, self.calibration, self.held_out = _exported()
        self.plain = flow.quantize(self.ep, _plan(False), self.calibration)
        self.corrected = flow.quantize(self.ep, _plan(True), self.calibration)


@pytest.fixture(scope="module")
def built() -> Built:
    return Built()


def _layer_means(gm: torch.fx.GraphModule, names: set[str], samples: Samples) -> dict[str, torch.Tensor]:
    sums: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for sample in samples:
            run = _Recorder(gm, names)
            run.run(*sample)
            for name in names:
                value = run.values[name]
                axis = 1 if value.dim() == 4 else -1
                sums[name] = sums.get(name, 0) + value.movedim(axis, -1).reshape(-1, value.shape[axis]).mean(0)
    return {name: total / len(samples) for name, total in sums.items()}


def test_each_corrected_layer_has_the_float_graphs_channel_means(built: Built) -> None:
    ep, calibration, model = built.ep, built.calibration, built.corrected
    records = flow.corrections(model).records
    corrected = {r["node"] for r in records}
    assert len(corrected) == 5  # four convolutions and the head (16 samples: 16 values a channel)
    assert {r["module"] for r in records} >= {"stem", "dw1", "pw", "dw2", "head"}
    ours = _layer_means(model, corrected, calibration)
    float_means = _layer_means(flow.float_reference(ep), corrected, calibration)
    uncorrected = _layer_means(built.plain, corrected, calibration)
    for name in corrected:
        spread = float(float_means[name].abs().max())
        assert torch.allclose(ours[name], float_means[name], atol=1e-5 * spread + 1e-6), name
        assert not torch.allclose(uncorrected[name], float_means[name], atol=1e-5 * spread + 1e-6), name


def test_held_out_outputs_come_closer_to_float(built: Built) -> None:
    reference = flow.float_reference(built.ep)
    with torch.no_grad():
        expected = [reference(*s) for s in built.held_out]
        plain = [built.plain(*s) for s in built.held_out]
        corrected = [built.corrected(*s) for s in built.held_out]
    assert snr_db(expected, corrected) > snr_db(expected, plain) + 0.5  # 48.6 → 49.4 dB


def test_biases_are_the_only_constants_that_change(built: Built) -> None:
    plain, corrected = built.plain, built.corrected
    biases = {r["node"] for r in flow.corrections(corrected).records}
    bias_targets = {n.args[2].target for n in corrected.graph.nodes if n.name in biases}
    before, after = dict(plain.named_parameters()), dict(corrected.named_parameters())
    before |= dict(plain.named_buffers())
    after |= dict(corrected.named_buffers())
    assert before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]) != (name in bias_targets), name


def test_a_channel_with_too_few_values_is_left_alone(built: Built) -> None:
    few = built.calibration[: bias_correction.MIN_VALUES - 1]
    records = flow.corrections(flow.quantize(built.ep, _plan(True), few)).records
    assert "head" not in {r["module"] for r in records}  # one value a sample: 15 < MIN_VALUES
    assert {"stem", "dw1"} <= {r["module"] for r in records}  # 144 positions a sample


def test_dynamic_layers_are_not_corrected_and_off_means_none(built: Built) -> None:
    assert flow.corrections(flow.quantize(built.ep, _plan(True, "int8-dynamic"), built.calibration)).records == []
    assert flow.corrections(built.plain) is None


def _layers(tmp_path: Path, extra: str) -> dict:
    path = tmp_path / "q.yaml"
    path.write_text(MLP + f"  scheme: int8-static\n  calibration: {{observer: minmax{extra}}}\n")
    recipe = load_recipe(path)
    exports = {"forward": tmp_path / "export" / "forward.pt2"}
    run_export(recipe, exports)
    layers = tmp_path / "quantized" / "layers.json"
    run_quantize(recipe, exports, {"forward": tmp_path / "quantized" / "forward.pt2"}, layers)
    return json.loads(layers.read_text())


def test_layers_json_names_each_corrected_layer(tmp_path: Path) -> None:
    report = _layers(tmp_path, "")
    assert report["bias_correction"] is True
    records = report["methods"]["forward"]["bias_correction"]
    assert records and all(r["module"] and r["channels"] > 0 and r["mean_abs_shift"] >= 0 for r in records)


def test_bias_correction_false_turns_it_off(tmp_path: Path) -> None:
    report = _layers(tmp_path, ", bias_correction: false")
    assert report["bias_correction"] is False
    assert "bias_correction" not in report["methods"]["forward"]


class Twice(torch.nn.Module):
    """One convolution called twice: its bias cannot be right for both calls."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.last = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.relu(self.conv(torch.relu(self.conv(x)))))


def test_a_bias_two_calls_share_is_left_alone() -> None:
    torch.manual_seed(0)
    samples = [(torch.rand(1, 4, 8, 8),) for _ in range(4)]
    ep = torch.export.export(Twice().eval(), samples[0])
    records = flow.corrections(flow.quantize(ep, _plan(True), samples)).records
    assert [r["module"] for r in records] == ["last"]


def test_corrections_undo_and_redo_exactly(built: Built) -> None:
    corrections = flow.corrections(built.corrected)
    corrected = {k: v.clone() for k, v in built.corrected.named_parameters()}
    plain = dict(built.plain.named_parameters())
    try:
        corrections.use(built.corrected, False)
        assert all(torch.equal(v, plain[k]) for k, v in built.corrected.named_parameters())
    finally:
        corrections.use(built.corrected, True)
    assert all(torch.equal(v, corrected[k]) for k, v in built.corrected.named_parameters())


def test_a_method_that_writes_its_state_is_not_corrected() -> None:
    torch.manual_seed(0)
    samples = [(torch.rand(32, 4),) for _ in range(4)]
    ep = torch.export.export(RunningTotal().eval(), samples[0])
    assert flow.corrections(flow.quantize(ep, _plan(True), samples)) is None
    assert flow.corrections(flow.quantize(ep, _plan(False), samples)) is None
    stateless = torch.export.export(RunningTotal().linear.eval(), samples[0])
    assert flow.corrections(flow.quantize(stateless, _plan(True), samples)).records  # the same layer alone is
