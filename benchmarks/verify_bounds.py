"""ExecuTorch's own quantized XNNPACK programs, measured by the check verify makes of ours.

    python benchmarks/verify_bounds.py [NAME[:SCHEME] ...] [--json out.json]

Per architecture of the real-model tier (`tests/models/zoo.py`; default: a CNN and an
encoder or two of each family, with the scheme its family ships with, or `:SCHEME`), in a
fresh process each: ExecuTorch quantizes the model with its `XNNPACKQuantizer` (per-channel
weights; static calibrated on 16 inputs, or dynamic), lowers it with its
`XnnpackPartitioner` and runs the program in its runtime on 8 other inputs. Printed per
model: the program's SNR against its converted model, the converted model's SNR against
float, the converted model recomputed in float64 against itself, and the bound of
`etbuild.quantize.checks.tight` that passes it (`passed_by`: step, float64,
quantization_noise; `-` when none does). This is the evidence for verify's bounds
(docs/quantization.md, "Verification"). Needs the `interop` and `models` extras.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import results  # benchmarks/results.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tier's zoo lives in the tests package

DEFAULT = ("resnet", "tv_mobilenet_v2", "efficientnet", "ghostnet", "bert:int8-static", "bert", "distilbert",
           "vit", "llama:int8-dynamic")
SAMPLES, CALIBRATION = 8, 16


def measure(name: str, scheme: str) -> dict[str, Any]:
    """One architecture under ExecuTorch's quantizer and XNNPACK delegate, by verify's check."""
    import executorch.kernels.quantized  # noqa: F401  (its quantized kernels)
    import numpy as np
    import torch
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime
    from torch.utils._pytree import tree_flatten

    from etbuild.model import build_model, sample_inputs
    from etbuild.quantize import checks
    from etbuild.recipe import load_recipe
    from etbuild.verify import oracle
    from tests.models.zoo import write_recipe

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="verify-bounds-"))
    recipe = load_recipe(write_recipe(name, tmp))
    converted = oracle.quantize_methods(recipe, oracle.export_methods(recipe), scheme, samples=CALIBRATION)["forward"]
    with torch.no_grad():
        lowered = to_edge_transform_and_lower({"forward": converted}, partitioner=[oracle.xnnpack_partitioner()])
        (tmp / "et.pte").write_bytes(lowered.to_executorch().buffer)
    method = Runtime.get().load_program(tmp / "et.pte").load_method("forward")
    samples = sample_inputs(recipe, SAMPLES, 7, "forward")
    model, module = build_model(recipe).eval(), converted.module()

    def flat(outputs: Any) -> list[np.ndarray]:
        return [t.detach().numpy() for t in tree_flatten(outputs)[0]]

    with torch.no_grad():
        outputs = checks.Outputs(
            converted=[flat(module(*s)) for s in samples], converted64=[flat(checks.Float64(module).run(*s))
                                                                         for s in samples],
            actual=[flat(method.execute(list(s))) for s in samples], reference=[flat(model(*s)) for s in samples])
    [first, *_] = checks.tight(outputs, checks.output_steps(converted), 1e-5, 1e-5)
    keys = ("snr_vs_converted_db", "converted_snr_vs_float_db", "converted64_snr_vs_converted_db", "passed_by")
    return {"model": name, "scheme": scheme, **{k: first[k] for k in keys}}


def _in_fresh_process(name: str, scheme: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--one", f"{name}:{scheme}"], capture_output=True, text=True,
                          check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "scheme": scheme, "error": why}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(DEFAULT), help="NAME or NAME:SCHEME")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    results.add_option(parser, "verify-bounds")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(*args.one.split(":", 1))))
        return 0
    from tests.models.zoo import ARCHITECTURES

    rows = []
    print("| model | scheme | program vs converted (dB) | converted vs float (dB) | converted64 vs converted (dB) "
          "| passed by |\n|---|---|---|---|---|---|")
    for item in args.models:
        name, _, scheme = item.partition(":")
        scheme = scheme or ARCHITECTURES[name].scheme
        row = _in_fresh_process(name, scheme)
        rows.append(row)
        if "error" in row:
            print(f"| {name} | {scheme} | error: {row['error']} | | | |", flush=True)
        else:
            print(f"| {name} | {scheme} | {row['snr_vs_converted_db']} | {row['converted_snr_vs_float_db']} | "
                  f"{row['converted64_snr_vs_converted_db']} | {row['passed_by'] or '-'} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        results.save(args.results, rows, title="ExecuTorch's quantized programs against verify's three bounds",
                     notes=[f"{CALIBRATION} calibration inputs, {SAMPLES} other inputs; SNRs in dB"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
