"""etbuild.zoo: each model builds from its recipe, runs eagerly, and exports to known core ATen ops.

`EXPECTED_OPS` is the contract with the kernels and the lowering: the `call_function` targets of
`torch.export.export(...).run_decompositions()` for each recipe's method (torch is pinned), over
the top-level graph and the graphs of `torch.cond` branches alike.
"""

from __future__ import annotations

import copy
import functools
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.export import ExportedProgram

from etbuild import zoo
from etbuild.model import (
    build_model,
    dynamic_shapes,
    example_inputs,
    method_callable,
    sample_inputs,
)
from etbuild.recipe import Recipe, load_recipe

REPO = Path(__file__).resolve().parents[3]

LINEAR = {"aten.addmm.default", "aten.permute.default"}
BATCH_NORM = "aten._native_batch_norm_legit_no_training.default"
GETITEM = "<built-in function getitem>"

LM_OPS = {GETITEM, "aten._softmax.default", "aten.add.Tensor", "aten.arange.start_step", "aten.bmm.default"} | {
    "aten.cat.default", "aten.div.Tensor", "aten.embedding.default", "aten.expand.default", "aten.gt.Tensor",
    "aten.index.Tensor", "aten.index_put.default", "aten.mean.dim", "aten.mm.default", "aten.mul.Tensor",
    "aten.permute.default", "aten.pow.Tensor_Scalar", "aten.rsqrt.default", "aten.scalar_tensor.default",
    "aten.select.int", "aten.sigmoid.default", "aten.slice.Tensor", "aten.split_with_sizes.default",
    "aten.squeeze.dims", "aten.sub.Tensor", "aten.unsqueeze.default", "aten.view.default", "aten.where.self",
}

EXPECTED_OPS: dict[tuple[str, str], set[str]] = {
    ("cnn", "forward"): LINEAR
    | {GETITEM, BATCH_NORM, "aten.add.Tensor", "aten.convolution.default"}
    | {"aten.hardtanh.default", "aten.mean.dim", "aten.view.default"},
    ("transformer", "forward"): LINEAR
    | {GETITEM, "aten._softmax.default", "aten.add.Tensor", "aten.bmm.default"}
    | {"aten.clone.default", "aten.expand.default", "aten.gelu.default", "aten.mul.Tensor"}
    | {"aten.native_layer_norm.default", "aten.view.default"},
    ("kws", "forward"): LINEAR
    | {GETITEM, BATCH_NORM, "aten.convolution.default", "aten.max_pool2d_with_indices.default"}
    | {"aten.mean.dim", "aten.relu.default", "aten.squeeze.dims", "aten.unsqueeze.default"}
    | {"aten.view.default"},
    ("gru", "forward"): LINEAR
    | {GETITEM, "aten.add.Tensor", "aten.cat.default", "aten.full.default", "aten.mul.Tensor"}
    | {"aten.select.int", "aten.sigmoid.default", "aten.slice.Tensor", "aten.squeeze.dims"}
    | {"aten.split_with_sizes.default", "aten.sub.Tensor", "aten.tanh.default"}
    | {"aten.unsqueeze.default", "aten.view.default"},
    ("cond", "forward"): LINEAR
    | {GETITEM, "cond", "aten.gt.Scalar", "aten.sum.dim_IntList"}
    | {"aten.mul.Tensor", "aten.relu.default", "aten.tanh.default"},
    ("mlp-dynamic", "forward"): LINEAR | {"aten.relu.default"},
    ("stateful", "forward"): {"aten.add.Tensor", "aten.clone.default", "aten.mean.dim"}
    | {"aten.mul.Tensor", "aten.sub.Tensor"},
    ("two-method", "decode"): LINEAR | {"aten.relu.default", "aten.sigmoid.default"},
    ("two-method", "encode"): LINEAR | {"aten.relu.default"},
    ("embed-argmax", "forward"): LINEAR
    | {"aten.argmax.default", "aten.embedding.default", "aten.view.default"},
    ("compare-where", "forward"): {"aten.abs.default", "aten.ge.Scalar", "aten.gt.Tensor"}
    | {"aten.logical_and.default", "aten.logical_not.default", "aten.logical_or.default"}
    | {"aten.lt.Scalar", "aten.mul.Tensor", "aten.ne.Scalar", "aten.sub.Tensor"}
    | {"aten.sum.dim_IntList", "aten.where.self"},
    ("lm", "decode"): LM_OPS,
    ("lm", "prefill"): LM_OPS | {"aten.clone.default", "aten.sym_size.int"},
}

