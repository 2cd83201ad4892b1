"""etbuild.select.collect and Selection: operators, counts, dtypes, sources, union."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.errors import StageError
from etbuild.select import Selection, SourceLocation, collect
from tests.etbuild.select.support import HERE, line_of, write_program_files

F32 = "float32"


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("programs")
    return {name: write_program_files(d, name) for name in ("mlp", "tiny")}


def test_mlp_operators_counts_dtypes(programs):
    pte, _ = programs["mlp"]
    sel = collect(pte)
    assert sel.names == ("aten::addmm.out", "aten::relu.out")
    addmm, relu = sel.operators
    assert (addmm.count, relu.count) == (2, 1)
    # bias, input, weight, out, and the result slot (the same out tensor)
    assert addmm.signatures == ((F32,) * 5,)
    assert relu.signatures == ((F32,) * 3,)
    assert addmm.kernel_keys == ("v1/6;0|6;0,1|6;0,1|6;0,1|6;0,1",)
    assert [(c.method, c.instruction) for c in addmm.calls] == [("forward", 0), ("forward", 2)]
    assert sel.backends == ()
    assert sel.programs == (str(pte),)
    assert addmm.sources == ()  # no lowered program given


def test_tensor_lists_are_flattened(programs):
    cat = collect(programs["tiny"][0]).operator("aten::cat.out")
    # the list's two tensors, then out and the result slot
    assert cat.signatures == ((F32,) * 4,)
    # ExecuTorch's kernel key takes one entry per list: its first tensor
    assert cat.kernel_keys == ("v1/6;0,1|6;0,1|6;0,1",)


def test_sources_come_from_the_lowered_program(programs):
    pte, lowered = programs["tiny"]
    sel = collect(pte, lowered)
    support = str(HERE / "support.py")
    assert sel.operator("aten::addmm.out").sources == (
        SourceLocation(support, line_of("y = self.fc(x)"), "fc (Linear)", "y = self.fc(x)"),
    )
    cat_line = line_of("return torch.cat(")
    cat_code = "return torch.cat([y, x[:, :2]], 1).sigmoid()"
    assert sel.operator("aten::cat.out").sources == (SourceLocation(support, cat_line, "<root> (TinyNet)", cat_code),)
    assert sel.operator("aten::addmm.out").sources[0].describe(HERE) == (
        f"fc (Linear) at support.py:{line_of('y = self.fc(x)')}: y = self.fc(x)"
    )


def test_mlp_sources_name_each_layer(programs):
    pte, lowered = programs["mlp"]
    addmm = collect(pte, lowered).operator("aten::addmm.out")
    assert [s.module for s in addmm.sources] == ["0 (Linear)", "2 (Linear)"]


def test_lowered_program_of_another_model_is_refused(programs):
    with pytest.raises(StageError) as err:
        collect(programs["mlp"][0], programs["tiny"][1])
    assert str(err.value) == (
        "method 'forward': the lowered program's instructions differ from the .pte's; "
        "was it written by the same build?"
    )


def test_union_merges_and_counts_each_call_once(programs):
    mlp, tiny = collect(programs["mlp"][0]), collect(programs["tiny"][0])
    both = mlp.union([tiny, mlp])
    assert both.names == (
        "aten::addmm.out", "aten::cat.out", "aten::relu.out", "aten::sigmoid.out", "aten::slice_copy.Tensor_out",
    )
    assert both.operator("aten::addmm.out").count == 3  # two in the MLP, one in TinyNet
    mlp_pte, tiny_pte = str(programs["mlp"][0]), str(programs["tiny"][0])
    assert both.operator("aten::addmm.out").programs == tuple(sorted([mlp_pte, tiny_pte]))
    assert both.programs == (mlp_pte, tiny_pte)
    assert Selection().union([mlp]) == mlp


def test_json_round_trip(programs):
    sel = collect(*programs["tiny"])
    assert Selection.from_dict(sel.to_dict()) == sel


def test_unknown_operator_lookup_is_a_key_error(programs):
    with pytest.raises(KeyError):
        collect(programs["mlp"][0]).operator("aten::convolution.out")
