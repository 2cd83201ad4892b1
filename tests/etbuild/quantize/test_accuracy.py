"""etbuild.quantize.accuracy on graphs whose layers read quantized constants."""

from __future__ import annotations

import json
from pathlib import Path

from etbuild.recipe import load_recipe
from etbuild.stages.export import run_export
from etbuild.stages.quantize import run_quantize

MODEL = '''
import torch


class AddsATable(torch.nn.Module):
    """A linear layer whose output gets a constant table added, as BERT adds its position embeddings."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.register_buffer("table", torch.randn(4, 16))

    def forward(self, x):
        return torch.relu(self.fc(x) + self.table)
'''


def test_a_layer_adding_a_quantized_constant_is_measured_on_its_activation(tmp_path: Path) -> None:
    # convert folds quantize(table) into an int8 constant: the add's second input has no float
    # counterpart, which stopped the stage with a KeyError on BERT-style encoders
    (tmp_path / "model.py").write_text(MODEL)
    recipe_file = tmp_path / "q.yaml"
    recipe_file.write_text("name: q\nmodel:\n  factory: model.py:AddsATable\n"
                           "  inputs: [{shape: [4, 16], dtype: float32}]\nquantize: {scheme: int8-static}\n")
    recipe = load_recipe(recipe_file)
    exports = {"forward": tmp_path / "export" / "forward.pt2"}
    run_export(recipe, exports)
    layers = tmp_path / "quantized" / "layers.json"
    run_quantize(recipe, exports, {"forward": tmp_path / "quantized" / "forward.pt2"}, layers)
    measured = {layer["op"]: layer for layer in json.loads(layers.read_text())["methods"]["forward"]["layers"]}
    assert {"linear.default", "add.Tensor"} <= set(measured)
    add = measured["add.Tensor"]
    assert 20 < add["snr_db"] < 80  # its own SNR is inf (JSON null): the table lowers the relative noise
