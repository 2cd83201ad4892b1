"""Vela, Arm's Ethos-U compiler, through its Python entry point: a TOSA flatbuffer → command stream,
weights, scratch size, I/O placement and its performance estimate (ARM-ETHOSU.md §5).

Arguments as ExecuTorch passes them (`compile_flags`, then the output dir and the input file), split on
spaces, so no flag or path may hold one. The raw output `<stem>_vela.npz` holds the blob's parts (read
with `.tobytes()`: `.item()` drops trailing NUL bytes); `<stem>_summary_<system_config>.csv` the estimate.
"""

from __future__ import annotations

import contextlib
import csv
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.backends.ethos_u.format.blob import IoTensor, VelaBin
from etbuild.backends.ethos_u.options import EthosUOptions
from etbuild.backends.ethos_u.targets import VELA_CONFIG
from etbuild.errors import StageError
from etbuild.extras import require

STEM = "out"
REPORT_FIELDS = ("cycles_npu", "cycles_total", "nn_macs", "sram_memory_used", "off_chip_flash_memory_used",
                 "on_chip_flash_memory_used", "dram_memory_used", "total_original_weights",
                 "total_npu_encoded_weights", "inference_time", "core_clock")
"""The estimate's fields kept in reports (units as Vela writes them: cycles, KiB, bytes, seconds, Hz)."""


@dataclass(frozen=True)
class Compiled:
    """What Vela made of one TOSA graph: the blob's parts, its fast-scratch bytes (not in the blob) and
    its performance estimate (REPORT_FIELDS)."""

    bin: VelaBin
    scratch_fast_size: int
    report: dict[str, float]


def compile_flags(options: EthosUOptions) -> list[str]:
    """Vela's arguments for a target, in ExecuTorch's order (its `compile_flags` compile spec)."""
    return [f"--accelerator-config={options.target}", f"--config={VELA_CONFIG}", "--output-format=raw",
            f"--system-config={options.system_config}", f"--memory-mode={options.memory_mode}"]


def compile_tosa(tosa: bytes, options: EthosUOptions) -> Compiled:
    """Compile one TOSA graph; a StageError with Vela's message when it refuses it."""
    vela = require("ethosu.vela.vela", "ethos-u")
    with tempfile.TemporaryDirectory(prefix="etbuild-vela-") as tmp:
        if any(c.isspace() for c in tmp):
            raise StageError(f"Vela splits its arguments on spaces; the temporary folder {tmp!r} holds one")
        source = Path(tmp) / f"{STEM}.tosa"
        source.write_bytes(tosa)
        args = [*compile_flags(options), f"--output-dir={tmp}/output", str(source)]
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                status = vela.main(args)
        except Exception as exc:  # Vela raises RuntimeError, CliOptionError, ConfigOptionError...
            raise StageError(f"Vela ({options.target}, {options.memory_mode}) refused a partition: {exc}") from None
        if status != 0:
            raise StageError(f"Vela ({options.target}) returned {status}: {printed.getvalue()[-2000:]}")
        out = Path(tmp) / "output"
        return Compiled(*_read_npz(out / f"{STEM}_vela.npz"),
                        _read_summary(out / f"{STEM}_summary_{options.system_config}.csv"))


def _read_npz(path: Path) -> tuple[VelaBin, int]:
    with np.load(path, allow_pickle=False) as npz:
        data = {k: npz[k] for k in npz.files if not k.endswith("_quantization")}
    blob = VelaBin(
        cmd_data=data["cmd_data"].tobytes(), weight_data=data["weight_data"].tobytes(),
        scratch_size=int(data["scratch_size"]), inputs=_io(data, "input"), outputs=_io(data, "output"),
    )
    return blob, int(data.get("scratch_fast_size", 0))


def _io(data: dict[str, Any], kind: str) -> tuple[IoTensor, ...]:
    shapes = data[f"{kind}_shape"]
    return tuple(
        IoTensor(tuple(int(d) for d in shapes[k]), int(data[f"{kind}_elem_size"][k]),
                 int(data[f"{kind}_offset"][k]), int(data[f"{kind}_region"][k]))
        for k in range(len(shapes))
    )


def _read_summary(path: Path) -> dict[str, float]:
    with path.open(newline="") as f:
        row = next(csv.DictReader(f))
    return {key: float(row[key]) for key in REPORT_FIELDS if row.get(key) not in (None, "")}
