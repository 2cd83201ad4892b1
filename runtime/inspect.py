"""A summary of any `.pte` — ours or ExecuTorch's — without loading kernels or torch."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from etbuild.errors import printable
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import segment_bytes
from etbuild.runtime.program import Program
from etbuild.runtime.tensor import numpy_dtype

DYNAMISM = {0: "static", 1: "dynamic-bound", 2: "dynamic-unbound"}


def _value_summary(plan: fb.ExecutionPlan, i: int) -> dict[str, Any]:
    v = plan.values[i].val
    if isinstance(v, fb.Tensor):
        return {"kind": "tensor", "shape": list(v.sizes), "dtype": str(numpy_dtype(v.scalar_type)),
                "shape_dynamism": DYNAMISM.get(v.shape_dynamism, str(v.shape_dynamism))}
    return {"kind": type(v).__name__ if v is not None else "None"}


def _blob_bytes(program: fb.Program, ref: fb.BackendDelegateDataReference | None) -> int | None:
    """The size of a delegate's processed blob (inline data or a segment); None when it names none."""
    inline = ref is not None and ref.location == fb.DataLocation.INLINE
    table = program.backend_delegate_data if inline else program.segments
    if ref is None or not 0 <= ref.index < len(table):
        return None
    entry = table[ref.index]
    return len(entry.data) if isinstance(entry, fb.BackendDelegateInlineData) else entry.size


def _delegate_summary(program: fb.Program, d: fb.BackendDelegate) -> dict[str, Any]:
    return {"backend": d.id or "", "blob_bytes": _blob_bytes(program, d.processed),
            "location": "inline" if d.processed and d.processed.location == fb.DataLocation.INLINE else "segment"}


def _method_summary(program: fb.Program, plan: fb.ExecutionPlan) -> dict[str, Any]:
    chain = plan.chains[0] if plan.chains else fb.Chain()
    ops: Counter[str] = Counter()
    for ins in chain.instructions:
        call = ins.instr_args
        if isinstance(call, fb.KernelCall) and 0 <= call.op_index < len(plan.operators):
            op = plan.operators[call.op_index]
            ops[f"{op.name}.{op.overload}" if op.overload else str(op.name)] += 1
    return {
        "name": plan.name,
        "inputs": [_value_summary(plan, i) for i in plan.inputs],
        "outputs": [_value_summary(plan, i) for i in plan.outputs],
        "operators": dict(sorted(ops.items())),
        "quantization": quantization(ops) + (" outside delegates" if plan.delegates else ""),
        "instructions": len(chain.instructions),
        "delegates": [_delegate_summary(program, d) for d in plan.delegates],
        "planned_bytes": list(plan.non_const_buffer_sizes[1:]),
    }


_QD = "quantized_decomposed::"


def quantization(operators: Counter[str] | dict[str, int]) -> str:
    """The quantization a method's operators show, for ours and ExecuTorch's programs alike:
    `int8-dynamic` (activations quantized at run time), `int8-static` (by constant parameters),
    `int8-weight-only` (only dequantizing), or `float`; `+ int8/int4 embeddings` when tables are."""
    names = {name.split(".")[0] for name in operators}
    if any(n.startswith(f"{_QD}choose_qparams") for n in names):
        found = "int8-dynamic"
    elif f"{_QD}quantize_per_tensor" in names:
        found = "int8-static"
    elif any(n.startswith(f"{_QD}dequantize") for n in names):
        found = "int8-weight-only"
    else:
        found = "float"
    tables = [bits for op, bits in (("embedding_byte", "int8"), ("embedding_4bit", "int4"), ("embedding_2bit", "int2"))
              if f"{_QD}{op}" in names]
    return found + "".join(f" + {bits} embeddings" for bits in tables)


def describe(path: str | Path) -> dict[str, Any]:
    """Methods, inputs/outputs, operator counts, sizes of one `.pte` file."""
    prog = Program.load(path)
    p = prog.program
    if p.constant_buffer:
        constant_bytes = sum(len(b.storage) for b in p.constant_buffer)
    elif p.constant_segment is not None and p.segments:
        constant_bytes = len(segment_bytes(prog.data, p, prog.header, p.constant_segment.segment_index))
    else:
        constant_bytes = 0
    named = {n.segment_index for n in p.named_data if 0 <= n.segment_index < len(p.segments)}
    return {
        "file": str(path), "file_bytes": Path(path).stat().st_size, "constant_bytes": constant_bytes,
        "named_data": len(p.named_data), "named_data_bytes": sum(p.segments[i].size for i in named),
        "segments": len(p.segments), "methods": [_method_summary(p, plan) for plan in p.execution_plan],
        "selective_build": _select_report(Path(path)), "quantize": _quantize_report(Path(path)),
    }