SLOW = {"cnn", "gru", "lm"}  # export and decomposition take about 3 s each


class MethodAsForward(nn.Module):
    """Exposes one method of a module as `forward`: torch.export exports only `forward`.

    Its `forward` takes `*args`, so its dynamic_shapes are the method's wrapped in a tuple.
    """

    def __init__(self, module: nn.Module, name: str) -> None:
        super().__init__()
        self.module, self.name = module, name

    def forward(self, *args: torch.Tensor) -> Any:
        return method_callable(self.module, self.name)(*args)


@functools.cache
def recipe(name: str) -> Recipe:
    return load_recipe(REPO / "recipes" / f"{name}.yaml")


@functools.cache
def exported(name: str, method: str) -> ExportedProgram:
    """The recipe's method exported as the export stage does, then run_decompositions()."""
    model, shapes = build_model(recipe(name)), dynamic_shapes(recipe(name), method)
    if method != "forward":
        model, shapes = MethodAsForward(model, method), None if shapes is None else (shapes,)
    with warnings.catch_warnings():  # nn.GRU: "tensor attributes ... assigned during export"
        warnings.simplefilter("ignore", UserWarning)
        ep = torch.export.export(
            model, example_inputs(recipe(name), method), dynamic_shapes=shapes, strict=False
        )
    return ep.run_decompositions()


def fresh_program(name: str, method: str) -> nn.Module:
    """A runnable copy of `exported(name, method)` with its own state.

    `ExportedProgram.module()` shares buffers with the program's state_dict: running a stateful
    program would change the cached program's state.
    """
    return copy.deepcopy(exported(name, method)).module()


