"""The operators lowering emits: ExecuTorch's, every core ATen operator covered, decompositions exact.

The core ATen set is derived from torch (`torch.Tag.core`), so a new torch release that adds an
operator with neither a kernel nor a decomposition fails `test_every_core_operator_is_covered`
naming it. Every decomposition a core operator takes (torch's default table, etbuild's, torch's
fallback) has cases here that lower it, check that the program calls only ExecuTorch's
operators, and run it in etbuild's runtime against eager torch, every output compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from etbuild.errors import StageError
from etbuild.lowering.decompositions import DECOMPOSITIONS, decomposition_of, exclusion
from etbuild.lowering.operator_set import available, executorch_operators
from etbuild.pipeline import compile_module
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program
from etbuild.runtime.kernel_registry import canonical_name
from etbuild.stages.lower import lower
from etbuild.verify.oracle import export_methods
from tests.conftest import requires_executorch

aten = torch.ops.aten
REPO = Path(__file__).resolve().parents[3]


class Call(torch.nn.Module):
    def __init__(self, fn: Callable[..., object]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> object:
        return self.fn(*args)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_g(seed))


WEIGHT = torch.randn(10, 3, generator=_g(1))
BAG_INDICES = torch.tensor([1, 2, 4, 4, 7, 0])
NAN_ROW = torch.tensor([[3.0, math.nan, -1.0, 3.0, 0.5, -math.inf, 3.0],
                        [1.0, 1.0, 1.0, -2.0, math.nan, math.nan, 0.0]])
INT_ROW = torch.tensor([[3, 1, 3, -2, 1, 0, 3, 3]])

def _creations(x: torch.Tensor) -> torch.Tensor:
    """The `*_like`, `new_*`, `scalar_tensor` and dtype-conversion class, results of several dtypes."""
    made = [x.new_zeros(2, 3), x.new_ones((2, 3), dtype=torch.float16), x.new_full((2, 3), 4), torch.ones_like(x),
            torch.zeros_like(x, dtype=torch.int32), torch.full_like(x, 7), x.new_empty((2, 3)).fill_(1),
            torch.scalar_tensor(3.0), x.double().half().float(), x.type_as(torch.tensor(1, dtype=torch.int8))]
    return sum(made[1:], made[0])


# operator → cases: (function calling it, inputs)
CASES: dict[object, list[tuple[Callable[..., object], tuple[torch.Tensor, ...]]]] = {
    aten.avg_pool1d.default: [(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), (_x(1, 2, 9),))],
    aten.adaptive_avg_pool1d.default: [(lambda x: F.adaptive_avg_pool1d(x, 4), (_x(1, 2, 9),))],
    aten.col2im.default: [(lambda x: F.fold(x, (4, 5), 2, padding=1), (_x(1, 8, 30),))],
    aten.empty_strided.default: [(lambda x: x + torch.empty_strided((2, 3), (1, 2)).fill_(1.5), (_x(2, 3),))],
    aten.empty_permuted.default: [(lambda x: torch.empty_like(x).fill_(2) * x, (_x(2, 3),))],
    aten.full_like.default: [(_creations, (_x(2, 3),))],
    aten.avg_pool3d.default: [
        (lambda x: F.avg_pool3d(x, 2), (_x(1, 2, 4, 4, 4),)),
        (lambda x: F.avg_pool3d(x, (3, 2, 3), (2, 1, 2), (1, 1, 0), ceil_mode=True), (_x(2, 3, 5, 6, 7),)),
        (lambda x: F.avg_pool3d(x, 3, 2, 1, count_include_pad=False), (_x(1, 2, 5, 5, 6),)),
        (lambda x: F.avg_pool3d(x, 2, divisor_override=3), (_x(2, 4, 4, 5),)),
    ],
    aten._adaptive_avg_pool3d.default: [
        (lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), (_x(1, 2, 5, 7, 6),)),
        (lambda x: F.adaptive_avg_pool3d(x, 1), (_x(2, 3, 4, 4),)),
    ],
    aten.max_pool3d_with_indices.default: [
        (lambda x: F.max_pool3d(x, 2, return_indices=True), (_x(1, 2, 4, 4, 4),)),
        (lambda x: F.max_pool3d(x, 3, 2, 1, dilation=(1, 2, 1), ceil_mode=True, return_indices=True),
         (_x(1, 2, 6, 7, 5),)),
        (lambda x: F.max_pool3d(x, 2, return_indices=True), (torch.ones(2, 4, 4, 4),)),  # ties: first index
    ],
    aten._embedding_bag.default: [
        (lambda i, o, mode=mode: F.embedding_bag(i, WEIGHT, o, mode=mode), (BAG_INDICES, torch.tensor([0, 2, 2, 5])))
        for mode in ("sum", "mean", "max")
    ] + [
        (lambda i, o, w: F.embedding_bag(i, WEIGHT, o, mode="sum", per_sample_weights=w, include_last_offset=True),
         (BAG_INDICES, torch.tensor([0, 3, 6]), _x(6))),
        (lambda i, o: F.embedding_bag(i, WEIGHT, o, mode="mean", padding_idx=4), (BAG_INDICES, torch.tensor([0, 3]))),
        (lambda i, o: aten._embedding_bag.default(WEIGHT, i, o, False, 2), (BAG_INDICES, torch.tensor([0, 2, 2]))),
        (lambda i, o: aten._embedding_bag.default(WEIGHT, i, o, False, 1), (BAG_INDICES, torch.tensor([0, 4]))),
    ],
    aten.scatter_reduce.two: [
        (lambda x, s, reduce=reduce, include=include: x.scatter_reduce(
            0, torch.tensor([0, 1, 0, 2, 0]), s, reduce, include_self=include),
         (_x(4), _x(5, seed=1)))
        for reduce in ("sum", "prod", "mean", "amax", "amin") for include in (True, False)
    ] + [
        (lambda x, s: x.scatter_reduce(1, torch.tensor([[0, 1, 0], [2, 2, 4]]), s, "amax", include_self=False),
         (_x(3, 5), _x(2, 4, seed=1))),
        (lambda x, s: x.scatter_reduce(0, torch.tensor([1, 1, 0]), s, "mean"), (torch.tensor([4, 7, 9]),
                                                                              torch.tensor([2, 5, -3]))),
    ],
    aten.sort.default: [
        (lambda x: torch.sort(x, 1), (NAN_ROW,)),
        (lambda x: torch.sort(x, 1, descending=True), (NAN_ROW,)),
        (lambda x: torch.sort(x, 0), (_x(5, 3),)),
        (lambda x: torch.sort(x), (INT_ROW,)),
        (lambda x: torch.argsort(x, descending=True), (INT_ROW,)),
    ],
    aten.sort.stable: [(lambda x: torch.sort(x, stable=True, descending=True), (INT_ROW,))],
    aten.exp2.default: [(torch.exp2, (_x(3, 4),)), (torch.exp2, (INT_ROW,))],
    aten.round.decimals: [(lambda x, d=d: torch.round(x * 100, decimals=d), (_x(3, 4),)) for d in (2, 0, -1)],
    aten.cumprod.default: [(lambda x: torch.cumprod(x, 1), (_x(2, 9),)), (lambda x: torch.cumprod(x, 0), (INT_ROW,))],
    aten.linalg_vector_norm.default: [(lambda x: torch.linalg.vector_norm(x, dim=(2, 3), keepdim=True),
                                       (_x(2, 3, 4, 5),))],
    aten._local_scalar_dense.default: [(lambda x: x * x.max().item(), (_x(3, 4),))],
}


def _core_operators() -> Iterator[torch._ops.OpOverload]:
    for name in dir(aten):
        packet = getattr(aten, name)
        if isinstance(packet, torch._ops.OpOverloadPacket):
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if torch.Tag.core in op.tags:
                    yield op


def test_every_core_operator_is_covered():
    """Each core ATen operator: a kernel ExecuTorch has, a decomposition tested here, or an exclusion."""
    default = torch.export.default_decompositions()
    uncovered, untested = [], []
    for op in _core_operators():
        if available(op) or exclusion(op):
            continue
        if op in default or decomposition_of(op) is not None:
            untested += [] if op in CASES else [str(op)]
        else:
            uncovered.append(str(op))
    assert uncovered == [], "core ATen operators with neither a kernel nor a decomposition nor an exclusion"
    assert untested == [], "core ATen operators decomposed without a case in CASES"


def test_every_decomposition_of_etbuild_has_cases():
    assert sorted(map(str, set(DECOMPOSITIONS) - set(CASES) - {aten._embedding_bag_forward_only.default})) == []


def _ids() -> list[str]:
    return [f"{op}-{i}" for op, cases in CASES.items() for i in range(len(cases))]


@pytest.mark.parametrize(("fn", "inputs"), [c for cases in CASES.values() for c in cases], ids=_ids())
def test_decomposition_calls_executorch_operators_and_matches_torch(fn, inputs):
    pte = compile_module(Call(fn), inputs).pte
    assert _operators(pte) <= executorch_operators()
    expected = torch.utils._pytree.tree_leaves(fn(*inputs))
    actual = Program.from_bytes(pte).load_method("forward")(*[t.numpy() for t in inputs])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.numpy().dtype
        np.testing.assert_allclose(a, e.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)


def _operators(pte: bytes) -> set[str]:
    program, _ = read_program(pte)
    return {canonical_name(o.name, o.overload) for plan in program.execution_plan for o in plan.operators}


# A quantized recipe exports its float recipe's model (its program's operators are checked by
# its build's select stage and by tests/interop/test_quantized.py).
FLOAT_RECIPES = [p for p in discover_recipes(REPO / "recipes") if load_recipe(p).quantize is None]


@pytest.mark.parametrize("recipe_path", FLOAT_RECIPES, ids=lambda p: p.stem)
def test_every_recipe_lowers_to_executorch_operators(recipe_path):
    lowered = lower(export_methods(load_recipe(recipe_path)))
    operators = {canonical_name(o.name, o.overload) for p in lowered.program.execution_plan for o in p.operators}
    assert operators - executorch_operators() == set()


@requires_executorch
def test_the_checked_in_list_is_executorchs():
    from importlib.metadata import version

    from etbuild.lowering.operator_set import EXECUTORCH_VERSION
    from etbuild.verify.oracle import executorch_operator_names

    assert version("executorch") == EXECUTORCH_VERSION
    assert set(executorch_operator_names()) == executorch_operators()


class Shuffle(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[torch.randperm(4)]


def test_an_operator_without_decomposition_fails_naming_it_where_and_what_to_do():
    exported = torch.export.export(Shuffle(), (torch.randn(4, 2),))
    with pytest.raises(StageError) as err:
        lower({"forward": exported})
    first, where, source = str(err.value).splitlines()
    assert first == (
        "lower step 'fit-operator-set' (after decompose, fold-linear): ExecuTorch 1.5.1's runtime has no "
        "aten::randperm.out "
        "(what aten.randperm.default becomes), and neither etbuild nor torch has a decomposition of it (random: a "
        "permutation no eager run reproduces, so verify could not check it; ExecuTorch's kernel library has "
        "none); to build this model, express aten.randperm.default with operators ExecuTorch has (in the model, "
        "or as a decomposition in etbuild/lowering/decompositions.py), or leave it to a backend that runs it"
    )
    assert where == "  in method 'forward', node randperm (aten.randperm.default)"
    assert source.startswith("  from <root> (Shuffle) at ") and source.endswith("return x[torch.randperm(4)]")
