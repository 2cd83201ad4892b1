"""etbuild.lowering.steps: named pipelines, step selection, and errors that name step, method and node."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from etbuild.errors import InternalError, StageError, UsageError
from etbuild.lowering.forms import CORE_ATEN, UNPLANNED
from etbuild.lowering.steps import Pipeline, Step
from etbuild.stages.lower import LOWERING, lower


@torch.library.custom_op("etbuild_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Twice(torch.nn.Module):
    def forward(self, x):
        return twice(x).relu()


def _line_of(code: str) -> int:
    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if line.strip() == code)


def _step(name: str, run=lambda form: form, takes=CORE_ATEN, gives=CORE_ATEN) -> Step:
    return Step(name, f"the {name} step", takes, gives, run)


def test_the_lowering_reads_as_named_steps_that_chain():
    assert LOWERING.names == (
        "decompose", "fold-linear", "fit-operator-set", "move-weight-permutes", "fold-constants", "drop-assertions",
        "fuse-batch-norm", "drop-zero-points", "fuse-quantized-embeddings", "partition", "decompose-outside",
        "in-place-calls", "grouped-attention", "to-program",
    )
    assert all(step.doc and "\n" not in step.doc for step in LOWERING.steps)
    assert (LOWERING.steps[0].takes.name, LOWERING.steps[-1].gives.name) == ("aten", "unplanned-program")
    assert LOWERING.dump_name("fold-constants") == "05-fold-constants.py"
    assert LOWERING.dump_name("to-program") == "14-to-program.txt"


def test_select_keeps_pipeline_order_and_all_is_every_step():
    assert LOWERING.select(["to-program", "decompose"]) == ("decompose", "to-program")
    assert LOWERING.select(["all"]) == LOWERING.names
    assert LOWERING.select([]) == ()


def test_an_unknown_step_lists_the_valid_names():
    with pytest.raises(UsageError) as err:
        LOWERING.select(["decompose", "fold-constant"])
    assert str(err.value) == (
        "unknown lower step 'fold-constant' — did you mean 'fold-constants'?; the steps are: decompose, fold-linear, "
        "fit-operator-set, move-weight-permutes, fold-constants, drop-assertions, fuse-batch-norm, drop-zero-points, "
        "fuse-quantized-embeddings, partition, decompose-outside, in-place-calls, grouped-attention, to-program "
        "(or 'all')"
    )


def test_steps_that_do_not_chain_or_share_a_name_are_refused():
    with pytest.raises(InternalError) as err:
        Pipeline("p", (_step("a", gives=UNPLANNED), _step("b")))
    assert str(err.value) == "p step 'b' takes core-aten, but the step before it, 'a', gives unplanned-program"
    with pytest.raises(InternalError, match="^p pipeline names more than one step 'a'$"):
        Pipeline("p", (_step("a"), _step("b"), _step("a")))


def test_after_sees_the_form_after_each_step():
    seen = []
    pipeline = Pipeline("p", (_step("a", lambda f: f + 1), _step("b", lambda f: f * 10)))
    assert pipeline.run(1, lambda step, form: seen.append((step.name, form))) == 20
    assert seen == [("a", 2), ("b", 20)]


def test_an_error_inside_a_step_names_the_step_the_steps_before_the_method_and_the_node():
    exported = torch.export.export(Twice(), (torch.randn(3),))
    with pytest.raises(StageError) as err:
        lower({"forward": exported})
    assert str(err.value) == (
        "lower step 'fit-operator-set' (after decompose, fold-linear): operator "
        "etbuild_test.twice.default has no "
        "out-variant to call (ExecuTorch's runtime calls only out-variants), and neither etbuild nor torch has "
        "a decomposition of it; to build this model, express etbuild_test.twice.default with operators "
        "ExecuTorch has (in the model, or as a decomposition in etbuild/lowering/decompositions.py), or leave it "
        "to a backend that runs it\n"
        "  in method 'forward', node twice (etbuild_test.twice.default)\n"
        f"  from <root> (Twice) at {__file__}:{_line_of('return twice(x).relu()')}: return twice(x).relu()"
    )


def test_an_error_that_is_not_etbuild_s_keeps_its_type_and_traceback_with_the_step_as_a_note():
    def broken(form):
        raise ValueError("boom")

    with pytest.raises(ValueError) as err:
        Pipeline("p", (_step("a"), _step("b", broken))).run(0)
    assert str(err.value) == "boom"
    assert err.value.__notes__ == ["raised in p step 'b' (after a)"]
    assert err.value.__traceback__ is not None


def test_docs_list_every_step_as_the_pipeline_does():
    docs = (Path(__file__).resolve().parents[3] / "docs" / "lowering.md").read_text()
    for i, step in enumerate(LOWERING.steps, 1):
        row = f"| {i:02d} | `{step.name}` | {step.takes.name} → {step.gives.name} | {step.doc} |"
        assert row in docs
