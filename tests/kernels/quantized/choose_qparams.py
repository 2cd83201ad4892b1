"""Conformance specs of the etbuild.kernels.quantized.choose_qparams kernels: against torch's
functional `choose_qparams.tensor` and `choose_qparams_per_token_asymmetric`."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from etbuild.lowering import quantized_ops  # noqa: F401  (torch's quantized_decomposed ops)
from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()
qd = torch.ops.quantized_decomposed


def per_tensor_cases(g: Gen) -> Iterator[Case]:
    for shape, low, high in [((7,), -3, 3), ((3, 5), 0.5, 2), ((2, 3, 4), -2, -0.25), ((1,), 0, 0)]:
        yield Case((g.t(shape, low=low, high=high), -128, 127, 2**-12, torch.int8))
    yield Case((g.t((4, 4), layout="t"), 0, 255, 1e-5, torch.uint8))
    yield Case((torch.zeros(3, 2), -128, 127, 2**-12, torch.int8))  # a range of zero: the scale is eps
    yield Case((g.t((6,), low=-1e-6, high=1e-6), -128, 127, 2**-12, torch.int8))


def per_token_cases(g: Gen) -> Iterator[Case]:
    for shape, low, high in [((3, 8), -3, 3), ((2, 3, 5), 0.1, 2), ((4, 6), -2, -0.5), ((1, 1), 0, 0)]:
        yield Case((g.t(shape, low=low, high=high), torch.int8))
    yield Case((g.t((5, 3), layout="t"), torch.int8))
    yield Case((torch.zeros(2, 4), torch.int8))


SPECS.add("quantized_decomposed::choose_qparams.Tensor_out", per_tensor_cases,
          ref=lambda c: qd.choose_qparams.tensor(*c.args), outs="tensors")
SPECS.add("quantized_decomposed::choose_qparams_per_token_asymmetric.out", per_token_cases,
          ref=lambda c: qd.choose_qparams_per_token_asymmetric(*c.args), outs="tensors")
