"""Real architectures, tried as a new user would: build, verify, run in ExecuTorch, compare sizes.

    python benchmarks/real_models.py [NAME ...] [--keep DIR] [--json out.json]

Each model is a small randomly initialised configuration from the libraries people take
models from (transformers, timm; torchvision's pure-Python models), built from a factory in
this file: no download. Per model it writes a recipe (`factory: <this file>:<name>`) into a
temporary directory, runs `etbuild build` on it (export → … → verify), runs the `.pte` in
ExecuTorch's runtime against our runtime's outputs, builds the same model with ExecuTorch's
own flow and reports both `.pte` sizes. Needs the `interop` extra and `timm`/`transformers`.

torchvision's wheel on PyPI may not load its C extension beside a CPU-only torch; its import
then stops on a fake-kernel registration for `torchvision::nms`. Its model code is pure
Python, so `_torchvision_without_ops` defines the two schemas that import needs first.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve()


def _torchvision_without_ops() -> None:
    """Let `import torchvision` succeed when its C extension cannot load (pure-Python models only).

    transformers imports torchvision when it is installed, so this runs on import of this file.
    """
    try:
        torch.ops.torchvision.nms  # noqa: B018  (present when the extension loaded)
    except (AttributeError, RuntimeError):
        lib = torch.library.Library("torchvision", "FRAGMENT")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _KEEP.append(lib)


_KEEP: list[Any] = []
_torchvision_without_ops()


class Outputs(torch.nn.Module):
    """A Hugging Face model called with its inputs as keywords, returning the named output tensors."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...], *keywords: str) -> None:
        super().__init__()
        self.model, self.names, self.keywords = model, names, keywords
        self.extra = {"use_cache": False} if getattr(model.config, "use_cache", False) else {}

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(**dict(zip(self.keywords, args)), **self.extra)
        return tuple(out[n] for n in self.names)


def _random_batch_norms(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial BatchNorm statistics, so that folding them into convolutions is tested."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
            if m.weight is not None:
                m.weight.data.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.data.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model


# ------------------------------------------------------------------ transformers

TEXT = {"vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 96, "max_position_embeddings": 64}


def bert() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    return Outputs(BertModel(BertConfig(**TEXT)), ("last_hidden_state", "pooler_output"), "input_ids")


def distilbert() -> torch.nn.Module:
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    cfg = DistilBertConfig(vocab_size=512, dim=64, n_layers=2, n_heads=4, hidden_dim=96, max_position_embeddings=64)
    return Outputs(DistilBertForSequenceClassification(cfg), ("logits",), "input_ids")


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=2048, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    return Outputs(GPT2LMHeadModel(cfg), ("logits",), "input_ids")


def llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**TEXT, num_key_value_heads=2)
    return Outputs(LlamaForCausalLM(cfg), ("logits",), "input_ids")


def qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**TEXT, num_key_value_heads=2, tie_word_embeddings=True)
    return Outputs(Qwen2ForCausalLM(cfg), ("logits",), "input_ids")


def t5() -> torch.nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4,
                   decoder_start_token_id=0)
    return Outputs(T5ForConditionalGeneration(cfg), ("logits",), "input_ids", "decoder_input_ids")


def whisper_encoder() -> torch.nn.Module:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=96,
                        num_mel_bins=16, max_source_positions=32)
    return Outputs(WhisperEncoder(cfg), ("last_hidden_state",), "input_features")


def wav2vec2() -> torch.nn.Module:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                         conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    return Outputs(Wav2Vec2Model(cfg), ("last_hidden_state",), "input_values")


# ------------------------------------------------------------------ timm, torchvision


def _timm(name: str, **kwargs: Any) -> torch.nn.Module:
    import timm

    return _random_batch_norms(timm.create_model(name, pretrained=False, num_classes=10, **kwargs))


def vit() -> torch.nn.Module:
    return _timm("vit_tiny_patch16_224", img_size=64, depth=4)


