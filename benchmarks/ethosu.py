"""Ethos-U: etbuild's TOSA → Vela flow against ExecuTorch's Arm flow, per model and target, in one run.

    python benchmarks/ethosu.py [--models cnn,kws,mlp,tv_squeezenet,...] [--targets ethos-u55-128,ethos-u85-256]
                                [--calibration 8] [--samples 8] [--results]

Per model (the zoo's cnn, kws and mlp, and TIER's models of tests/models/zoo.py) and target, both flows
quantize the float model on the same calibration inputs (histogram observers, per-channel int8 weights,
int32 biases: ExecuTorch's EthosUQuantizer with its symmetric config; etbuild's int8-static in the
`npu-int8` mode), partition, lower to TOSA and compile with Vela 5.2.0 (the same flags: the target's
default system config and memory mode). Columns:

- `cpu_ops`: operators left on the CPU in the `.pte`, quantize/dequantize not counted (the same count on
  both programs); `delegates`: EthosUBackend delegates;
- `cycles`, `sram_kib`, `flash_kib`, `macs`: Vela's estimate for the delegates' TOSA graphs (cycles summed,
  SRAM the largest), each graph compiled again here with the same flags; ExecuTorch's graphs come from its
  intermediate artifacts, each matched to its delegate by the blob its compile packs to, byte for byte
  (which also proves Vela deterministic on them); Vela's README: estimates, not measurements;
- `snr_db`: output SNR against the float model on the evaluation samples, each `.pte` run in etbuild's
  runtime with every delegate's TOSA graph in the TOSA reference model (a functional simulation, no NPU);
- `meets`: etbuild's row against ExecuTorch's bar (`judge`); `error`: why a flow could not lower the model.
Needs the `ethos-u` and `interop` extras.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
# this script's own folder first on the path would make `import ethosu` (Vela's package) import this file
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent)]

from benchmarks import results  # noqa: E402
from etbuild import zoo  # noqa: E402
from etbuild.backends.ethos_u.options import EthosUOptions  # noqa: E402
from etbuild.backends.ethos_u.vela import compile_tosa  # noqa: E402
from etbuild.runtime.format.pte import read_program  # noqa: E402

MODELS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "cnn": (lambda: zoo.mobilenet_v2(0.5, 2), (1, 3, 96, 96)),
    "kws": (lambda: zoo.kws_cnn(40, (64, 64, 64), 12), (1, 40, 101)),
    "mlp": (lambda: zoo.mlp(), (1, 784)),
}
TIER = ("tv_squeezenet", "mobilenetv3", "wav2letter")
"""Models of the real-model tier (tests/models/zoo.py, their test configurations): a CNN with
concatenations and ceil-mode pools, one with hardswish and squeeze-excitation gates, and the audio
Wav2Letter (1-D convolutions, log_softmax)."""
ENCODERS = ("tv_vit", "clip_vision", "whisper_encoder")
"""The tier's small transformer encoders (layer norms, attention's batched matmuls and softmax, linear
layers over [B, T, C] values): torchvision's ViT (its zero-initialised classifier head given seeded
random weights, else every output is 0 and no SNR exists), CLIP's vision tower and Whisper's audio
encoder. The token-input encoders (`--models distilbert`) start with an embedding gather, which U55 cannot run."""
DEFAULT_MODELS = ",".join(("cnn", "kws", "mlp", *TIER, *ENCODERS))
Q_OPS = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel")


def model_and_inputs(name: str) -> tuple[torch.nn.Module, Callable[[int, int], list[torch.Tensor]]]:
    """The float model (seeded) and a function (count, seed) → its inputs: the zoo's or the tier's."""
    torch.manual_seed(0)
    if name in MODELS:
        factory, shape = MODELS[name]
        return factory().eval(), lambda count, seed: inputs(shape, count, seed)
    from tests.models.zoo import ARCHITECTURES

    arch = ARCHITECTURES[name]
    spec = arch.inputs[0]
    shape = tuple(spec["shape"])
    if spec["dtype"] == "int64":
        def tokens(count: int, seed: int) -> list[torch.Tensor]:
            g = torch.Generator().manual_seed(seed)
            return [torch.randint(spec["low"], spec["high"], shape, generator=g) for _ in range(count)]

        return arch.factory().eval(), tokens
    model = arch.factory().eval()
    if name == "tv_vit":
        with torch.no_grad():
            model.heads.head.weight.normal_(0, 0.1)
    return model, lambda count, seed: inputs(shape, count, seed)


def inputs(shape: tuple[int, ...], count: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(count)]


def cpu_ops(pte: bytes) -> tuple[int, int]:
    """(operators called outside delegates, quantize/dequantize excluded; delegates) of a `.pte`."""
    program, _ = read_program(pte)
    plan = program.execution_plan[0]
    names = [plan.operators[i.instr_args.op_index].name for c in plan.chains for i in c.instructions
             if type(i.instr_args).__name__ == "KernelCall"]
    return sum(not any(q in n for q in Q_OPS) for n in names), len(plan.delegates)


def snr_db(model: torch.nn.Module, pte: bytes, graphs: list[bytes], target: str, samples: list[torch.Tensor]
           ) -> float:
    """Output SNR against float of the program in etbuild's runtime, every delegate's TOSA graph in the
    reference model: each graph is matched to its delegate by Vela's deterministic output (the packed
    blob of its compile) and handed over in a `.ptd` under the key our runtime looks it up by."""
    from etbuild.backends.ethos_u.format.blob import pack, tosa_key
    from etbuild.runtime.format.ptd import write_ptd
    from etbuild.runtime.program import Program

    named = {tosa_key(pack(compile_tosa(g, EthosUOptions(target)).bin)): (g, None) for g in dict.fromkeys(graphs)}
    signal, noise = 0.0, 0.0
    with tempfile.TemporaryDirectory(prefix="ethosu-bench-") as tmp:
        Path(tmp, "p.pte").write_bytes(pte)
        Path(tmp, "p.ptd").write_bytes(write_ptd(named))
        method = Program.load(Path(tmp, "p.pte"), [Path(tmp, "p.ptd")]).load_method("forward")
        for x in samples:
            got = method(x.numpy())
            wanted = model(x)
            for out, want in zip(got, wanted if isinstance(wanted, (tuple, list)) else (wanted,)):
                want = want.detach().double().numpy()
                signal += float((want**2).sum())
                noise += float(((np.asarray(out, dtype=np.float64).reshape(want.shape) - want) ** 2).sum())
    return round(float(10 * np.log10(signal / max(noise, 1e-30))), 2)


def delegate_graphs(pte: bytes, candidates: list[bytes], target: str) -> list[bytes]:
    """The TOSA graph of each delegate of the program, in delegate order: the candidate whose Vela compile
    packs to exactly the delegate's blob (Vela is deterministic; a folder of intermediates may hold copies)."""
    from etbuild.backends.ethos_u.format.blob import pack
    from etbuild.runtime.delegates import processed_blob

    program, header = read_program(pte)
    packed = {pack(compile_tosa(g, EthosUOptions(target)).bin): g for g in dict.fromkeys(candidates)}
    blobs = [bytes(processed_blob(pte, program, header, d.processed, "delegate"))
             for d in program.execution_plan[0].delegates]
    missing = [k for k, b in enumerate(blobs) if b not in packed]
    if missing:
        raise SystemExit(f"no TOSA graph compiles to delegate(s) {missing} of the program")
    return [packed[b] for b in blobs]