def _quantize_report(pte: Path) -> dict[str, Any] | None:
    """The recipe's quantization from `quantize.json` beside a built `.pte`, if any: scheme,
    scheme per module, the layers kept float, the .pte bytes against the float program's."""
    report = pte.parent / "quantize.json"
    if not report.is_file():
        return None
    data = json.loads(report.read_text())
    methods = data.get("methods", {})
    return {
        "scheme": data.get("scheme"), "per_channel": data.get("per_channel"),
        "modules": {m: r.get("modules", {}) for m, r in methods.items()},
        "kept_float": {m: [k["module"] for k in r.get("kept_float", [])] for m, r in methods.items()},
        "pte_ratio": data.get("pte_bytes", {}).get("ratio"),
    }


def _select_report(pte: Path) -> dict[str, Any] | None:
    """The select stage's report beside a built `.pte` (build/<recipe>/select.json), if any."""
    report = pte.parent / "select.json"
    if not report.is_file():
        return None
    data = json.loads(report.read_text())
    keys = (
        "runtime_bytes", "runtime_zip_bytes", "full_runtime_bytes", "runtime_fraction", "runtime_features",
        "tensor_dtypes",
    )
    return {k: data[k] for k in keys if k in data}


def _fmt_value(v: dict[str, Any]) -> str:
    if v["kind"] != "tensor":
        return v["kind"]
    dyn = "" if v["shape_dynamism"] == "static" else f" ({v['shape_dynamism']})"
    return f"{v['dtype']}{v['shape']}{dyn}"


def _fmt_bytes(n: int | None) -> str:
    return "out of range" if n is None else f"{n:,} bytes"


def format_description(d: dict[str, Any]) -> str:
    """Human-readable text for `describe`'s result; every string from the file is escaped (see
    etbuild.errors.printable)."""
    return _format(_escaped(d))


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def _format(d: dict[str, Any]) -> str:
    lines = [f"{d['file']}: {d['file_bytes']:,} bytes, constants {d['constant_bytes']:,} bytes, "
             f"{d['segments']} segment(s)"
             + (f", named data {d['named_data']} entries, {d['named_data_bytes']:,} bytes" if d["named_data"] else "")]
    for m in d["methods"]:
        lines.append(f"method {m['name']}: {m['instructions']} instructions, planned arena bytes "
                     f"{', '.join(f'{b:,}' for b in m['planned_bytes']) or '0'}")
        lines += [f"  input  {k}: {_fmt_value(v)}" for k, v in enumerate(m["inputs"])]
        lines += [f"  output {k}: {_fmt_value(v)}" for k, v in enumerate(m["outputs"])]
        lines.append(f"  quantization: {m['quantization']}")
        lines += [f"  {n:>4} x {op}" for op, n in m["operators"].items()]
        lines += [f"  delegate {k}: {d['backend']}, blob {_fmt_bytes(d['blob_bytes'])} ({d['location']})"
                  for k, d in enumerate(m["delegates"])]
    sel = d.get("selective_build")
    if sel:
        lines.append(f"trimmed runtime: {sel['runtime_bytes']:,} bytes ({sel['runtime_fraction']:.1%} of the full "
                     f"runtime's {sel['full_runtime_bytes']:,}), zip {sel['runtime_zip_bytes']:,} bytes")
        if "runtime_features" in sel:
            lines.append(f"  runtime features: {', '.join(sel['runtime_features']) or 'none'}; "
                         f"tensor dtypes: {', '.join(sel['tensor_dtypes'])}")
    lines += _format_quantize(d.get("quantize"))
    return "\n".join(lines)


def _format_quantize(q: dict[str, Any] | None) -> list[str]:
    if not q:
        return []
    weights = "per channel" if q["per_channel"] else "per tensor"
    lines = [f"quantize: scheme {q['scheme']} (weights {weights}), .pte {q['pte_ratio']}x the float program's"]
    for method, modules in q["modules"].items():
        counts = Counter(modules.values())
        kept = q["kept_float"].get(method) or []
        lines.append(f"  {method}: " + ", ".join(f"{n} module(s) {s}" for s, n in sorted(counts.items()))
                     + (f"; kept float by the accuracy fallback: {', '.join(kept)}" if kept else ""))
    return lines
