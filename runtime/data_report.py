"""What a program asks of data files, and whether given `.ptd` files satisfy it (`etbuild inspect --data`).

The keys a program names are its EXTERNAL constants' keys (listed from the program alone) and the
named data its delegates ask for (known only to the backend, so checked by loading). With data
files, every method is loaded through the one key lookup (etbuild.runtime.data_files): a key
missing, of another type or shape, or of the wrong size is reported with the error that names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from etbuild.errors import EtbuildError
from etbuild.runtime.data_files import is_external
from etbuild.runtime.format import program as fb
from etbuild.runtime.program import Program
from etbuild.runtime.tensor import numpy_dtype


def external_keys(program: fb.Program) -> dict[str, dict[str, Any]]:
    """Each EXTERNAL constant's key with its dtype, shape and the methods that use it."""
    keys: dict[str, dict[str, Any]] = {}
    for plan in program.execution_plan:
        for ev in plan.values:
            t = ev.val
            if isinstance(t, fb.Tensor) and is_external(t) and t.extra_tensor_info is not None:
                key = t.extra_tensor_info.fully_qualified_name or ""
                entry = keys.setdefault(key, {"dtype": _dtype(t.scalar_type), "shape": list(t.sizes), "methods": []})
                if plan.name not in entry["methods"]:
                    entry["methods"].append(plan.name)
    return dict(sorted(keys.items()))


def _dtype(code: int) -> str:
    try:
        return str(numpy_dtype(code))
    except EtbuildError:
        return f"scalar type {code}"


def data_report(pte: str | Path, data: Sequence[str | Path]) -> dict[str, Any]:
    """The program's external keys and, per method, whether the data files satisfy it (the error if not)."""
    program = Program.load(pte)
    report: dict[str, Any] = {"external_keys": external_keys(program.program), "data": [str(p) for p in data]}
    if not data:
        return report
    methods: dict[str, str] = {}
    try:
        loaded = Program.load(pte, data)
    except EtbuildError as exc:
        report.update(methods={}, satisfied=False, error=str(exc))
        return report
    for name in loaded.method_names:
        try:
            loaded.load_method(name)
            methods[name] = "ok"
        except EtbuildError as exc:
            methods[name] = str(exc)
    provided = set(loaded.named_data().files)
    report.update(methods=methods, satisfied=all(v == "ok" for v in methods.values()),
                  unused_keys=len(provided - set(report["external_keys"]) - set(program.named_data().own)))
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as text: one line per external key, then one per method when data files were given."""
    keys = report["external_keys"]
    lines = [f"external keys: {len(keys)}"] + [
        f"  {k}: {v['dtype']} {v['shape']} ({', '.join(v['methods'])})" for k, v in keys.items()]
    if report["data"]:
        verdict = "satisfied" if report["satisfied"] else "NOT satisfied"
        lines.append(f"data files {', '.join(report['data'])}: {verdict}")
        if "error" in report:
            lines.append(f"  {report['error']}")
        lines += [f"  {name}: {status}" for name, status in report["methods"].items()]
    return "\n".join(lines)