def vela_numbers(graphs: list[bytes], target: str) -> dict[str, Any]:
    reports = [compile_tosa(g, EthosUOptions(target)).report for g in graphs]
    return {"cycles": int(sum(r["cycles_total"] for r in reports)),
            "sram_kib": round(max(r["sram_memory_used"] for r in reports), 2),
            "flash_kib": round(sum(r.get("off_chip_flash_memory_used", 0) + r.get("on_chip_flash_memory_used", 0)
                                   for r in reports), 2),
            "macs": int(sum(r["nn_macs"] for r in reports))}


def ours(model: torch.nn.Module, calibration: list[torch.Tensor], target: str) -> tuple[bytes, list[bytes], Any]:
    from etbuild.backends.ethos_u.format.blob import tosa_key
    from etbuild.pipeline import compile_exported
    from etbuild.quantize import flow
    from etbuild.quantize.modules import SchemeMap
    from etbuild.quantize.schemes import MODES
    from etbuild.recipe import BackendConfig
    from etbuild.runtime.delegates import named_data, processed_blob

    x = (calibration[0],)
    ep = torch.export.export(model, x, strict=False)
    plan = flow.Plan(SchemeMap("int8-static", (), "histogram"), True, mode=MODES["npu-int8"])
    converted = flow.quantize(ep, plan, [(c,) for c in calibration])
    pte = compile_exported({"forward": flow.reexport(converted, x, None)},
                           backends=[BackendConfig("ethos-u", {"target": target})]).pte
    program, header = read_program(pte)
    named = named_data(pte, program, header)
    graphs = [bytes(named[tosa_key(processed_blob(pte, program, header, d.processed, "delegate"))])
              for d in program.execution_plan[0].delegates]
    return pte, graphs, converted


