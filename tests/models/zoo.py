"""The real-model tier: small randomly initialised architectures from torchvision, timm and transformers.

One definition for the tests (`tests/models/`) and the benchmark (`benchmarks/real_models.py`).
`ARCHITECTURES` maps a name to its factory (a function of this file, so a recipe names it as
`factory: <this file>:<name>`), its inputs in recipe form and the library it comes from.
Nothing is downloaded: every model is built from a configuration with random weights (torch
seeded by the recipe), and every batch norm gets non-trivial running statistics so that
folding them into convolutions is tested.

torchvision's wheel may not load its C extension beside a CPU-only torch; its import then
stops on a fake-kernel registration for `torchvision::nms`. Its model code is pure Python, so
`_torchvision_without_ops` defines the two schemas that import needs first (timm and
transformers import torchvision when it is installed, so this runs on import of this file).
torchaudio has no wheel for torch 2.13 (docs/models.md): `wav2letter` is torchaudio's
`Wav2Letter` defined here, in its shape at smaller widths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

_KEEP: list[Any] = []


def _torchvision_without_ops() -> None:
    """Let `import torchvision` succeed when its C extension cannot load (pure-Python models only)."""
    try:
        torch.ops.torchvision.nms  # noqa: B018  (present when the extension loaded)
    except (AttributeError, RuntimeError):
        lib = torch.library.Library("torchvision", "FRAGMENT")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _KEEP.append(lib)


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


def random_batch_norms(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial BatchNorm statistics and affine parameters, so that folding them is tested."""
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


def albert() -> torch.nn.Module:
    from transformers import AlbertConfig, AlbertModel

    cfg = AlbertConfig(**TEXT, embedding_size=32)
    return Outputs(AlbertModel(cfg), ("last_hidden_state",), "input_ids")


def deberta() -> torch.nn.Module:
    from transformers import DebertaV2Config, DebertaV2Model

    cfg = DebertaV2Config(**TEXT, relative_attention=True, position_buckets=16, pos_att_type=["p2c", "c2p"])
    return Outputs(DebertaV2Model(cfg), ("last_hidden_state",), "input_ids")


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=2048, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    return Outputs(GPT2LMHeadModel(cfg), ("logits",), "input_ids")


def llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    return Outputs(LlamaForCausalLM(LlamaConfig(**TEXT, num_key_value_heads=2)), ("logits",), "input_ids")


def qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**TEXT, num_key_value_heads=2, tie_word_embeddings=True)
    return Outputs(Qwen2ForCausalLM(cfg), ("logits",), "input_ids")


def mistral() -> torch.nn.Module:
    from transformers import MistralConfig, MistralForCausalLM

    return Outputs(MistralForCausalLM(MistralConfig(**TEXT, num_key_value_heads=2, sliding_window=8)), ("logits",),
                   "input_ids")


def gemma() -> torch.nn.Module:
    from transformers import GemmaConfig, GemmaForCausalLM

    cfg = GemmaConfig(**TEXT, num_key_value_heads=1, head_dim=16)
    return Outputs(GemmaForCausalLM(cfg), ("logits",), "input_ids")


def phi() -> torch.nn.Module:
    from transformers import PhiConfig, PhiForCausalLM

    return Outputs(PhiForCausalLM(PhiConfig(**TEXT, partial_rotary_factor=0.5)), ("logits",), "input_ids")


def opt() -> torch.nn.Module:
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=96,
                    max_position_embeddings=64, word_embed_proj_dim=64)
    return Outputs(OPTForCausalLM(cfg), ("logits",), "input_ids")


def bloom() -> torch.nn.Module:
    from transformers import BloomConfig, BloomForCausalLM

    cfg = BloomConfig(vocab_size=512, hidden_size=64, n_layer=2, n_head=4)
    return Outputs(BloomForCausalLM(cfg), ("logits",), "input_ids")


def t5() -> torch.nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4,
                   decoder_start_token_id=0)
    return Outputs(T5ForConditionalGeneration(cfg), ("logits",), "input_ids", "decoder_input_ids")


def bart() -> torch.nn.Module:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=512, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=64)
    return Outputs(BartForConditionalGeneration(cfg), ("logits",), "input_ids", "decoder_input_ids")


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


def clip_vision() -> torch.nn.Module:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    cfg = CLIPVisionConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8)
    return Outputs(CLIPVisionModel(cfg), ("pooler_output",), "pixel_values")


def segformer() -> torch.nn.Module:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    cfg = SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[16, 32],
                          num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=4,
                          patch_sizes=[7, 3], strides=[4, 2])
    return random_batch_norms(Outputs(SegformerForSemanticSegmentation(cfg), ("logits",), "pixel_values"))


# ------------------------------------------------------------------ timm


