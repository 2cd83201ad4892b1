"""What each Ethos-U target is, as Vela and ExecuTorch's Arm backend name it (ARM-ETHOSU.md §1, §5). Torch-free.

A target is a Vela `--accelerator-config`: the family (u55, u65, u85) and the MACs per cycle. Each family
has ExecuTorch's default system config and memory mode, and one TOSA specification string.
"""

from __future__ import annotations

from dataclasses import dataclass

TARGETS = (
    "ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
    "ethos-u65-256", "ethos-u65-512",
    "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048",
)
SYSTEM_CONFIGS = (
    "Ethos_U55_Deep_Embedded", "Ethos_U55_High_End_Embedded",
    "Ethos_U65_Embedded", "Ethos_U65_Mid_End", "Ethos_U65_High_End", "Ethos_U65_Client_Server",
    "Ethos_U85_SYS_Flash_Low", "Ethos_U85_SYS_Flash_High", "Ethos_U85_SYS_DRAM_Low", "Ethos_U85_SYS_DRAM_Mid",
    "Ethos_U85_SYS_DRAM_High",
)
MEMORY_MODES = ("Sram_Only", "Shared_Sram", "Dedicated_Sram", "Dedicated_Sram_256KB", "Dedicated_Sram_384KB",
                "Dedicated_Sram_512KB")
VELA_CONFIG = "Arm/vela.ini"
"""The `--config` ExecuTorch passes: resolved by Vela to the copy inside its package."""


@dataclass(frozen=True)
class Family:
    """One NPU generation: its defaults and the TOSA specification its partitions are lowered to."""

    name: str
    system_config: str
    memory_mode: str
    tosa_spec: str

    @property
    def dedicated_sram(self) -> bool:
        """Whether the family may use Dedicated_Sram modes (U65 and U85; U55's scratch must be SRAM)."""
        return self.name != "u55"


FAMILIES = {
    "u55": Family("u55", "Ethos_U55_High_End_Embedded", "Shared_Sram", "TOSA-1.0+INT+int16+int4+u55"),
    "u65": Family("u65", "Ethos_U65_High_End", "Dedicated_Sram_384KB", "TOSA-1.0+INT+int16+int4+u55"),
    "u85": Family("u85", "Ethos_U85_SYS_DRAM_Mid", "Sram_Only", "TOSA-1.0+INT+int16+int4+cf"),
}


def family(target: str) -> Family:
    """The family of a target of TARGETS (`ethos-u55-128` → u55)."""
    return FAMILIES[target.split("-")[1]]


def macs(target: str) -> int:
    """MACs per cycle of a target (`ethos-u85-256` → 256)."""
    return int(target.rsplit("-", 1)[1])