def mobilevit() -> torch.nn.Module:
    return _timm("mobilevit_xxs")


def convnextv2() -> torch.nn.Module:
    return _timm("convnextv2_atto")


def mobilenetv4() -> torch.nn.Module:
    return _timm("mobilenetv4_conv_small")


def efficientnet() -> torch.nn.Module:
    return _timm("efficientnet_b0")


def resnet() -> torch.nn.Module:
    return _timm("resnet18")


def mobilenetv3() -> torch.nn.Module:
    return _timm("mobilenetv3_small_100")


def swin() -> torch.nn.Module:
    return _timm("swin_tiny_patch4_window7_224", img_size=56, depths=(1, 1), num_heads=(2, 4), embed_dim=32,
                 window_size=7)


def levit() -> torch.nn.Module:
    return _timm("levit_128s", img_size=64)


def regnet() -> torch.nn.Module:
    return _timm("regnetx_002")


def deberta() -> torch.nn.Module:
    from transformers import DebertaV2Config, DebertaV2Model

    cfg = DebertaV2Config(**TEXT, relative_attention=True, position_buckets=16, pos_att_type=["p2c", "c2p"])
    return Outputs(DebertaV2Model(cfg), ("last_hidden_state",), "input_ids")


def bart() -> torch.nn.Module:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=512, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=64)
    return Outputs(BartForConditionalGeneration(cfg), ("logits",), "input_ids", "decoder_input_ids")


def mistral() -> torch.nn.Module:
    from transformers import MistralConfig, MistralForCausalLM

    return Outputs(MistralForCausalLM(MistralConfig(**TEXT, num_key_value_heads=2, sliding_window=8)), ("logits",),
                   "input_ids")


def clip_vision() -> torch.nn.Module:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    cfg = CLIPVisionConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8)
    return Outputs(CLIPVisionModel(cfg), ("pooler_output",), "pixel_values")


def tv_mobilenet_v2() -> torch.nn.Module:
    from torchvision.models import mobilenet_v2

    return _random_batch_norms(mobilenet_v2(num_classes=10))


def tokens(n: int = 16, vocab: int = 512) -> dict[str, Any]:
    return {"shape": [1, n], "dtype": "int64", "low": 0, "high": vocab}


def image(size: int = 64) -> dict[str, Any]:
    return {"shape": [1, 3, size, size], "dtype": "float32"}


# name → (factory, inputs)
MODELS: dict[str, tuple[Callable[[], torch.nn.Module], list[dict[str, Any]]]] = {
    "bert": (bert, [tokens()]),
    "distilbert": (distilbert, [tokens()]),
    "gpt2": (gpt2, [tokens(vocab=2048)]),
    "llama": (llama, [tokens()]),
    "qwen2": (qwen2, [tokens()]),
    "t5": (t5, [tokens(), tokens(8)]),
    "whisper_encoder": (whisper_encoder, [{"shape": [1, 16, 64], "dtype": "float32"}]),
    "wav2vec2": (wav2vec2, [{"shape": [1, 1600], "dtype": "float32"}]),
    "vit": (vit, [image()]),
    "mobilevit": (mobilevit, [image()]),
    "convnextv2": (convnextv2, [image()]),
    "mobilenetv4": (mobilenetv4, [image()]),
    "efficientnet": (efficientnet, [image()]),
    "resnet": (resnet, [image()]),
    "mobilenetv3": (mobilenetv3, [image()]),
    "tv_mobilenet_v2": (tv_mobilenet_v2, [image()]),
    # beyond the list the issue names: more of what users bring
    "swin": (swin, [image(56)]),
    "levit": (levit, [image()]),
    "regnet": (regnet, [image()]),
    "deberta": (deberta, [tokens()]),
    "bart": (bart, [tokens(), tokens(8)]),
    "mistral": (mistral, [tokens()]),
    "clip_vision": (clip_vision, [image(32)]),
}