def _timm(name: str, **kwargs: Any) -> torch.nn.Module:
    import timm

    return random_batch_norms(timm.create_model(name, pretrained=False, num_classes=10, **kwargs))


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


def ghostnet() -> torch.nn.Module:
    return _timm("ghostnet_050")


def mixer() -> torch.nn.Module:
    from timm.models.mlp_mixer import MlpMixer

    return MlpMixer(num_classes=10, img_size=64, patch_size=16, num_blocks=2, embed_dim=64)


# ------------------------------------------------------------------ torchvision


def tv_mobilenet_v2() -> torch.nn.Module:
    from torchvision.models import mobilenet_v2

    return random_batch_norms(mobilenet_v2(num_classes=10))


def tv_resnet18() -> torch.nn.Module:
    from torchvision.models import resnet18

    return random_batch_norms(resnet18(num_classes=10))


def tv_shufflenet() -> torch.nn.Module:
    from torchvision.models import shufflenet_v2_x0_5

    return random_batch_norms(shufflenet_v2_x0_5(num_classes=10))


def tv_squeezenet() -> torch.nn.Module:
    from torchvision.models import squeezenet1_1

    return squeezenet1_1(num_classes=10)


def tv_mnasnet() -> torch.nn.Module:
    from torchvision.models import mnasnet0_5

    return random_batch_norms(mnasnet0_5(num_classes=10))


def tv_googlenet() -> torch.nn.Module:
    from torchvision.models import GoogLeNet

    return random_batch_norms(GoogLeNet(num_classes=10, aux_logits=False, init_weights=True))


def tv_densenet() -> torch.nn.Module:
    from torchvision.models import DenseNet

    return random_batch_norms(DenseNet(growth_rate=12, block_config=(2, 2, 2), num_init_features=16, num_classes=10))


def tv_vit() -> torch.nn.Module:
    """torchvision's ViT: its classifier head is zero-initialised, so every output is 0."""
    from torchvision.models import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=96,
                             num_classes=10)


def tv_convnext() -> torch.nn.Module:
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    blocks = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)]
    return ConvNeXt(blocks, num_classes=10)


def tv_swin() -> torch.nn.Module:
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=[4, 4],
                           num_classes=10)


def tv_regnet() -> torch.nn.Module:
    from torchvision.models import regnet_y_400mf

    return random_batch_norms(regnet_y_400mf(num_classes=10))


def tv_efficientnet_v2() -> torch.nn.Module:
    from torchvision.models.efficientnet import EfficientNet, FusedMBConvConfig, MBConvConfig

    blocks = [FusedMBConvConfig(1, 3, 1, 16, 16, 1), FusedMBConvConfig(4, 3, 2, 16, 24, 1),
              MBConvConfig(4, 3, 2, 24, 32, 1.0, 1.0)]
    return random_batch_norms(EfficientNet(blocks, dropout=0.2, num_classes=10, last_channel=64))


def tv_lraspp() -> torch.nn.Module:
    """LR-ASPP on MobileNetV3-Large: bilinear upsampling and a sigmoid-gated head; its `out` map."""
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    model = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=4)
    return random_batch_norms(Picked(model, "out"))


class Picked(torch.nn.Module):
    """A model returning a dict, called for one of its entries."""

    def __init__(self, model: torch.nn.Module, key: str) -> None:
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[self.key]  # type: ignore[no-any-return]


# ------------------------------------------------------------------ torchaudio's Wav2Letter, defined here


