"""What a recipe may set for the Ethos-U backend (`backends: [{name: ethos-u, options: {...}}]`). Torch-free.

`target` is required in practice (its default is the Corstone-300's ethos-u55-128); `system_config` and
`memory_mode` default per family as ExecuTorch's `EthosUCompileSpec` does. Each value is checked against
Vela's names here, so a recipe error names the key and the valid values before any build step runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from etbuild.backends.ethos_u.targets import MEMORY_MODES, SYSTEM_CONFIGS, TARGETS, family
from etbuild.backends.options import OptionError
from etbuild.errors import did_you_mean

QUANTIZER_MODE = "npu-int8"
"""The quantizer mode this backend asks for (etbuild.quantize.schemes.MODES): int32 biases."""


@dataclass(frozen=True)
class EthosUOptions:
    """The Ethos-U backend's options: the NPU, its system (clocks, AXI ports) and where Vela places memory."""

    target: str = field(default="ethos-u55-128", metadata={
        "kind": "name", "doc": "the NPU as Vela's accelerator config: " + ", ".join(TARGETS),
    })
    system_config: str = field(default="", metadata={
        "kind": "name", "doc": "a vela.ini system config (clocks, ports); default per family as ExecuTorch's",
    })
    memory_mode: str = field(default="", metadata={
        "kind": "name", "doc": "a vela.ini memory mode (Sram_Only, Shared_Sram, Dedicated_Sram*); default per family",
    })

    def __post_init__(self) -> None:
        _one_of("target", self.target, TARGETS)
        fam = family(self.target)
        if not self.system_config:
            object.__setattr__(self, "system_config", fam.system_config)
        if not self.memory_mode:
            object.__setattr__(self, "memory_mode", fam.memory_mode)
        _one_of("system_config", self.system_config, SYSTEM_CONFIGS)
        _one_of("memory_mode", self.memory_mode, MEMORY_MODES)
        if self.memory_mode.startswith("Dedicated_Sram") and not fam.dedicated_sram:
            raise OptionError("memory_mode", f"memory_mode {self.memory_mode} needs an Ethos-U65 or U85: the "
                                             f"{self.target}'s scratch must sit in SRAM (Shared_Sram or Sram_Only)")
        if f"_{fam.name.upper()}_" not in self.system_config:
            raise OptionError("system_config", f"system_config {self.system_config} is not one for an "
                                               f"Ethos-{fam.name.upper()} (target {self.target})")


def _one_of(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise OptionError(key, f"expected one of {', '.join(valid)} for option {key!r} of backend ethos-u; "
                               f"got {value!r}{did_you_mean(value, list(valid))}")


OPTIONS = EthosUOptions
