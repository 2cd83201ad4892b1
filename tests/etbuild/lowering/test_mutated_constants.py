"""Constants written in place become buffers: the traits of transformers' static-cache export (issue 25)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
import yaml
from torch.export.graph_signature import InputKind, OutputKind

from etbuild.build.driver import build
from etbuild.lowering.mutated_constants import constants_to_state, snapshot_tensors


class _Layer:
    """A plain object (not a module) holding a tensor, as transformers' StaticCache layers do."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys


class AliasedCache(torch.nn.Module):
    """A cache registered as a buffer and written through a plain object's alias of it; parameters need grad."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, 64)
        self.head = torch.nn.Linear(64, 256)
        self.register_buffer("cache", torch.zeros(1, 8, 64), persistent=False)
        self.layer = _Layer(self.cache)
        self.scratch = _Layer(torch.zeros(1, 64))  # written, aliasing no buffer

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.layer.keys.index_copy_(1, pos, self.embed(tokens))
        self.scratch.keys.add_(1.0)
        return self.head(self.cache.sum(1) + self.scratch.keys)


def aliased_cache() -> torch.nn.Module:
    return AliasedCache()


INPUTS = (torch.tensor([[3]]), torch.tensor([0]))


def _export(model: torch.nn.Module) -> torch.export.ExportedProgram:
    initial = snapshot_tensors(model)
    return constants_to_state(torch.export.export(model, INPUTS, strict=False), initial)


def test_written_constants_become_buffer_mutations():
    ep = _export(AliasedCache())
    assert not [spec for spec in ep.graph_signature.input_specs if spec.kind == InputKind.CONSTANT_TENSOR]
    decomposed = ep.run_decompositions()  # failed before: "expected compiled_fn to be GraphModule"
    outputs = decomposed.graph_signature.output_specs
    mutated = {spec.target for spec in outputs if spec.kind == OutputKind.BUFFER_MUTATION}
    assert "cache" in mutated and len(mutated) == 2  # the aliased buffer by its name; the other lifted


def test_state_carries_over_calls_as_in_eager():
    torch.manual_seed(0)
    eager = AliasedCache()
    program = _export(AliasedCache()).module()
    program.load_state_dict(eager.state_dict(), strict=False)  # parameters; state starts at zero
    with torch.no_grad():
        for token, pos in [(3, 0), (7, 1), (9, 2)]:
            args = (torch.tensor([[token]]), torch.tensor([pos]))
            torch.testing.assert_close(program(*args), eager(*args))


def _recipe(root: Path, name: str, **sections: object) -> Path:
    model = {"factory": f"{Path(__file__).resolve()}:aliased_cache",
             "inputs": [{"shape": [1, 1], "dtype": "int64", "low": 0, "high": 256},
                        {"shape": [1], "dtype": "int64", "low": 0, "high": 1}]}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "model": model, "backends": [{"name": "xnnpack"}], **sections}))
    return path


def test_float_xnnpack_and_8da4w_build_and_verify(tmp_path):
    recipes = [_recipe(tmp_path, "aliased-f32"),
               _recipe(tmp_path, "aliased-8da4w", quantize={"scheme": "int8-dynamic-int4-weight", "group_size": 32,
                                                            "embeddings": "int4"})]
    result = build(recipes, tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    for name in ("aliased-f32", "aliased-8da4w"):
        assert json.loads((tmp_path / "build" / name / "verify.json").read_text())["passed"]
