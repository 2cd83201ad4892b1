"""ExecuTorch's own Ethos-U flow (the oracle; test-only): EthosUQuantizer, EthosUPartitioner, to_executorch."""

from __future__ import annotations

from typing import Any

import torch


def executorch_delegate(model: torch.nn.Module, x: tuple[torch.Tensor, ...], target: str
                        ) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The first EthosUBackend delegate's blob and compile specs in ExecuTorch's `.pte` of `model`."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from etbuild.quantize.ao import convert_pt2e, prepare_pt2e
    from etbuild.runtime.delegates import processed_blob
    from etbuild.runtime.format.pte import read_program

    pte = executorch_program(model, x, target, EthosUCompileSpec, EthosUPartitioner, EthosUQuantizer,
                             get_symmetric_quantization_config, EdgeCompileConfig, to_edge_transform_and_lower,
                             prepare_pt2e, convert_pt2e)
    program, header = read_program(pte)
    delegate = program.execution_plan[0].delegates[0]
    blob = bytes(processed_blob(pte, program, header, delegate.processed, "delegate 0"))
    return blob, [(s.key, bytes(s.value)) for s in delegate.compile_specs]


def executorch_program(model: torch.nn.Module, x: tuple[torch.Tensor, ...], target: str, *api: Any) -> bytes:
    """ExecuTorch's `.pte` of `model` for `target` (calibrated on x)."""
    spec_cls, partitioner_cls, quantizer_cls, config, edge_config, lower, prepare, convert = api
    spec = spec_cls(target)
    quantizer = quantizer_cls(spec).set_global(config())
    captured = torch.export.export(model.eval(), x, strict=False).module(check_guards=False)
    observed = prepare(captured, quantizer)
    observed(*x)
    exported = torch.export.export(convert(observed), x, strict=False)
    edge = lower(exported, partitioner=[partitioner_cls(spec)], compile_config=edge_config(_check_ir_validity=False))
    return edge.to_executorch().buffer
