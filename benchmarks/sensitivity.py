"""How much accuracy a float model can keep under int8 at all: its output SNR when only its
weights are rounded, at several bit widths, or perturbed by noise, and ExecuTorch's own int8.

    python benchmarks/sensitivity.py RECIPE ... [--bits 8,10,12,16] [--noise 1e-3,1e-4]

Per recipe, on the recipe's verify samples (`verify.samples`, `verify.seed`), the output SNR
against the float model (dB, over all samples' `forward` outputs) of:
- `wN`: every conv/linear weight rounded per output channel, symmetric, to N bits (nothing else
  quantized: an upper bound of what any N-bit-weight scheme reaches);
- `noise r`: every conv/linear weight plus Gaussian noise of r times that weight's std;
- `executorch int8-static`: ExecuTorch's XNNPACKQuantizer (per channel, calibrated on
  `--calibration` samples of the recipe's inputs) through torchao's pt2e flow, the oracle.
A model whose `w8` or `noise 1e-3` row is already below a recipe's `min_snr_db` cannot meet that
gate with int8 weights, whatever the quantizer.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import results  # benchmarks/results.py (the script's folder is on sys.path)
import torch

from etbuild.model import build_model, sample_inputs
from etbuild.recipe import load_recipe

Samples = list[tuple[torch.Tensor, ...]]


def snr_db(model: Callable[..., torch.Tensor], reference: list[torch.Tensor], samples: Samples) -> float:
    """Output SNR of `model` against the reference outputs over all samples, in dB."""
    with torch.no_grad():
        got = torch.cat([model(*x).flatten() for x in samples])
    want = torch.cat([r.flatten() for r in reference])
    return float(10 * torch.log10(want.square().sum() / (want - got).square().sum().clamp(min=1e-30)))


def with_weights(model: torch.nn.Module, change: Callable[[torch.Tensor], torch.Tensor]) -> torch.nn.Module:
    """A copy of `model` whose conv and linear weights are `change(weight)`."""
    changed = copy.deepcopy(model)
    with torch.no_grad():
        for module in changed.modules():
            if isinstance(module, torch.nn.Conv1d | torch.nn.Conv2d | torch.nn.Linear):
                module.weight.copy_(change(module.weight))
    return changed


def rounded(bits: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Symmetric per-output-channel rounding to `bits` bits."""
    top = 2 ** (bits - 1) - 1

    def change(w: torch.Tensor) -> torch.Tensor:
        scale = w.abs().flatten(1).amax(1).clamp(min=1e-12) / top
        scale = scale.view(-1, *[1] * (w.dim() - 1))
        return torch.round(w / scale).clamp(-top, top) * scale

    return change


def noisy(relative: float, seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Gaussian noise of `relative` times each weight tensor's std, seeded."""
    generator = torch.Generator().manual_seed(seed)
    return lambda w: w + torch.randn(w.shape, generator=generator) * w.std() * relative


def executorch_int8(recipe_path: Path, model: torch.nn.Module, samples: Samples, calibration: int) -> torch.nn.Module:
    """ExecuTorch's XNNPACKQuantizer (static, per channel) on the model, calibrated on recipe inputs."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    recipe = load_recipe(recipe_path)
    graph = torch.export.export(model, samples[0]).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for x in sample_inputs(recipe, calibration, seed=recipe.verify.seed + 1):
            prepared(*x)
    return convert_pt2e(prepared)


def measure(path: Path, bits: list[int], noise: list[float], calibration: int) -> list[tuple[str, float]]:
    """The rows of one recipe: (label, output SNR in dB)."""
    recipe = load_recipe(path)
    model = build_model(recipe).eval()
    samples = sample_inputs(recipe, recipe.verify.samples, recipe.verify.seed)
    with torch.no_grad():
        reference = [model(*x) for x in samples]
    rows = [(f"w{b}", snr_db(with_weights(model, rounded(b)), reference, samples)) for b in bits]
    rows += [(f"noise {r:g}", snr_db(with_weights(model, noisy(r, 0)), reference, samples)) for r in noise]
    try:
        int8 = executorch_int8(path, model, samples, calibration)
        rows.append(("executorch int8-static", snr_db(int8, reference, samples)))
    except ImportError:
        print("executorch is not installed: its row is left out", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="+", type=Path)
    parser.add_argument("--bits", default="8,10,12,16")
    parser.add_argument("--noise", default="1e-3,1e-4")
    parser.add_argument("--calibration", type=int, default=16)
    results.add_option(parser, "sensitivity")
    args = parser.parse_args(argv)
    bits = [int(b) for b in args.bits.split(",")]
    noise = [float(r) for r in args.noise.split(",")]
    print("| recipe | weights | output SNR vs float |\n|---|---|---|")
    rows = []
    for path in args.recipes:
        for label, value in measure(path, bits, noise, args.calibration):
            print(f"| {load_recipe(path).name} | {label} | {value:.1f} dB |")
            rows.append({"recipe": load_recipe(path).name, "weights": label, "snr_db": round(value, 2)})
    if args.results:
        results.save(args.results, rows, title="Output SNR of float models with only their weights rounded or noisy",
                     notes=["wN: every conv/linear weight rounded per channel to N bits; noise r: Gaussian noise of "
                            "r x the weight's std; SNR against float on the recipe's verify samples"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