# ------------------------------------------------------------------ the probe


@dataclass
class Result:
    """One model's row of the report."""

    name: str
    builds: bool = False
    verifies: bool = False
    runs_in_executorch: bool | None = None
    max_diff_executorch: float | None = None
    pte_bytes: int | None = None
    executorch_pte_bytes: int | None = None
    error: str = ""


def write_recipe(name: str, root: Path) -> Path:
    """A recipe for model `name` whose factory is this file."""
    import yaml

    _, inputs = MODELS[name]
    recipe = {"name": name.replace("_", "-"), "model": {"factory": f"{HERE}:{MODELS[name][0].__name__}",
                                                        "inputs": inputs}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def probe(name: str, root: Path) -> Result:
    from etbuild.build import build
    from etbuild.recipe import load_recipe

    result = Result(name)
    recipe = load_recipe(write_recipe(name, root))
    built = build([recipe.path], root / "build", stream=io.StringIO())
    pte = root / "build" / recipe.name / f"{recipe.name}.pte"
    result.builds = pte.exists()
    result.verifies = built.exit_code == 0
    result.error = "; ".join(built.failed.values())
    if result.builds:
        result.pte_bytes = pte.stat().st_size
        _compare_in_executorch(recipe, pte, result)
    _executorch_size(recipe, root / f"{name}.executorch.pte", result)
    return result


def _compare_in_executorch(recipe: Any, pte: Path, result: Result) -> None:
    from executorch.runtime import Runtime

    from etbuild.model import sample_inputs
    from etbuild.runtime import Program

    sample = sample_inputs(recipe, 1, 7)[0]
    ours = Program.load(pte).load_method("forward")(*[t.numpy() for t in sample])
    try:
        theirs = Runtime.get().load_program(pte).load_method("forward").execute(list(sample))
    except Exception as exc:  # ExecuTorch's runtime: any failure is the finding
        result.runs_in_executorch = False
        result.error += f" executorch: {type(exc).__name__}: {exc}"
        return
    diffs = [float(np.max(np.abs(np.asarray(a) - t.numpy()), initial=0.0)) for a, t in zip(ours, theirs)]
    result.runs_in_executorch = True
    result.max_diff_executorch = max(diffs, default=0.0)


def _executorch_size(recipe: Any, path: Path, result: Result) -> None:
    from etbuild.oracle import executorch_build

    try:
        result.executorch_pte_bytes = executorch_build(recipe, path).path.stat().st_size
    except Exception as exc:  # ExecuTorch's own flow: any failure is reported, not ours to fix
        result.error += f" executorch build: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def table(results: list[Result]) -> str:
    head = f"{'model':16} {'builds':6} {'verif':6} {'in ET':6} {'ET diff':9} {'ours B':>9} {'ET B':>9} {'ratio':>6}"
    rows = [head]
    for r in results:
        ratio = f"{r.pte_bytes / r.executorch_pte_bytes:.3f}" if r.pte_bytes and r.executorch_pte_bytes else "-"
        diff = f"{r.max_diff_executorch:.1e}" if r.max_diff_executorch is not None else "-"
        rows.append(f"{r.name:16} {r.builds!s:6} {r.verifies!s:6} {r.runs_in_executorch!s:6} {diff:9} "
                    f"{r.pte_bytes or '-':>9} {r.executorch_pte_bytes or '-':>9} {ratio:>6}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[[], *MODELS], default=[])
    parser.add_argument("--keep", type=Path, help="build here instead of a temporary directory")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = args.names or list(MODELS)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        results = []
        for name in names:
            try:
                results.append(probe(name, root))
            except Exception:  # a probe crash is a finding to report, the next model still runs
                results.append(Result(name, error=traceback.format_exc(limit=-3)))
            print(table(results[-1:]).splitlines()[1], results[-1].error[:300], flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0 if all(r.verifies and r.runs_in_executorch for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
