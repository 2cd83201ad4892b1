"""Selective build: ship, per product, only the kernels its programs call.

    selection = collect("build/mlp/mlp.pte", "build/mlp/lowered.unplanned")   # what the program needs
    check_allowed(selection, recipe_allow, "recipes/mlp.yaml:14:3", base_dir="recipes")
    Path("selected_operators.yaml").write_text(selected_operators_yaml(selection))  # for ExecuTorch
    runtime = generate_runtime(selection, Path("build/mlp/runtime"), source="recipes/mlp.yaml")
    runtime.total_bytes, full_runtime_bytes()

Torch-free: nothing here imports torch. `etbuild.verify.trimmed` runs a program on the runtime
this writes.
"""

from etbuild.select.allowlist import check_allowed, parse_allowlist
from etbuild.select.codegen import Contents, RuntimeArtifact, RuntimeFile, generate_runtime, write_runtime
from etbuild.select.collect import collect
from etbuild.select.et_yaml import selected_operators_yaml
from etbuild.select.selection import CallSite, OperatorUse, Selection, SourceLocation
from etbuild.select.size import full_runtime_bytes, runtime_size

__all__ = [
    "CallSite",
    "Contents",
    "OperatorUse",
    "RuntimeArtifact",
    "RuntimeFile",
    "Selection",
    "SourceLocation",
    "check_allowed",
    "collect",
    "full_runtime_bytes",
    "generate_runtime",
    "parse_allowlist",
    "runtime_size",
    "selected_operators_yaml",
    "write_runtime",
]
