"""etbuild.quantize.calibration: samples from the recipe, or arrays from an .npz file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.errors import RecipeError
from etbuild.quantize import flow
from etbuild.quantize.calibration import array_name, calibration_inputs
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.schemes import STATIC
from etbuild.recipe import load_recipe

ONE = """name: q
model:
  factory: etbuild.zoo:mlp
  kwargs: {sizes: [4, 3]}
  inputs: [{shape: [2, 4], dtype: float32}]
quantize: {scheme: int8-static, calibration: CALIBRATION}
"""
TWO = """name: two
model:
  factory: etbuild.zoo:encoder_decoder
  methods:
    encode: {inputs: [{shape: [2, 32], dtype: float32}]}
    decode: {inputs: [{shape: [1, 8], dtype: float32}]}
"""


def recipe(tmp_path: Path, calibration: str):
    path = tmp_path / "q.yaml"
    path.write_text(ONE.replace("CALIBRATION", calibration))
    return load_recipe(path)


def test_samples_are_drawn_at_the_declared_shape(tmp_path: Path) -> None:
    inputs = calibration_inputs(recipe(tmp_path, "{samples: 3, seed: 1}"), "forward")
    assert len(inputs) == 3 and all(len(s) == 1 and tuple(s[0].shape) == (2, 4) for s in inputs)
    again = calibration_inputs(recipe(tmp_path, "{samples: 3, seed: 1}"), "forward")
    assert all((a[0] == b[0]).all() for a, b in zip(inputs, again))  # seeded


def test_an_npz_gives_one_sample_per_leading_index(tmp_path: Path) -> None:
    data = np.arange(5 * 2 * 4, dtype=np.float32).reshape(5, 2, 4)
    np.savez(tmp_path / "calib.npz", in0=data)
    inputs = calibration_inputs(recipe(tmp_path, "{data: calib.npz}"), "forward")
    assert len(inputs) == 5
    np.testing.assert_array_equal(inputs[4][0].numpy(), data[4])


def test_a_missing_or_unreadable_file_is_a_recipe_error(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"calibration file .*calib\.npz does not exist"):
        calibration_inputs(recipe(tmp_path, "{data: calib.npz}"), "forward")
    (tmp_path / "calib.npz").write_bytes(b"not a zip")
    with pytest.raises(RecipeError, match=r"cannot read .*calib\.npz as an \.npz file"):
        calibration_inputs(recipe(tmp_path, "{data: calib.npz}"), "forward")


def test_array_names_carry_the_method_only_with_several_methods(tmp_path: Path) -> None:
    assert array_name(recipe(tmp_path, "{samples: 1}"), "forward", 2) == "in2"
    (tmp_path / "two.yaml").write_text(TWO)
    assert array_name(load_recipe(tmp_path / "two.yaml"), "decode", 0) == "decode.in0"


class RunningTotal(torch.nn.Module):
    """A linear layer and a buffer every call adds to (a KV cache is written the same way)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x.mean(0))
        return self.linear(x) + self.total


def test_calibration_leaves_no_trace_in_the_state_the_program_starts_from() -> None:
    ep = torch.export.export(RunningTotal().eval(), (torch.randn(2, 4),))
    assert flow.mutated_buffers(ep) == {"total"}
    model = flow.quantize(ep, flow.Plan(SchemeMap(STATIC)), [(torch.randn(2, 4),) for _ in range(4)])
    assert model.get_buffer("total").abs().sum() > 0  # calibration wrote it
    flow.restore_state(model, ep)
    assert model.get_buffer("total").tolist() == [0.0] * 4