def theirs(model: torch.nn.Module, calibration: list[torch.Tensor], target: str) -> tuple[bytes, list[bytes], Any]:
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from etbuild.quantize.ao import convert_pt2e, prepare_pt2e

    x = (calibration[0],)
    with tempfile.TemporaryDirectory(prefix="et-arm-") as tmp:
        spec = EthosUCompileSpec(target)
        spec.dump_intermediate_artifacts_to(tmp)
        quantizer = EthosUQuantizer(spec).set_global(get_symmetric_quantization_config())
        observed = prepare_pt2e(torch.export.export(model, x, strict=False).module(check_guards=False), quantizer)
        for c in calibration:
            observed(c)
        converted = convert_pt2e(observed)
        edge = to_edge_transform_and_lower(torch.export.export(converted, x, strict=False),
                                           partitioner=[EthosUPartitioner(spec)],
                                           compile_config=EdgeCompileConfig(_check_ir_validity=False))
        pte = edge.to_executorch().buffer
        graphs = [p.read_bytes() for p in sorted(Path(tmp).rglob("*.tosa"))]
    return pte, graphs, converted


def case(name: str, target: str, flow: str, args: argparse.Namespace) -> dict[str, Any]:
    model, make = model_and_inputs(name)
    calibration, samples = make(args.calibration, 0), make(args.samples, 1)
    try:
        pte, candidates, _ = (ours if flow == "etbuild" else theirs)(model, calibration, target)
    except Exception as exc:  # a flow that cannot lower the model: its row says why
        row = {"model": name, "target": target, "flow": flow, "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(row, flush=True)
        return row
    graphs = delegate_graphs(pte, candidates, target)
    ops, delegates = cpu_ops(pte)
    row: dict[str, Any] = {"model": name, "target": target, "flow": flow, "cpu_ops": ops, "delegates": delegates}
    row.update(vela_numbers(graphs, target) if graphs else {})
    row["snr_db"] = snr_db(model, pte, graphs, target, samples)
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--targets", default="ethos-u55-128,ethos-u85-256")
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    results.add_option(parser, "ethosu")
    args = parser.parse_args()
    rows = []
    for m in args.models.split(","):
        for t in args.targets.split(","):
            theirs_row, ours_row = (case(m, t, f, args) for f in ("executorch", "etbuild"))
            ours_row["meets"] = judge(ours_row, theirs_row)
            rows += [theirs_row, ours_row]
    print("\n".join(f"{r['model']:>14} {r['target']:>14}: {r['meets']}" for r in rows if "meets" in r))
    if args.results:
        results.save(args.results, rows, title="Ethos-U: etbuild's TOSA/Vela flow vs ExecuTorch's Arm flow",
                     columns=["model", "target", "flow", "cpu_ops", "delegates", "cycles", "sram_kib", "flash_kib",
                              "macs", "snr_db", "meets", "error"],
                     notes=["cycles/SRAM/flash: Vela 5.2.0's estimate (not measured on hardware)",
                            "snr_db: against the float model, TOSA graphs in the TOSA reference model",
                            "meets: etbuild against ExecuTorch: no more CPU operators, cycles <= 1.05x, "
                            "SRAM <= ExecuTorch's, SNR >= ExecuTorch's - 0.5 dB ('yes', or what is not met)"])


def judge(ours_row: dict[str, Any], theirs_row: dict[str, Any]) -> str:
    """`yes` when etbuild's row meets the bar ExecuTorch's sets, else what it misses."""
    if "error" in ours_row:
        return "etbuild failed"
    if "error" in theirs_row:
        return "yes (ExecuTorch failed)"
    missed = [what for what, ok in (
        ("cpu_ops", ours_row["cpu_ops"] <= theirs_row["cpu_ops"]),
        ("cycles", ours_row.get("cycles", 0) <= 1.05 * theirs_row.get("cycles", 0)),
        ("sram", ours_row.get("sram_kib", 0) <= theirs_row.get("sram_kib", 0)),
        ("snr", ours_row["snr_db"] >= theirs_row["snr_db"] - 0.5),
    ) if not ok]
    return "yes" if not missed else "no: " + ", ".join(missed)


if __name__ == "__main__":
    main()
