"""Rebuild after an edit, each build in a fresh process: exactly the edited stage and the ones after it run, and pass.

Every build here is `python -m etbuild.cli build --json` in a new process, so a stage whose inputs are up to date
is not run and the next one loads its handoff from the file (`etbuild.stages.handoff`: a `model.llm` program with
`llm.attention: custom` calls `llama::` operators that only a registered library defines). Each edit changes one
key that one stage reads; the stages after it run because the files they read changed (doit compares contents),
except after `operators`: select checks the allowlist and writes the same files, so verify stays up to date. An edit
of `backends` in a quantized recipe reruns quantize as well (its quantizer mode and `observer: auto` read it).
The default run builds `mlp-int8` (all seven stages) and a custom-attention language model; `-m slow` builds
every recipe kind of `recipes/` the same way.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from etbuild.build.stage_table import STAGES
from tests.llm_support import TINY

REPO = Path(__file__).resolve().parents[3]
RECIPES = REPO / "recipes"

Overlay = dict[str, Any]
XNNPACK: Overlay = {"backends": [{"name": "xnnpack"}]}
PORTABLE: Overlay = {"backends": []}


@dataclass(frozen=True)
class Kind:
    """A recipe (a file of `recipes/`, or a document written here) and the edits of its stage keys."""

    recipe: str | Overlay
    edits: dict[str, Overlay]
    files: tuple[str, ...] = field(default=())  # bases it extends

    def stages(self) -> list[str]:
        return [s for s in STAGES if s != "quantize" or "quantize" in self.edits]


def _common(export: Overlay, lower: Overlay, quantize: Overlay | None = None, verify: Overlay | None = None
            ) -> dict[str, Overlay]:
    """One edit per stage: `export`, `quantize` and `lower` per kind, the rest the same for every recipe."""
    # The plan edit must move a tensor in every kind's plan: at 4096 the 8da4w transformer's two 128 KiB
    # tensors keep their offsets, its plan.json is unchanged and rightly nothing after plan runs.
    edits = {"export": export, **({"quantize": quantize} if quantize else {}), "lower": lower,
             "plan": {"memory": {"alignment": 1 << 20}}, "emit": {"emit": {"weights": "external"}},
             "select": {"operators": {"allow": ["*"]}}, "verify": verify or {"verify": {"atol": 2.0e-4}}}
    return edits


MLP_EXPORT = {"model": {"kwargs": {"sizes": [784, 256, 128, 10]}}}
CALIBRATION = {"quantize": {"calibration": {"seed": 1}}}
LLM: Overlay = {
    "name": "tiny-llm",
    "model": {"llm": {"config": TINY, "max_context": 32, "max_prefill": 4}},
    "llm": {"attention": "custom", "metadata": {"bos": 1, "eos": [2]}},
    "verify": {"tokens": 8},
}
LLM_EDITS = _common({"model": {"llm": {"max_context": 24}}}, XNNPACK, verify={"verify": {"tokens": 6}})

KINDS = {
    "portable": Kind("mlp.yaml", _common(MLP_EXPORT, XNNPACK)),
    "quantized": Kind("mlp-int8.yaml", _common(MLP_EXPORT, XNNPACK, CALIBRATION), ("mlp.yaml",)),
    "xnnpack-float": Kind("mlp-xnnpack.yaml", _common(MLP_EXPORT, PORTABLE)),
    "xnnpack-int8": Kind("mlp-int8-xnnpack.yaml", _common(MLP_EXPORT, PORTABLE, CALIBRATION),
                         ("mlp-int8.yaml", "mlp.yaml")),
    "xnnpack-8da4w": Kind("transformer-int4.yaml", _common(
        {"model": {"kwargs": {"ffn": 512}}}, {"backends": [{"name": "xnnpack", "options": {"decompose": False}}]},
        {"quantize": {"group_size": 64}}), ("transformer.yaml",)),
    "multi-method": Kind("two-method.yaml", _common({"model": {"kwargs": {"hidden": 48}}}, XNNPACK)),
    "stateful": Kind("stateful.yaml", {stage: edit for stage, edit in _common(
        {"model": {"kwargs": {"features": 8}, "inputs": [{"shape": [4, 8], "dtype": "float32"}]}}, XNNPACK).items()
        if stage != "emit"}),  # no constants: `weights: external` writes the same .pte
    "shared-state": Kind("lm.yaml", _common({"model": {"kwargs": {"hidden": 128}}}, XNNPACK)),
    "llm-portable": Kind({**LLM, "llm": {"attention": "portable"}}, LLM_EDITS),
    "llm-custom": Kind(LLM, LLM_EDITS),
}
"""Every recipe kind: portable, quantized, XNNPACK float / int8 / 8da4w, two methods, state, shared state, model.llm."""


def merged(base: Any, overlay: Any) -> Any:
    """`overlay` deep-merged onto `base` (mappings key by key; anything else replaces)."""
    if not (isinstance(base, dict) and isinstance(overlay, dict)):
        return copy.deepcopy(overlay)
    out = dict(base)
    for key, value in overlay.items():
        out[key] = merged(base.get(key), value) if key in base else copy.deepcopy(value)
    return out


class Product:
    """A recipe file in a scratch folder, edited key by key and built by the CLI in a fresh process each time."""

    def __init__(self, root: Path, kind: Kind) -> None:
        self.root = root
        if isinstance(kind.recipe, str):
            for name in (kind.recipe, *kind.files):
                shutil.copy(RECIPES / name, root / name)
            self.path = root / kind.recipe
        else:
            self.path = root / "llm.yaml"
            self.path.write_text(yaml.safe_dump(kind.recipe, sort_keys=False))

    def edit(self, overlay: Overlay) -> None:
        self.path.write_text(yaml.safe_dump(merged(yaml.safe_load(self.path.read_text()), overlay), sort_keys=False))

    def build(self) -> list[str]:
        """Build in a new process; the stages that ran (each must have passed)."""
        proc = subprocess.run([sys.executable, "-m", "etbuild.cli", "build", str(self.path), "--json",
                               "--build-dir", str(self.root / "build")], cwd=self.root, capture_output=True,
                              text=True, timeout=1800)
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        failed = [e for e in events if e["event"] in ("fail", "blocked")]
        assert proc.returncode == 0 and not failed, (failed, proc.stderr[-3000:])
        ended = {e["stage"] for e in events if e["event"] == "end"}
        started = [e["stage"] for e in events if e["event"] == "start"]
        assert set(started) == ended, (started, ended)
        return started


def check_rebuilds(root: Path, kind: Kind, stages: list[str]) -> None:
    """Build, then per stage in `stages` edit its key and rebuild: that stage and the ones after it ran."""
    product = Product(root, kind)
    order = kind.stages()
    assert product.build() == order
    assert product.build() == []  # nothing changed: nothing runs
    for stage in stages:
        product.edit(kind.edits[stage])
        first = "quantize" if stage == "lower" and "quantize" in order else stage  # quantize reads `backends` too
        expected = ["select"] if stage == "select" else order[order.index(first):]
        assert product.build() == expected, f"after an edit of the {stage} key"


def test_each_stage_edit_reruns_that_stage_and_the_ones_after_it(tmp_path):
    kind = KINDS["quantized"]
    check_rebuilds(tmp_path, kind, list(reversed(kind.stages())))


def test_a_custom_attention_language_model_rebuilds_after_export_in_a_new_process(tmp_path):
    """Lower loads the export handoff, which calls `llama::update_cache`, in a process that never exported."""
    check_rebuilds(tmp_path, KINDS["llm-custom"], ["lower"])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_recipe_kind_rebuilds_after_an_edit_of_each_stage(tmp_path, name):
    kind = KINDS[name]
    check_rebuilds(tmp_path, kind, [stage for stage in reversed(kind.stages()) if stage in kind.edits])
