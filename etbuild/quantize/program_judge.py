"""Judge a converted model by the program it becomes: lower it as the build will, run it in our runtime.

A converted model stands for its program only up to rounding: the program computes in integers,
requantizes with its own scales, and where a value lands near a rounding tie the two part. In a
deep int8 network those flips compound: on the tier's regnet the program departs from its own
converted model by 35 dB, as much as quantization departs from float, and two calibrations whose
converted models are level (34.3 dB both) give programs 1 dB apart; one activation scale's rounding
decides it (docs/quantization.md). Which calibration gives the better program cannot be read off
the converted model, so `observer: auto` asks the program: the candidate is re-exported, lowered
with the recipe's backends into a `.pte` in memory and run on the verify samples in etbuild's own
runtime, which rounds as ExecuTorch's does. The quantize library sits below the pipeline, so the
compiler comes in as a parameter (`Compile`): the build passes `etbuild.pipeline.program_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule
from torch.utils._pytree import tree_flatten

from etbuild.quantize import flow
from etbuild.quantize.fallback.graph import Outputs
from etbuild.recipe import BackendConfig
from etbuild.runtime import Program

Compile = Callable[[Mapping[str, ExportedProgram], Sequence[BackendConfig]], bytes]
"""Exported methods and the backends to delegate to -> the `.pte` bytes the build would make of them."""


class ProgramJudge:
    """Calling it with a converted model gives the outputs of that model's program on `samples`."""

    def __init__(self, method: str, example: tuple[Any, ...], dynamic_shapes: Any,
                 backends: Sequence[BackendConfig], samples: Sequence[tuple[Any, ...]],
                 compile_program: Compile) -> None:
        self.method, self.example, self.dynamic_shapes = method, example, dynamic_shapes
        self.backends, self.samples, self.compile_program = tuple(backends), list(samples), compile_program

    def __call__(self, model: GraphModule) -> Outputs:
        exported = flow.reexport(model, self.example, self.dynamic_shapes)
        pte = self.compile_program({self.method: exported}, self.backends)
        method = Program.from_bytes(pte).load_method(self.method)
        return [[torch.from_numpy(np.array(o)) for o in method(*_arrays(sample))] for sample in self.samples]


def _arrays(sample: tuple[Any, ...]) -> list[np.ndarray]:
    """A sample's tensors as the numpy arrays the runtime takes, in input order."""
    return [t.detach().numpy() for t in tree_flatten(sample)[0] if isinstance(t, torch.Tensor)]
