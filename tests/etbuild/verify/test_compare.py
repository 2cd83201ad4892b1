"""Verify's bound (relative to the output's magnitude) and its check of outputs that do not vary."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.build.driver import build
from etbuild.recipe import BackendConfig
from etbuild.verify.compare import compare, compare_output, describe
from etbuild.verify.intermediate import compare_intermediate, cut_at, last_varying


def _f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_bound_is_relative_to_the_largest_magnitude():
    expected = [_f32(330.0, 0.001), _f32(-120.0, 0.002)]
    actual = [_f32(330.0 + 3.7e-4, 0.0012), _f32(-120.0, 0.002)]  # 20% off on the small element
    report = compare_output(expected, actual, rtol=1e-4, atol=1e-5)
    assert report["max_abs_error"] == pytest.approx(3.7e-4, rel=0.05)
    assert report["max_abs_expected"] == 330.0
    assert report["bound"] == pytest.approx(1e-4 * 330.0 + 1e-5)
    assert report["passed"] and report["varies"]


def test_error_beyond_the_bound_fails_and_says_both():
    report = compare_output([_f32(1.0, 2.0)], [_f32(1.0, 2.1)], rtol=1e-2, atol=1e-3)
    assert not report["passed"]
    assert describe(report) == "max abs error 0.1 > bound 0.021 (rtol × max|eager| 2 + atol)"


def test_explicit_tolerances_are_the_ones_used():
    loose = compare_output([_f32(1.0, 2.0)], [_f32(1.0, 2.1)], rtol=0.0, atol=0.2)
    assert loose["passed"] and loose["bound"] == pytest.approx(0.2)


def test_integer_outputs_must_match_exactly():
    report = compare_output([np.array([1000, 5])], [np.array([1001, 5])], rtol=1e-2, atol=1e-1)
    assert (report["bound"], report["passed"]) == (0.0, False)


def test_nan_only_on_one_side_fails_nan_on_both_passes():
    assert compare_output([_f32(np.nan, 1.0)], [_f32(np.nan, 1.0)], 1e-4, 1e-5)["passed"]
    assert not compare_output([_f32(0.0, 1.0)], [_f32(np.nan, 1.0)], 1e-4, 1e-5)["passed"]


def test_shape_or_dtype_mismatch_fails_naming_both():
    report = compare([[_f32(1.0, 2.0)]], [[np.zeros(3, np.float32)]], 1e-4, 1e-5)[0]
    assert not report["passed"]
    assert describe(report) == "expected float32[2], the program gives float32[3]"


def test_variation_across_samples():
    assert compare_output([_f32(0, 0), _f32(0, 0)], [_f32(0, 0), _f32(0, 0)], 1e-4, 1e-5)["varies"] is False
    assert compare_output([_f32(0, 1), _f32(0, 0)], [_f32(0, 1), _f32(0, 0)], 1e-4, 1e-5)["varies"] is True
    assert compare_output([_f32(0, 1)], [_f32(0, 1)], 1e-4, 1e-5)["varies"] is None


class ZeroHead(torch.nn.Module):
    """Features that depend on the input, then a zero-initialised classifier: every output is 0."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh())
        self.head = torch.nn.Linear(16, 4)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _exported_zero_head() -> tuple[torch.export.ExportedProgram, list[tuple[torch.Tensor]]]:
    torch.manual_seed(0)
    samples = [(torch.randn(2, 8),) for _ in range(3)]
    return torch.export.export(ZeroHead().eval(), samples[0]), samples


def test_last_varying_value_is_the_one_before_the_constant_head():
    exported, samples = _exported_zero_head()
    gm = exported.module()
    node, values = last_varying(gm, samples)
    assert node.target == torch.ops.aten.tanh.default
    torch.testing.assert_close(cut_at(gm, node)(*samples[1]), torch.from_numpy(values[1]))


@pytest.mark.parametrize("backends", [(), (BackendConfig("xnnpack", {}),)])
def test_intermediate_is_compared_in_our_runtime(backends):
    exported, samples = _exported_zero_head()
    report = compare_intermediate(exported, samples, 1e-4, 1e-5, backends)
    assert report["passed"] and report["varies"] and report["max_abs_error"] <= report["bound"]
    assert report["node"] == "tanh" and report["module"] == "features.1 (Tanh)"
    assert report["backends"] == [b.name for b in backends]


ZERO_HEAD_RECIPE = """\
name: zero-head
model:
  factory: {factory}
  inputs: [{{shape: [2, 8], dtype: float32}}]
verify: {{samples: 3}}
"""


def test_verify_flags_constant_outputs_and_checks_an_intermediate(tmp_path: Path):
    recipe = tmp_path / "zero-head.yaml"
    recipe.write_text(ZERO_HEAD_RECIPE.format(factory=f"{Path(__file__)}:ZeroHead"))
    result = build([recipe], tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    report = json.loads((tmp_path / "build" / "zero-head" / "verify.json").read_text())
    assert report["constant_outputs"] == ["forward output 0"]
    assert report["methods"]["forward"][0]["varies"] is False
    assert report["intermediates"]["forward"]["node"] == "tanh"
    assert report["intermediates"]["forward"]["passed"] is True
