"""ExecuTorch's own build of a recipe's model: the oracle for interop tests and benchmarks.

`executorch` is an optional extra (`pip install -e '.[interop]'`); it is imported only
when these functions are called, never by etbuild's build or runtime.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from etbuild.errors import UsageError, VerificationError
from etbuild.model import build_model, dynamic_shapes, example_inputs
from etbuild.recipe import Recipe
from etbuild.stages.export import traceable


@dataclass(frozen=True)
class OracleBuild:
    """An ExecuTorch-built `.pte` and the seconds each step of its flow took."""

    path: Path
    export_s: float
    to_edge_s: float
    to_executorch_s: float

    @property
    def total_s(self) -> float:
        return self.export_s + self.to_edge_s + self.to_executorch_s


def export_methods(
    recipe: Recipe, transform: Callable[[torch.nn.Module], torch.nn.Module] | None = None
) -> dict[str, torch.export.ExportedProgram]:
    """torch.export of every method of the recipe's model (first through `transform`, a source
    transform such as `torchao_8da4w`), as ExecuTorch's flow wants them."""
    model = build_model(recipe)
    if transform is not None:
        model = transform(model)
    exported = {}
    for m in recipe.model.methods:
        module, shapes = traceable(model, m.name, dynamic_shapes(recipe, m.name))
        exported[m.name] = torch.export.export(module, example_inputs(recipe, m.name), dynamic_shapes=shapes)
    return exported


ORACLE_SCHEMES = {"int8-static": "int8-static", "int8-dynamic": "int8-dynamic", "int8-weight-only": "int8-dynamic"}
"""The recipe's scheme → the one ExecuTorch's XNNPACKQuantizer builds (it has no weight-only config)."""

INT4_SCHEME = "int8-dynamic-int4-weight"
"""The recipe scheme ExecuTorch builds not with its quantizer but with torchao's source transform (8da4w)."""

Calibration = dict[str, list[tuple[torch.Tensor, ...]]]
"""Per method, the input tuples a static quantizer is calibrated on."""


def torchao_8da4w(model: torch.nn.Module, group_size: int = 32, algorithm: str = "hqq_scale_only") -> torch.nn.Module:
    """ExecuTorch's LLM flow's 8da4w (`quantization.qmode=8da4w` of `export_llm`): torchao's `quantize_`
    with int8 dynamic per-token activations and int4 weights in groups of `group_size`, on every
    `nn.Linear` whose input width the group divides. `algorithm` picks the weights' scales:
    `hqq_scale_only`, export_llm's default (`quantization.use_hqq`), or `affine` (min/max)."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, PerGroup, quantize_

    def linear(module: torch.nn.Module, fqn: str) -> bool:
        return isinstance(module, torch.nn.Linear) and module.in_features % group_size == 0

    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size),
                                                   intx_choose_qparams_algorithm=algorithm)
    with torch.no_grad():
        quantize_(model, config, filter_fn=linear)
    return model


def quantize_methods(
    recipe: Recipe, exported: dict[str, torch.export.ExportedProgram], scheme: str, samples: int = 8,
    calibration: Calibration | None = None,
) -> dict[str, torch.export.ExportedProgram]:
    """Every method through ExecuTorch's XNNPACKQuantizer (symmetric, per-channel weights; static
    calibrated on `calibration[method]`, else on `samples` of the recipe's inputs drawn with seed
    0, or dynamic) and torchao's pt2e flow, re-exported."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from etbuild.model import sample_inputs

    dynamic = ORACLE_SCHEMES[scheme] == "int8-dynamic"
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True,
                                                                                 is_dynamic=dynamic))
    quantized = {}
    for name, ep in exported.items():
        prepared = prepare_pt2e(ep.module(), quantizer)
        for sample in calibration[name] if calibration else sample_inputs(recipe, samples, 0, name):
            prepared(*sample)
        converted = convert_pt2e(prepared)
        quantized[name] = torch.export.export(converted, example_inputs(recipe, name),
                                              dynamic_shapes=_shapes(recipe, name))
    return quantized


def _shapes(recipe: Recipe, method: str) -> Any:
    shapes = dynamic_shapes(recipe, method)
    return (shapes,) if shapes is not None and method != "forward" else shapes


def executorch_build(
    recipe: Recipe, path: Path, partitioner: Any = None, config: Any = None, quantize: str | None = None,
    calibration: Calibration | None = None, int4_algorithm: str = "hqq_scale_only",
) -> OracleBuild:
    """export (→ ExecuTorch's quantizer, for `quantize` one of ORACLE_SCHEMES, calibrated on
    `calibration` if given; for INT4_SCHEME torchao's 8da4w source transform before export, with the
    recipe's group size) → to_edge (or to_edge_transform_and_lower with a partitioner) →
    to_executorch (with `config`, an ExecutorchBackendConfig, if given)."""
    with torch.no_grad():  # ExecuTorch's passes refuse in-place updates of buffers under autograd
        t0 = time.perf_counter()
        exported = _quantized_export(recipe, quantize, calibration, int4_algorithm)
        return _lower(exported, path, partitioner, config, time.perf_counter() - t0)


