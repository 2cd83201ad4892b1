"""Conformance specs of the etbuild.kernels.portable.shape kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

import torch

from tests.kernels.conformance import Case, Gen, SpecTable, unary

SPECS = SpecTable()


def view_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), [6, 4]))
    yield Case((g.t((2, 3, 4), layout="t"), [-1]))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [4, -1, 5]))
    yield Case((g.t(()), [1, 1]))
    yield Case((g.t((1,)), []))
    yield Case((g.t((0, 3)), [3, 0]))


def permute_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), [2, 0, 1]))
    yield Case((g.t((2, 3, 4), layout="t"), [-1, 0, 1]))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [0, 2, 3, 1]))
    yield Case((g.t(()), []))


def transpose_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), 0, 2))
    yield Case((g.t((2, 3, 4), layout="t"), -1, 1))
    yield Case((g.t((3, 4)), 1, 1))
    yield Case((g.t(()), 0, -1))


def expand_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 1)), [2, 3, 4], False))
    yield Case((g.t((3, 1)), [-1, 5], False))
    yield Case((g.t(()), [2, 2], False))
    yield Case((g.t((1,)), [0], False))
    yield Case((g.t((3, 1), layout="t"), [2, -1, 3], False))


def slice_cases(g: Gen) -> Iterator[Case]:
    x = g.t((5, 6))
    yield Case((x, 1, 1, 4, 1))
    yield Case((x, 0, None, None, 2))
    yield Case((x, 1, -3, None, 1))
    yield Case((x, 0, 2, 100, 1))
    yield Case((x, 1, 4, 2, 1))
    yield Case((g.t((2, 3, 4), layout="t"), -1, 1, 4, 2))


def select_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), 0, 1))
    yield Case((g.t((3, 4)), 1, -1))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), 1, 2))
    yield Case((g.t((5,)), 0, 4))


def squeeze_cases(g: Gen) -> Iterator[Case]:
    x = g.t((1, 3, 1, 4))
    yield Case((x, [0, 2]))
    yield Case((x, [0, 1]))
    yield Case((x, [-2]))
    yield Case((x, []))
    yield Case((g.t(()), [0]))
    yield Case((g.t((1, 3, 1), layout="t"), [0, -1]))


def split_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((5, 4)), [2, 3], 0))
    yield Case((g.t((3, 6), layout="t"), [1, 2, 3], 1))
    yield Case((g.t((5, 4)), [5, 0], 0))
    yield Case((g.t((2, 4, 3, 3), layout="cl"), [1, 3], 1))


def split_size_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((5, 4)), 2, 0))
    yield Case((g.t((3, 6), layout="t"), 3, 1))
    yield Case((g.t((4, 3)), 4, 0))
    yield Case((g.t((4, 3)), 5, -2))


def cat_cases(g: Gen) -> Iterator[Case]:
    yield Case(([g.t((2, 3)), g.t((4, 3))], 0))
    yield Case(([g.t((2, 3)), g.t((2, 5), layout="t"), g.t((2, 0))], 1))
    yield Case(([g.t((2, 3)), g.t((2, 3), torch.int32)], -1))
    yield Case(([g.t((2, 3)), g.t((0,))], 0))
    yield Case(([g.t((2, 3, 2, 2), layout="cl"), g.t((2, 1, 2, 2))], 1))
    yield Case(([g.t((3,))], 0))


def stack_cases(g: Gen) -> Iterator[Case]:
    yield Case(([g.t((2, 3)), g.t((2, 3)), g.t((2, 3))], 0))
    yield Case(([g.t((2, 3)), g.t((2, 3), layout="t")], 2))
    yield Case(([g.t((2, 3)), g.t((2, 3), torch.int64)], -1))
    yield Case(([g.t(()), g.t(())], 0))
    yield Case(([g.t((0, 2))], 1))


def repeat_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3)), [2, 2]))
    yield Case((g.t((2, 3), layout="t"), [2, 1, 3]))
    yield Case((g.t((2, 3)), [0, 1]))
    yield Case((g.t(()), [3]))


def tri_cases(g: Gen) -> Iterator[Case]:
    for diagonal in (0, 1, -1):
        yield Case((g.t((4, 5)), diagonal))
    yield Case((g.t((2, 3, 4), layout="t"), 0))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), 2))


def diagonal_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((4, 5)), 0, 0, 1))
    yield Case((g.t((4, 5)), 1, 0, 1))
    yield Case((g.t((4, 5), layout="t"), -1, 1, 0))
    yield Case((g.t((2, 3, 4)), 0, 1, 2))
    yield Case((g.t((2, 3, 4)), 1, 0, -1))


def unfold_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 7)), 1, 3, 2))
    yield Case((g.t((8,)), 0, 2, 2))
    yield Case((g.t((5, 3), layout="t"), 0, 5, 1))
    yield Case((g.t(()), 0, 1, 1))


def as_strided_cases(g: Gen) -> Iterator[Case]:
    x = g.t((4, 5))
    yield Case((x, [3, 3], [5, 1], None))
    yield Case((x, [2, 2], [1, 5], 3))
    yield Case((x, [4], [5], 1))
    yield Case((g.t((3, 4), layout="t"), [2, 3], [1, 3], None))
    yield Case((x, [0, 3], [1, 1], None))


SPECS.add("aten::view_copy.out", view_cases)
# _unsafe_view is a view: torch refuses inputs whose strides cannot be viewed that way.
SPECS.add("aten::_unsafe_view.out", lambda g: (c for c in view_cases(g) if c.args[0].is_contiguous()))
SPECS.add("aten::permute_copy.out", permute_cases)
SPECS.add(
    "aten::t_copy.out",
    lambda g: [Case((g.t(s, layout=lay),)) for s, lay in [((3, 4), "c"), ((3, 4), "t"), ((5,), "c"), ((), "c")]],
)
SPECS.add("aten::transpose_copy.int_out", transpose_cases)
SPECS.add("aten::expand_copy.out", expand_cases)
SPECS.add("aten::alias_copy.out", unary)
SPECS.add("aten::clone.out", lambda g: chain(unary(g, None), [Case((g.t((2, 3, 4, 5)), torch.channels_last))]))
SPECS.add("aten::slice_copy.Tensor_out", slice_cases)
SPECS.add(
    "aten::narrow_copy.out",
    lambda g: [Case((g.t((5, 6)), 1, 1, 3)), Case((g.t((5, 6), layout="t"), 0, -2, 2)), Case((g.t((5, 6)), 0, 5, 0))],
)
SPECS.add("aten::select_copy.int_out", select_cases)
SPECS.add("aten::squeeze_copy.dims_out", squeeze_cases)
SPECS.add(
    "aten::squeeze_copy.dim_out", lambda g: [Case((g.t((1, 3, 1)), d)) for d in (0, 1, -1)] + [Case((g.t(()), 0))]
)
SPECS.add("aten::squeeze_copy.out", lambda g: [Case((g.t(s),)) for s in [(1, 3, 1, 4), (), (1, 1), (0, 1)]])
SPECS.add(
    "aten::unsqueeze_copy.out",
    lambda g: [Case((g.t((3, 4), layout="t"), d)) for d in (0, -1, 2, 1)] + [Case((g.t(()), 0))],
)
SPECS.add("aten::split_with_sizes_copy.out", split_cases)
SPECS.add("aten::split_copy.Tensor_out", split_size_cases)
SPECS.add(
    "aten::unbind_copy.int_out",
    lambda g: [Case((g.t((3, 4)), 0)), Case((g.t((2, 3, 4), layout="t"), 2)), Case((g.t((2, 0)), 0))],
)
SPECS.add("aten::cat.out", cat_cases)
SPECS.add("aten::stack.out", stack_cases)
SPECS.add("aten::repeat.out", repeat_cases)
SPECS.add(
    "aten::flip.out",
    lambda g: [Case((g.t((2, 3, 4), layout="t"), d)) for d in ([0, 2], [-1], [])] + [Case((g.t(()), []))],
)
SPECS.add(
    "aten::roll.out",
    lambda g: [
        Case((g.t((3, 4)), [1], [0])),
        Case((g.t((3, 4), layout="t"), [2, -1], [0, 1])),
        Case((g.t((3, 4)), [3], [])),
    ],
)
SPECS.add(["aten::tril.out", "aten::triu.out"], tri_cases)
SPECS.add("aten::diagonal_copy.out", diagonal_cases)
SPECS.add("aten::unfold_copy.out", unfold_cases)
SPECS.add(
    "aten::pixel_shuffle.out",
    lambda g: [
        Case((g.t((1, 8, 3, 3)), 2)),
        Case((g.t((2, 9, 2, 2), layout="cl"), 3)),
        Case((g.t((2, 2, 4, 2, 2)), 2)),
    ],
)
SPECS.add(
    "aten::pixel_unshuffle.out", lambda g: [Case((g.t((1, 2, 4, 6)), 2)), Case((g.t((2, 1, 6, 3), layout="t"), 3))]
)
SPECS.add("aten::as_strided_copy.out", as_strided_cases)
