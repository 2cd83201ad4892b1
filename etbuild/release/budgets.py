"""A release's budgets: each product's figures against the limits its release file sets.

- `pte_bytes`: the shipped `.pte`; `download_bytes`: it and its weights file (what a device downloads);
- `runtime_bytes` and `latency_ms`: per runtime the product ships with;
- `sram_bytes`: the first memory level's peak, from the product's `memory.json`: the CPU's arenas planned
  there (the largest method's) plus the largest delegate's working memory there (an Ethos-U delegate's NPU
  scratch; in Sram_Only also its command stream and weights). Delegates never run at once, and ExecuTorch's
  runtime takes NPU scratch from its temp allocator per call, so the two add;
- `flash_bytes`: what a device keeps in flash: the shipped `.pte` and weights file. Over budget, the message
  breaks it down: the NPU's command streams and weights (Vela's, in `memory.json`) and the TOSA graphs kept
  for etbuild's simulation (`simulation_data: keep`).

Every figure over its limit is named in one ReleaseError, with the product, the key and the numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from etbuild.errors import ReleaseError
from etbuild.release.config import Product, Release
from etbuild.release.simulation import simulation_bytes
from etbuild.release.weights import product_files


def sram_figure(memory: Mapping[str, Any]) -> tuple[int, str]:
    """The first level's peak in a `memory.json`, and what it is made of."""
    level, cpu = max(((m["levels"][0]["name"], m["levels"][0]["planned_bytes"]) for m in memory["methods"].values()),
                     key=lambda item: item[1])
    worst = max(memory.get("delegates", []), key=lambda d: d["fast_bytes"], default=None)
    if worst is None or not worst["fast_bytes"]:
        return cpu, f"CPU arenas in level {level} {cpu:,}"
    return cpu + worst["fast_bytes"], (f"CPU arenas in level {level} {cpu:,} + {worst['backend']} delegate "
                                       f"{worst['delegate']} of method {worst['method']} {worst['fast_bytes']:,}")


def flash_figure(files: list[Path], memory: Mapping[str, Any]) -> tuple[int, str]:
    """The bytes of a product's shipped files, and what they hold."""
    total = sum(f.stat().st_size for f in files)
    parts = [f"{f.name} {f.stat().st_size:,}" for f in files]
    npu = sum(d.get("command_bytes", 0) + d.get("weight_bytes", 0) for d in memory.get("delegates", []))
    if npu:
        parts.append(f"of which NPU command streams and weights {npu:,}")
    kept = simulation_bytes(files[0].read_bytes())
    if kept:
        parts.append(f"TOSA graphs kept for simulation {kept:,} (simulation_data: drop ships without them)")
    return total, ", ".join(parts)


def figures(out: Path, p: Product) -> dict[str, Any]:
    """A product's memory figures in the release directory `out`, for release.json and the budget."""
    memory = json.loads((out / "products" / p.name / "memory.json").read_text())
    sram, sram_parts = sram_figure(memory)
    flash, flash_parts = flash_figure(product_files(out, p), memory)
    return {"sram_bytes": sram, "sram_parts": sram_parts, "flash_bytes": flash, "flash_parts": flash_parts}


def _over(p: Product, key: str, figure: float, limit: float | None, shown: str, why: str = "") -> list[str]:
    if limit is None or figure <= limit:
        return []
    limit_shown = f"{limit:,}" if isinstance(limit, int) else f"{limit}"
    return [f"product {p.name}: {key} {shown} > budget {limit_shown}" + (f" ({why})" if why else "")]


def check_budgets(release: Release, out: Path, runtime_bytes: Mapping[str, int],
                  latency: Mapping[str, Mapping[str, Any]]) -> None:
    """ReleaseError naming every product, budget and figure over its limit (runtime_bytes: per runtime)."""
    over: list[str] = []
    for p in release.products:
        b = p.budget
        pte_bytes = (out / "products" / p.name / f"{p.name}.pte").stat().st_size
        over += _over(p, "pte_bytes", pte_bytes, b.pte_bytes, f"{pte_bytes:,}")
        download = sum(f.stat().st_size for f in product_files(out, p))
        over += _over(p, "download_bytes (.pte and weights)", download, b.download_bytes, f"{download:,}")
        if b.sram_bytes is not None or b.flash_bytes is not None:
            f = figures(out, p)
            over += _over(p, "sram_bytes", f["sram_bytes"], b.sram_bytes, f"{f['sram_bytes']:,}", f["sram_parts"])
            over += _over(p, "flash_bytes", f["flash_bytes"], b.flash_bytes, f"{f['flash_bytes']:,}", f["flash_parts"])
        for g in release.runtimes_of(p.name):
            size = runtime_bytes[g.name]
            over += _over(p, f"runtime_bytes of runtime {g.name}", size, b.runtime_bytes, f"{size:,}")
            ms = latency[p.name][g.name]["median_ms"]
            over += _over(p, f"latency_ms on runtime {g.name}", ms, b.latency_ms, f"{ms:.3f}")
    if over:
        raise ReleaseError(f"release {release.dist_name}: over budget: " + "; ".join(over))