class Wav2Letter(torch.nn.Module):
    """torchaudio's `Wav2Letter` (input_type "mfcc") with every width scaled by `width / 250`:
    a stack of Conv1d + ReLU over [batch, features, frames] (a kernel-48 stride-2 input layer,
    seven kernel-7 layers, a kernel-32 layer, two 1x1 layers), then log_softmax over the classes."""

    def __init__(self, num_classes: int = 40, num_features: int = 13, width: int = 250, wide: int = 2000) -> None:
        super().__init__()
        layers: list[tuple[int, int, int, int, int]] = [(num_features, width, 48, 2, 23)]
        layers += [(width, width, 7, 1, 3)] * 7
        layers += [(width, wide, 32, 1, 16), (wide, wide, 1, 1, 0), (wide, num_classes, 1, 1, 0)]
        modules: list[torch.nn.Module] = []
        for cin, cout, kernel, stride, padding in layers:
            modules += [torch.nn.Conv1d(cin, cout, kernel, stride, padding), torch.nn.ReLU(inplace=True)]
        self.acoustic_model = torch.nn.Sequential(*modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.log_softmax(self.acoustic_model(x), dim=1)


def wav2letter() -> torch.nn.Module:
    return Wav2Letter(num_classes=40, num_features=13, width=64, wide=256)


# ------------------------------------------------------------------ the tier


def tokens(n: int = 16, vocab: int = 512) -> dict[str, Any]:
    """A recipe input: a batch of one sequence of `n` token ids below `vocab`."""
    return {"shape": [1, n], "dtype": "int64", "low": 0, "high": vocab}


def image(size: int = 64) -> dict[str, Any]:
    """A recipe input: one RGB image `size` pixels square."""
    return {"shape": [1, 3, size, size], "dtype": "float32"}


def audio(*shape: int) -> dict[str, Any]:
    """A recipe input: float32 features of `shape`."""
    return {"shape": list(shape), "dtype": "float32"}


@dataclass(frozen=True)
class Architecture:
    """One model of the tier: its factory (a function of this file), its recipe inputs, its library."""

    factory: Callable[[], torch.nn.Module]
    inputs: list[dict[str, Any]]
    library: str
    scheme: str
    """The quantization scheme its family ships with: int8 static for convolutional networks,
    int8 dynamic for encoders (vision transformers included), 8da4w for decoders."""


def _tier() -> dict[str, Architecture]:
    hf, tm, tv = "transformers", "timm", "torchvision"
    table: list[tuple[Callable[[], torch.nn.Module], list[dict[str, Any]], str]] = [
        (bert, [tokens()], hf), (distilbert, [tokens()], hf), (albert, [tokens()], hf), (deberta, [tokens()], hf),
        (gpt2, [tokens(vocab=2048)], hf), (llama, [tokens()], hf), (qwen2, [tokens()], hf),
        (mistral, [tokens()], hf), (gemma, [tokens()], hf), (phi, [tokens()], hf), (opt, [tokens()], hf),
        (bloom, [tokens()], hf), (t5, [tokens(), tokens(8)], hf), (bart, [tokens(), tokens(8)], hf),
        (whisper_encoder, [audio(1, 16, 64)], hf), (wav2vec2, [audio(1, 1600)], hf),
        (clip_vision, [image(32)], hf), (segformer, [image()], hf),
        (vit, [image()], tm), (mobilevit, [image()], tm), (convnextv2, [image()], tm), (mobilenetv4, [image()], tm),
        (efficientnet, [image()], tm), (resnet, [image()], tm), (mobilenetv3, [image()], tm),
        (swin, [image(56)], tm), (levit, [image()], tm), (regnet, [image()], tm), (ghostnet, [image()], tm),
        (mixer, [image()], tm),
        (tv_mobilenet_v2, [image()], tv), (tv_resnet18, [image()], tv), (tv_shufflenet, [image()], tv),
        (tv_squeezenet, [image()], tv), (tv_mnasnet, [image()], tv), (tv_googlenet, [image()], tv),
        (tv_densenet, [image()], tv), (tv_vit, [image(32)], tv), (tv_convnext, [image()], tv),
        (tv_swin, [image(32)], tv), (tv_regnet, [image()], tv), (tv_efficientnet_v2, [image()], tv),
        (tv_lraspp, [image()], tv), (wav2letter, [audio(1, 13, 200)], "torch"),
    ]
    return {f.__name__: Architecture(f, inputs, lib, _family_scheme(f.__name__)) for f, inputs, lib in table}


DECODERS = frozenset({"gpt2", "llama", "qwen2", "mistral", "gemma", "phi", "opt", "bloom"})
ENCODERS = frozenset({"bert", "distilbert", "albert", "deberta", "t5", "bart", "whisper_encoder", "wav2vec2",
                      "clip_vision", "vit", "swin", "levit", "mixer", "tv_vit", "tv_swin"})


def _family_scheme(name: str) -> str:
    if name in DECODERS:
        return "int8-dynamic-int4-weight"
    return "int8-dynamic" if name in ENCODERS else "int8-static"


ARCHITECTURES: dict[str, Architecture] = _tier()


def write_recipe(name: str, root: Path, *, quantized: bool = False, xnnpack: bool = False) -> Path:
    """A recipe file in `root` for architecture `name`, whose factory is this file's function of that
    name; `quantized` adds its family's scheme (static: 16 calibration samples), `xnnpack` the XNNPACK backend."""
    model = {"factory": f"{Path(__file__).resolve()}:{name}", "inputs": ARCHITECTURES[name].inputs}
    stem = name.replace("_", "-") + ("-q" if quantized else "") + ("-xnnpack" if xnnpack else "")
    recipe: dict[str, Any] = {"name": stem, "model": model}
    if quantized:
        scheme = ARCHITECTURES[name].scheme
        if scheme == "int8-dynamic-int4-weight" and not xnnpack:
            scheme = "int8-dynamic"  # int4 linear weights run only inside the XNNPACK delegate
        calibration = {"calibration": {"samples": 16, "seed": 0}} if scheme == "int8-static" else {}
        recipe["quantize"] = {"scheme": scheme, **calibration}
    if xnnpack:
        recipe["backends"] = [{"name": "xnnpack"}]
    path = root / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path
