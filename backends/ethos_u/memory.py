"""An Ethos-U delegate's memory and Vela's estimate, for `memory.json` and the SRAM budget. Torch-free.

From the blob: the scratch arena (region 1, where every delegate input and output lives), the command
stream and the weights. Where they sit follows the memory mode in `compile_flags` (ARM-ETHOSU.md §7):
Shared_Sram keeps the scratch in SRAM (the fastest level) and reads weights from flash; Sram_Only keeps
both in SRAM; Dedicated_Sram keeps them in DRAM and caches in SRAM (fast scratch, not in the blob).
Vela's estimate (cycles, MACs, SRAM and flash use) comes from compiling the delegate's TOSA graph again,
which is deterministic and takes a second or two. The TOSA graph itself, kept in the program's named data
for etbuild's simulation (`simulation_keys`), is flash no NPU reads: `simulation_bytes` counts it.
"""

from __future__ import annotations

from collections.abc import Mapping

from etbuild.backends.ethos_u.format.blob import parse, tosa_key
from etbuild.backends.ethos_u.options import EthosUOptions
from etbuild.backends.ethos_u.vela import compile_tosa
from etbuild.memory.delegates import DelegateMemory


def _options(flags: str) -> EthosUOptions:
    values = dict(f.removeprefix("--").split("=", 1) for f in flags.split() if "=" in f)
    return EthosUOptions(values["accelerator-config"], values["system-config"], values["memory-mode"])


def data_keys(blob: bytes | memoryview) -> tuple[str, ...]:
    """Every named-data key a runtime reads for this delegate: its external blocks' (an NPU's) and its TOSA
    graph's (etbuild's simulation). Selective build ships the `.ptd` reader only when one is not in the program."""
    return (*parse(blob).external.values(), tosa_key(blob))


def simulation_keys(blob: bytes | memoryview) -> tuple[str, ...]:
    """The named-data keys of a delegate that only a simulation reads: its TOSA graph."""
    return (tosa_key(blob),)


def delegate_memory(blob: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
                    ) -> DelegateMemory:
    parsed = parse(blob)
    options = _options(compile_specs["compile_flags"].decode())
    in_sram = not options.memory_mode.startswith("Dedicated_Sram")
    details: dict[str, object] = {
        "target": options.target, "memory_mode": options.memory_mode, "scratch_bytes": parsed.scratch_size,
        "command_bytes": len(parsed.cmd_data), "weight_bytes": len(parsed.weight_data),
    }
    tosa = named_data.get(tosa_key(blob))
    if tosa is not None:
        compiled = compile_tosa(bytes(tosa), options)
        details["scratch_fast_bytes"] = compiled.scratch_fast_size
        details["vela"] = compiled.report
        details["simulation_bytes"] = len(tosa)
    read_only = len(parsed.cmd_data) + len(parsed.weight_data)
    fast = parsed.scratch_size if in_sram else details.get("scratch_fast_bytes", 0)
    if options.memory_mode == "Sram_Only":  # the command stream and weights are read from SRAM too
        fast, read_only = fast + read_only, 0
    return DelegateMemory(int(fast), read_only, details)
