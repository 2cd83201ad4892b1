"""Weights apart from the program (etbuild.lowering.external_weights, etbuild.lowering.constant_names)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from etbuild.errors import InvalidData, StageError
from etbuild.lowering.external_weights import chosen, separate
from etbuild.pipeline import compile_exported, compile_module
from etbuild.recipe import WeightsConfig
from etbuild.runtime import Program
from etbuild.runtime.data_files import data_file
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor([2.0, 3.0, 4.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


def _external(pte: bytes) -> dict[str, fb.Tensor]:
    program, _ = read_program(pte)
    return {t.extra_tensor_info.fully_qualified_name: t for plan in program.execution_plan for ev in plan.values
            if isinstance(t := ev.val, fb.Tensor) and t.extra_tensor_info is not None
            and t.extra_tensor_info.location == fb.TensorDataLocation.EXTERNAL}


@pytest.fixture(scope="module")
def scaled() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return Scaled().eval(), (torch.randn(2, 4),)


def test_external_outputs_equal_the_single_file_build(scaled):
    model, inputs = scaled
    inside = compile_module(model, inputs)
    apart = compile_module(model, inputs, weights=WeightsConfig("w"))
    x = inputs[0].numpy()
    want = Program.from_bytes(inside.pte).load_method()(x)[0]
    got = Program.from_bytes(apart.pte, [data_file(apart.ptd)]).load_method()(x)[0]
    assert np.array_equal(got, want)
    assert len(apart.pte) < len(inside.pte) and inside.ptd is None


def test_parameters_keep_their_names_and_folded_constants_get_digests(scaled):
    model, inputs = scaled
    apart = compile_module(model, inputs, weights=WeightsConfig("w"))
    keys = set(_external(apart.pte))
    assert {"lin.bias", "scale"} <= keys
    folded = [k for k in keys if k.startswith("lin.weight")]  # the transposed weight, folded
    assert len(folded) == 1 and (folded[0] == "lin.weight" or folded[0].startswith("lin.weight#"))
    assert set(data_file(apart.ptd).entries) == keys


def test_without_its_data_file_the_program_names_the_missing_key(scaled):
    model, inputs = scaled
    apart = compile_module(model, inputs, weights=WeightsConfig("w"))
    with pytest.raises(InvalidData, match="key '.*' is neither in the program nor in its data files"):
        Program.from_bytes(apart.pte).load_method()


def test_only_moves_the_keys_its_globs_match(scaled):
    model, inputs = scaled
    apart = compile_module(model, inputs, weights=WeightsConfig("w", ("lin.*",)))
    assert "scale" not in _external(apart.pte) and "lin.bias" in _external(apart.pte)
    x = inputs[0].numpy()
    got = Program.from_bytes(apart.pte, [data_file(apart.ptd)]).load_method()(x)[0]
    assert np.allclose(got, model(*inputs).detach().numpy(), atol=1e-6)
    assert chosen("layers.0.w#ab12", ("layers.*",)) and not chosen("embed", ("layers.*",))


def test_same_weights_same_data_file_bytes(scaled):
    model, inputs = scaled
    a = compile_module(model, inputs, weights=WeightsConfig("w"))
    b = compile_module(model, inputs, weights=WeightsConfig("w"))
    assert a.ptd == b.ptd


def test_one_key_two_values_is_a_build_error(scaled):
    model, inputs = scaled
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.scale.mul_(-1)
    methods = {"a": torch.export.export(model, inputs, strict=False), "b": torch.export.export(other, inputs,
                                                                                                 strict=False)}
    with pytest.raises(StageError, match="weights key 'scale' holds different values in a and in b"):
        compile_exported(methods, weights=WeightsConfig("w"))


def test_separate_drops_the_segments_of_moved_named_data():
    program = fb.Program(
        execution_plan=[fb.ExecutionPlan(name="forward", delegates=[fb.BackendDelegate(
            "XnnpackBackend", fb.BackendDelegateDataReference(fb.DataLocation.SEGMENT, 2))])],
        constant_segment=fb.SubsegmentOffsets(0, [0]),
        named_data=[fb.NamedData("k1", 1), fb.NamedData("k2", 3)],
    )
    out = separate(program, [b"", b"one", b"blob", b"two"], {}, None)
    assert out.segments == [b"", b"blob"] and out.program.named_data == []
    assert out.program.execution_plan[0].delegates[0].processed.index == 1
    assert {k: v[0] for k, v in out.entries.items()} == {"k1": b"one", "k2": b"two"}


class Adapted(torch.nn.Module):
    """Scaled's layer plus a low-rank adapter: lin(x) + b(a(x))."""

    def __init__(self, base: Scaled) -> None:
        super().__init__()
        self.lin = base.lin
        self.lora_a = torch.nn.Linear(4, 2, bias=False)
        self.lora_b = torch.nn.Linear(2, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + self.lora_b(self.lora_a(x))


def test_an_adapter_shares_the_base_file_and_keeps_its_own_weights(scaled):
    model, inputs = scaled
    adapted = Adapted(model).eval()
    base_model = Adapted(model).eval()
    for p in (*base_model.lora_a.parameters(), *base_model.lora_b.parameters()):
        torch.nn.init.zeros_(p)
    base = compile_module(base_model, inputs, weights=WeightsConfig("base", ("lin.*",)))
    lora = compile_module(adapted, inputs, weights=WeightsConfig("base", ("lin.*",)))
    assert not any(k.startswith("lora") for k in _external(lora.pte))
    assert lora.ptd == base.ptd  # one base.ptd serves both programs
    for program, module in ((lora.pte, adapted), (base.pte, base_model)):
        got = Program.from_bytes(program, [data_file(base.ptd)]).load_method()(inputs[0].numpy())[0]
        np.testing.assert_allclose(got, module(*inputs).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_external_constants_are_read_only_views_of_the_mapped_data_file(scaled, tmp_path):
    model, inputs = scaled
    apart = compile_module(model, inputs, weights=WeightsConfig("w"))
    (tmp_path / "m.pte").write_bytes(apart.pte)
    (tmp_path / "w.ptd").write_bytes(apart.ptd)
    program = Program.load(tmp_path / "m.pte", data=[tmp_path / "w.ptd"])
    method = program.load_method()
    external = [v for v, ev in zip(method.values.objects, method.plan.values)
                if isinstance(ev.val, fb.Tensor) and ev.val.extra_tensor_info is not None]
    assert external and all(not c.flags.writeable and not c.flags.owndata for c in external)
    mapped = program.data_files[0].entries["lin.bias"].data.obj
    assert type(mapped).__name__ == "mmap"