def ops_of(ep: ExportedProgram) -> set[str]:
    """`call_function` targets of every graph in `ep`: the top level and cond branches."""
    graphs = [m for m in ep.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
    return {str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"}


def cases(exporting: bool) -> list[Any]:
    """Every (recipe, method), the exports of `SLOW` recipes marked slow when `exporting`."""
    return [
        pytest.param(
            name,
            method,
            id=f"{name}-{method}",
            marks=[pytest.mark.slow] * (exporting and name in SLOW),
        )
        for name, method in EXPECTED_OPS
    ]


# ---------------------------------------------------------------------------- every zoo recipe


def test_every_zoo_recipe_is_listed() -> None:
    names = {name for name, _ in EXPECTED_OPS}
    assert {(name, m.name) for name in names for m in recipe(name).model.methods} == set(
        EXPECTED_OPS
    )


@pytest.mark.parametrize(("name", "method"), cases(exporting=False))
def test_builds_and_runs_eagerly(name: str, method: str) -> None:
    model = build_model(recipe(name))
    with torch.no_grad():
        outputs = method_callable(model, method)(*example_inputs(recipe(name), method))
    for output in outputs if isinstance(outputs, tuple) else (outputs,):
        assert not output.dtype.is_floating_point or bool(torch.isfinite(output).all())


@pytest.mark.parametrize(("name", "method"), cases(exporting=True))
def test_exports_to_the_expected_core_aten_ops(name: str, method: str) -> None:
    assert ops_of(exported(name, method)) == EXPECTED_OPS[(name, method)]


@pytest.mark.parametrize(("name", "method"), cases(exporting=True))
def test_exported_program_matches_eager_on_the_verification_samples(name: str, method: str) -> None:
    """Each sample on a fresh model and program: state (if any) starts the same in both."""
    r = recipe(name)
    for sample in sample_inputs(r, r.verify.samples, r.verify.seed, method):
        program = fresh_program(name, method)
        expected = method_callable(build_model(r), method)(*sample)
        torch.testing.assert_close(program(*sample), expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- model by model


def test_mobilenet_v2_structure_and_scale() -> None:
    model = build_model(recipe("cnn"))
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert sum(c.groups == c.in_channels > 1 for c in convs) == 17  # one depthwise per block
    assert sum(isinstance(m, zoo.InvertedResidual) and m.residual for m in model.modules()) == 10
    with torch.no_grad():
        logits = model(*example_inputs(recipe("cnn")))
    assert logits.shape == (1, 2)
    assert float(logits.abs().max()) > 0.1  # He init keeps the signal (see etbuild.zoo.layers.init_convs_he)


def test_transformer_writes_attention_out() -> None:
    model = build_model(recipe("transformer"))
    assert not any(isinstance(m, nn.MultiheadAttention) for m in model.modules())
    assert sum(isinstance(m, zoo.SelfAttention) for m in model.modules()) == 4
    with pytest.raises(ValueError, match=r"^d_model \(10\) must be a multiple of heads \(4\)$"):
        zoo.transformer_encoder(d_model=10, heads=4)


def test_cond_verification_samples_take_both_branches() -> None:
    r = recipe("cond")
    taken = [bool(x.sum() > 0) for (x,) in sample_inputs(r, r.verify.samples, r.verify.seed)]
    assert taken == [False, False, True, True]  # as the recipe's comment says


def test_cond_branches_compute_different_things() -> None:
    model = build_model(recipe("cond"))
    up, down = torch.ones(1, 16), -torch.ones(1, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(up), model.head(torch.relu(model.a(up))))
        torch.testing.assert_close(model(down), model.head(torch.tanh(model.b(down)) * 2))


def test_running_stats_updates_its_state_on_every_call() -> None:
    model = build_model(recipe("stateful"))
    x = torch.ones(4, 16)
    (first, count1), (second, count2) = model(x), model(x)
    assert (count1.tolist(), count2.tolist()) == ([1], [2])
    torch.testing.assert_close(model.mean, torch.full((16,), 0.19))
    assert not torch.equal(first, second)
    mutated = exported("stateful", "forward").graph_signature.buffers_to_mutate
    assert sorted(mutated.values()) == ["count", "mean"]


def test_exported_running_stats_carries_state_across_calls() -> None:
    program, model = fresh_program("stateful", "forward"), build_model(recipe("stateful"))
    for sample in sample_inputs(recipe("stateful"), 3, seed=0):
        torch.testing.assert_close(program(*sample), model(*sample))


def test_encoder_decoder_round_trip_shapes() -> None:
    model = build_model(recipe("two-method"))
    (x,) = example_inputs(recipe("two-method"), "encode")
    with torch.no_grad():
        z = model.encode(x)
        y = model.decode(z)
    assert (z.shape, y.shape) == ((1, 8), (1, 32))
    assert bool(((y > 0) & (y < 1)).all())
    assert type(model).forward is nn.Module.forward  # no forward: methods only


def test_embed_argmax_has_no_near_ties_on_its_verification_samples() -> None:
    r = recipe("embed-argmax")
    model = build_model(r)
    for (tokens,) in sample_inputs(r, r.verify.samples, r.verify.seed):
        with torch.no_grad():
            top2 = model.classify(model.embed(tokens)).topk(2, dim=-1).values
            labels = model(tokens)
        assert float((top2[..., 0] - top2[..., 1]).min()) > 1e-4
        assert (labels.dtype, labels.shape) == (torch.int64, (1, 16))


def test_compare_where_outputs() -> None:
    r = recipe("compare-where")
    model = build_model(r)
    selected, mask, counts = model(*example_inputs(r))
    assert (selected.dtype, mask.dtype, counts.dtype) == (torch.float32, torch.bool, torch.int64)
    assert (selected.shape, mask.shape, counts.shape) == ((4, 16), (4, 16), (4,))
    assert 0 < int(mask.sum()) < mask.numel()  # both selections happen