def _lower(exported: dict[str, torch.export.ExportedProgram], path: Path, partitioner: Any, config: Any,
           export_s: float) -> OracleBuild:
    from executorch.exir import to_edge, to_edge_transform_and_lower

    t1 = time.perf_counter()
    if partitioner is None:
        edge = to_edge(exported)
    else:
        edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    t2 = time.perf_counter()
    program = edge.to_executorch(config)
    t3 = time.perf_counter()
    path.write_bytes(program.buffer)
    return OracleBuild(path, export_s, t2 - t1, t3 - t2)


def _quantized_export(recipe: Recipe, scheme: str | None, calibration: Calibration | None,
                      int4_algorithm: str) -> dict[str, torch.export.ExportedProgram]:
    if scheme == INT4_SCHEME:
        group = recipe.quantize.group_size if recipe.quantize else 32
        return export_methods(recipe, lambda model: torchao_8da4w(model, group, int4_algorithm))
    exported = export_methods(recipe)
    if scheme is None:
        return exported
    import executorch.kernels.quantized  # noqa: F401  (the out-variants to_executorch needs)

    return quantize_methods(recipe, exported, scheme, calibration=calibration)


def shared_state_config() -> Any:
    """ExecuTorch's config for methods that share mutable buffers (as its LLM export sets it)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    return ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True), emit_mutable_buffer_names=True
    )


def executorch_methods(pte: Path, *names: str) -> list[Callable[..., list[np.ndarray]]]:
    """Methods of a `.pte` loaded in ExecuTorch's runtime, as callables of numpy arrays (all loaded first)."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte)
    methods = [program.load_method(name) for name in names]

    def numpy_call(method: Any) -> Callable[..., list[np.ndarray]]:
        return lambda *xs: [out.numpy() for out in method.execute([torch.from_numpy(np.asarray(x)) for x in xs])]

    return [numpy_call(m) for m in methods]


def xnnpack_partitioner() -> Any:
    """ExecuTorch's XNNPACK partitioner."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return XnnpackPartitioner()


def executorch_operator_names() -> list[str]:
    """Every operator ExecuTorch's runtime registers (portable kernels, prim ops, quantized kernels, the
    LLM `llama::` kernels), sorted."""
    from etbuild.llm.custom_ops import release

    release()  # executorch's own llama:: operators replace etbuild's
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers the llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401  (registers the quantized kernels)
    from executorch.extension.pybindings.portable_lib import _get_operator_names

    return sorted(set(_get_operator_names()))


def write_operator_list(path: Path) -> None:
    """Write the operator list lowering targets (`etbuild/lowering/executorch_operators.txt`)."""
    from importlib.metadata import version

    from etbuild.fsutil import write_bytes

    head = [f"# The operators ExecuTorch {version('executorch')}'s runtime registers: portable kernels, prim ops,",
            "# quantized kernels, llama:: LLM kernels. Generated by `python -m etbuild.verify.oracle operators PATH`;",
            "# lowering emits only these."]
    write_bytes(path, "\n".join([*head, *executorch_operator_names(), ""]).encode())



def executorch_installed() -> bool:
    """Whether the executorch oracle package can be imported (without importing it)."""
    return importlib.util.find_spec("executorch") is not None


@functools.lru_cache(maxsize=1)
def executorch_backends() -> frozenset[str]:
    """The backend ids ExecuTorch's Python runtime registers (asked once, in a subprocess)."""
    code = ("import json; from executorch.runtime import Runtime; "
            "print(json.dumps(sorted(Runtime.get().backend_registry.registered_backend_names)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise VerificationError(f"ExecuTorch's runtime did not list its backends (exit {proc.returncode})")
    return frozenset(json.loads(lines[-1]))


def missing_backends(pte: Path) -> list[str]:
    """The backend ids the program's delegates name that ExecuTorch's Python runtime lacks (an NPU's, say)."""
    from etbuild.runtime.format.pte import read_program

    program, _ = read_program(pte.read_bytes())
    named = {d.id for plan in program.execution_plan for d in plan.delegates}
    return sorted(named - executorch_backends()) if named else []


def run_samples_in_executorch(pte: Path, inputs_npz: Path, out_npz: Path, method: str = "forward",
                              data: Sequence[Path] = ()) -> None:
    """Run each sample of inputs_npz (`s<j>_in<k>`) through ExecuTorch's runtime into out_npz
    (`s<j>_out<k>`), one loaded method for all samples, in a subprocess (`etbuild.verify.oracle_samples`):
    loading ExecuTorch's runtime library into this process would slow torch here for the rest
    of the build. `data`: at most one `.ptd` (what ExecuTorch 1.5.1 loads from Python)."""
    if len(data) > 1:
        raise UsageError(f"{pte}: ExecuTorch's Python runtime loads one data file, not {len(data)}")
    argv = [sys.executable, "-m", "etbuild.verify.oracle_samples", str(pte), str(inputs_npz), str(out_npz), method,
            *map(str, data)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
        raise VerificationError(f"{pte} failed in ExecuTorch's runtime (exit {proc.returncode}):\n{tail}")


if __name__ == "__main__":
    if sys.argv[1:2] != ["operators"] or len(sys.argv) != 3:
        sys.exit("usage: python -m etbuild.verify.oracle operators PATH")
    write_operator_list(Path(sys.argv[2]))
