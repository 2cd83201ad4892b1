"""etbuild.select.allowlist: names, globs, @files, and the whole error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.errors import RecipeError, StageError
from etbuild.select import check_allowed, collect, parse_allowlist
from etbuild.select.allowlist import describe_use
from etbuild.select.selection import CallSite, SourceLocation, build
from tests.etbuild.select.support import HERE, line_of, write_program_files

WHERE = "recipes/tiny.yaml:14:3"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    return collect(*write_program_files(tmp_path_factory.mktemp("programs"), "tiny"))


def test_exact_names_and_globs_pass(tiny):
    check_allowed(tiny, ["aten::addmm.out", "aten::*cat*", "aten::s*"], WHERE, HERE)


def test_every_offender_is_listed_with_its_source(tiny):
    with pytest.raises(StageError) as err:
        check_allowed(tiny, ["aten::addmm.out", "aten::slice_copy.*"], WHERE, HERE)
    line = line_of("return torch.cat(")
    code = "return torch.cat([y, x[:, :2]], 1).sigmoid()"
    assert str(err.value) == (
        "recipes/tiny.yaml:14:3: operators.allow: the program calls operators outside the allowlist:\n"
        f"  aten::cat.out (1 call) from <root> (TinyNet) at support.py:{line}: {code}\n"
        f"  aten::sigmoid.out (1 call) from <root> (TinyNet) at support.py:{line}: {code}"
        "\n  add them to operators.allow, change the model so it does not call them, or leave them to a backend"
    )


def test_without_sources_the_counts_remain(tmp_path):
    pte, _ = write_program_files(tmp_path, "mlp")
    with pytest.raises(StageError) as err:
        check_allowed(collect(pte), ["aten::relu.out"], WHERE)
    assert str(err.value) == (
        "recipes/tiny.yaml:14:3: operators.allow: the program calls operators outside the allowlist:\n"
        "  aten::addmm.out (2 calls)"
        "\n  add them to operators.allow, change the model so it does not call them, or leave them to a backend"
    )


def test_many_sources_are_cut_short():
    def source(i: int) -> SourceLocation:
        return SourceLocation("/src/model.py", 30 + i, f"conv{i} (Conv1d)", "x = self.conv(x)")

    calls = [CallSite("m.pte", "forward", i, ("float32",), "v1/6;0", (source(i),)) for i in range(5)]
    op = build({"aten::convolution.out": calls}, [], ["m.pte"]).operators[0]
    assert describe_use(op, "/src") == (
        "aten::convolution.out (5 calls) from conv0 (Conv1d) at model.py:30: x = self.conv(x); "
        "conv1 (Conv1d) at model.py:31: x = self.conv(x); conv2 (Conv1d) at model.py:32: x = self.conv(x); "
        "… and 2 more"
    )


def test_allowlist_files_relative_to_the_recipe(tmp_path, tiny):
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "ops.txt").write_text(
        "# the vision ops\naten::addmm.out   # the Linear layers\n\naten::*cat*\naten::s*\n"
    )
    assert parse_allowlist(["@lists/ops.txt", "aten::relu.out"], tmp_path, WHERE) == (
        "aten::addmm.out", "aten::*cat*", "aten::s*", "aten::relu.out",
    )
    check_allowed(tiny, ["@lists/ops.txt"], WHERE, tmp_path)


def test_missing_allowlist_file(tmp_path):
    with pytest.raises(RecipeError) as err:
        parse_allowlist(["@lists/missing.txt"], tmp_path, WHERE)
    assert str(err.value) == (
        f"recipes/tiny.yaml:14:3: operators.allow: @lists/missing.txt: no such file {tmp_path / 'lists/missing.txt'}"
    )


def test_entry_that_is_neither_name_nor_glob(tmp_path):
    with pytest.raises(RecipeError) as err:
        parse_allowlist(["add.out"], tmp_path, WHERE)
    assert str(err.value) == (
        "recipes/tiny.yaml:14:3: operators.allow: 'add.out' is neither an operator name "
        "('namespace::op.overload', e.g. 'aten::add.out') nor a glob (e.g. 'aten::*conv*')"
    )
    (tmp_path / "ops.txt").write_text("aten::add.out\nrelu\n")
    with pytest.raises(RecipeError) as err:
        parse_allowlist(["@ops.txt"], tmp_path, WHERE)
    assert str(err.value).startswith(f"{tmp_path / 'ops.txt'}:2: operators.allow: 'relu' is neither")


def test_allowlist_is_case_sensitive(tiny):
    with pytest.raises(StageError):
        check_allowed(tiny, ["ATEN::*"], WHERE, HERE)


def test_unused_path_is_fine(tmp_path: Path, tiny):
    check_allowed(tiny, ["aten::*", "aten::convolution.out"], WHERE, tmp_path)


def test_an_operator_executorch_lacks_is_named_with_its_source(tmp_path):
    from etbuild.stages.select import check_executorch

    where = (SourceLocation("model.py", 7, "blocks.0 (Norm)", "return x.norm()"),)
    use = CallSite("p.pte", "forward", 3, ("float32",), "v1/6", where)
    selection = build({"aten::linalg_vector_norm.out": [use], "aten::add.out": [use]}, [], ["p.pte"], (), ())
    with pytest.raises(StageError) as err:
        check_executorch(selection, tmp_path)
    assert str(err.value) == (
        "the program calls operators ExecuTorch 1.5.1's runtime does not have:\n"
        "  aten::linalg_vector_norm.out (1 call) from blocks.0 (Norm) at model.py:7: return x.norm()\n"
        "  decompose them (etbuild/lowering/decompositions.py) or leave them to a backend"
    )
