"""Example models that recipes name as `etbuild.zoo:<callable>`.

Each is a plain factory returning an `nn.Module` built from standard layers, so that the set of
operators each one exports to is predictable (`tests/etbuild/test_zoo.py` lists them per recipe).
Initialization draws from torch's global RNG, which `etbuild.model.build_model` seeds with
`model.seed` first; nothing is downloaded. AOT side: imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

import torch
from torch import nn

# ---------------------------------------------------------------------------- helpers


def _randomize_norms(module: nn.Module) -> None:
    """Give every batch norm non-trivial affine parameters and running statistics.

    Freshly built, an eval-mode BatchNorm is y = x / sqrt(1 + eps): a kernel that ignored its
    mean, variance, weight or bias would still verify. Random "trained-looking" values make
    each of the five inputs count. Draws from torch's global RNG (seeded by build_model).
    """
    kinds = nn.BatchNorm1d | nn.BatchNorm2d | nn.BatchNorm3d
    norms = [m for m in module.modules() if isinstance(m, kinds)]
    with torch.no_grad():
        for norm in norms:
            if norm.affine:
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.normal_(0.0, 0.1)
            if norm.running_mean is not None and norm.running_var is not None:
                norm.running_mean.normal_(0.0, 0.1)
                norm.running_var.uniform_(0.5, 1.5)


def _init_convs_he(module: nn.Module) -> None:
    """He-normal (fan-in) initialization of every convolution, biases zero.

    PyTorch's default (uniform, gain 1/sqrt(3)) shrinks activations layer by layer, and
    torchvision's fan-out variant shrinks depthwise layers (their fan-out counts every channel):
    in eval mode, with no batch statistics to renormalize, `mobilenet_v2`'s logits would be
    about 1e-2 and an absolute tolerance of 1e-4 would hide a wrong kernel. Fan-in keeps
    activations of order one (and ReLU6 does clip).
    """
    for conv in module.modules():
        if isinstance(conv, nn.Conv1d | nn.Conv2d):
            nn.init.kaiming_normal_(conv.weight, mode="fan_in", nonlinearity="relu")
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)


def _make_divisible(channels: float, divisor: int = 8) -> int:
    """MobileNet's channel rounding: the nearest multiple of `divisor`, never 10% below."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


# ---------------------------------------------------------------------------- mlp


def mlp(sizes: Sequence[int] = (784, 512, 256, 10)) -> nn.Module:
    """A multilayer perceptron: `Linear(sizes[i], sizes[i + 1])` layers, ReLU between them.

    There is no ReLU after the last layer: it returns logits.
    """
    if len(sizes) < 2:
        raise ValueError(f"mlp needs at least two sizes (inputs and outputs); got {list(sizes)}")
    layers: list[nn.Module] = []
    for n_in, n_out in pairwise(sizes):
        if layers:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


# ---------------------------------------------------------------------------- mobilenet_v2


def _conv_bn_relu6(
    n_in: int, n_out: int, kernel: int = 3, stride: int = 1, groups: int = 1
) -> nn.Sequential:
    """Conv2d (no bias) → BatchNorm2d → ReLU6, padded to keep the size at stride 1."""
    return nn.Sequential(
        nn.Conv2d(n_in, n_out, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(n_out),
        nn.ReLU6(),
    )


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1×1 expand, 3×3 depthwise, 1×1 linear projection, and a residual
    connection when the block keeps both the size (stride 1) and the channel count."""

    def __init__(self, n_in: int, n_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = n_in * expand
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn_relu6(n_in, hidden, kernel=1)]
        layers += [
            _conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, n_out, 1, bias=False),
            nn.BatchNorm2d(n_out),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and n_in == n_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


_MOBILENET_V2_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
"""(expansion, channels, blocks, first stride) per stage, from the MobileNetV2 paper."""


def mobilenet_v2(width: float = 0.5, num_classes: int = 1000) -> nn.Module:
    """A MobileNetV2 image classifier (inverted residuals, depthwise convolutions, ReLU6).

    `width` scales every channel count (rounded to multiples of 8); the last 1×1 convolution
    keeps 1280 channels below width 1, as in the paper. Global average pooling, then a linear
    classifier. Sized for 96×96 RGB inputs (any size divisible by 32 works). Convolutions are
    He-initialized and BatchNorm statistics randomized (see `_init_convs_he`, `_randomize_norms`).
    """
    n_in = _make_divisible(32 * width)
    layers: list[nn.Module] = [_conv_bn_relu6(3, n_in, stride=2)]
    for expand, channels, blocks, stride in _MOBILENET_V2_STAGES:
        n_out = _make_divisible(channels * width)
        for block in range(blocks):
            layers.append(InvertedResidual(n_in, n_out, stride if block == 0 else 1, expand))
            n_in = n_out
    last = _make_divisible(1280 * max(1.0, width))
    layers.append(_conv_bn_relu6(n_in, last, kernel=1))
    model = nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(last, num_classes)
    )
    _init_convs_he(model)
    _randomize_norms(model)
    return model


# ---------------------------------------------------------------------------- transformer_encoder


class SelfAttention(nn.Module):
    """Multi-head self-attention written out: q/k/v projections, softmax(q kᵀ / √d) v, output
    projection. No mask and no dropout. (Not nn.MultiheadAttention or
    scaled_dot_product_attention, whose lowering depends on torch's fused-kernel choices.)"""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
        self.heads, self.head_dim = heads, d_model // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q, self.k, self.v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.out = nn.Linear(d_model, d_model)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, tokens, d_model) → (batch, heads, tokens, head_dim)."""
        batch, tokens, _ = x.shape
        return x.view(batch, tokens, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (
            self.split_heads(self.q(x)),
            self.split_heads(self.k(x)),
            self.split_heads(self.v(x)),
        )
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        mixed = torch.matmul(weights, v).transpose(1, 2)
        return self.out(mixed.reshape(x.shape))


class EncoderLayer(nn.Module):
    """A pre-norm transformer encoder layer: x + attn(ln(x)), then x + ffn(ln(x)) with GELU."""

    def __init__(self, d_model: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(d_model), SelfAttention(d_model, heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, ffn), nn.GELU(), nn.Linear(ffn, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.ffn(self.norm2(x))


def transformer_encoder(
    layers: int = 4, d_model: int = 256, heads: int = 4, ffn: int = 1024
) -> nn.Module:
    """A stack of `layers` pre-norm encoder layers and a final LayerNorm.

    Takes and returns (batch, tokens, d_model) float tensors (embeddings in, features out).
    """
    stack = [EncoderLayer(d_model, heads, ffn) for _ in range(layers)]
    return nn.Sequential(*stack, nn.LayerNorm(d_model))


# ---------------------------------------------------------------------------- kws_cnn


def kws_cnn(
    features: int = 40, channels: Sequence[int] = (64, 64, 64), num_classes: int = 12
) -> nn.Module:
    """A keyword-spotting 1-D CNN over audio features (batch, features, frames).

    Per entry of `channels`: Conv1d (kernel 3, same padding) → BatchNorm1d → ReLU →
    MaxPool1d(2); then the mean over the remaining frames and a linear classifier giving
    `num_classes` logits (e.g. ten keywords, "silence" and "unknown"). Convolutions are
    He-initialized and BatchNorm statistics randomized (see `_init_convs_he`, `_randomize_norms`).
    """
    layers: list[nn.Module] = []
    n_in = features
    for n_out in channels:
        layers += [
            nn.Conv1d(n_in, n_out, 3, padding=1),
            nn.BatchNorm1d(n_out),
            nn.ReLU(),
            nn.MaxPool1d(2),
        ]
        n_in = n_out
    model = nn.Sequential(
        *layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(n_in, num_classes)
    )
    _init_convs_he(model)
    _randomize_norms(model)
    return model


# ---------------------------------------------------------------------------- gru_classifier


class GRUClassifier(nn.Module):
    """An nn.GRU (batch_first) over (batch, steps, features) and a linear head on the last step.

    torch.export keeps `aten.gru.input`; `run_decompositions()` unrolls it into one
    addmm/sigmoid/tanh cell per step and layer (50 steps: about 1,200 nodes).
    """

    def __init__(self, features: int, hidden: int, layers: int, num_classes: int) -> None:
        super().__init__()
        self.gru = nn.GRU(features, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states, _ = self.gru(x)
        return self.head(states[:, -1])


def gru_classifier(
    features: int = 40, hidden: int = 64, layers: int = 1, num_classes: int = 12
) -> nn.Module:
    """A recurrent classifier over feature sequences: see `GRUClassifier`."""
    return GRUClassifier(features, hidden, layers, num_classes)


# ---------------------------------------------------------------------------- cond_model


class CondModel(nn.Module):
    """`torch.cond` on a data-dependent predicate: `x.sum() > 0` picks one of two branches.

    The true branch is relu(a(x)), the false branch tanh(b(x)) * 2; both give a
    (batch, features) float tensor, which a shared linear layer then maps to the output.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.a, self.b, self.head = (
            nn.Linear(features, features),
            nn.Linear(features, features),
            nn.Linear(features, features),
        )

    def positive(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x))

    def negative(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.b(x)) * 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cond(x.sum() > 0, self.positive, self.negative, (x,)))


def cond_model(features: int = 16) -> nn.Module:
    """A model with data-dependent control flow: see `CondModel`."""
    return CondModel(features)


# ---------------------------------------------------------------------------- running_stats


class RunningStats(nn.Module):
    """Mutable state: each call counts itself and folds the batch mean into a running mean.

    Buffers: `count` (int64, shape (1,)), `mean` (float32, shape (features,)). A call does
    `count += 1; mean = 0.9 mean + 0.1 x.mean(0)` in place and returns `(x - mean, count)`, both
    read after the update, so the outputs of call n depend on calls 1..n.
    """

    count: torch.Tensor
    mean: torch.Tensor

    def __init__(self, features: int) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(1, dtype=torch.int64))
        self.register_buffer("mean", torch.zeros(features))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.count.add_(1)
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.mean, self.count.clone()


def running_stats(features: int = 16) -> nn.Module:
    """A stateful model (mutable buffers updated on every call): see `RunningStats`."""
    return RunningStats(features)


# ---------------------------------------------------------------------------- encoder_decoder


class EncoderDecoder(nn.Module):
    """Two methods and no `forward`: `encode(x)` → latent `z`, `decode(z)` → reconstruction.

    Each is a two-layer MLP; `decode` ends in a sigmoid. A recipe exports them through
    `model.methods`.
    """

    def __init__(self, features: int, hidden: int, latent: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, latent)
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, features), nn.Sigmoid()
        )

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, features) → (batch, latent)."""
        return self.encoder(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """(batch, latent) → (batch, features), each in (0, 1)."""
        return self.decoder(z)


def encoder_decoder(features: int = 32, hidden: int = 64, latent: int = 8) -> nn.Module:
    """An autoencoder with separate `encode` and `decode` methods: see `EncoderDecoder`."""
    return EncoderDecoder(features, hidden, latent)


# ---------------------------------------------------------------------------- integer and bool outputs


class EmbedArgmax(nn.Module):
    """int64 token ids (batch, tokens) → Embedding → Linear → argmax: an int64 label per token."""

    def __init__(self, vocab: int, dim: int, num_classes: int) -> None:
        super().__init__()
        self.embed, self.classify = nn.Embedding(vocab, dim), nn.Linear(dim, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.argmax(self.classify(self.embed(tokens)), dim=-1)


def embed_argmax(vocab: int = 1000, dim: int = 64, num_classes: int = 17) -> nn.Module:
    """A per-token tagger with an integer output: see `EmbedArgmax`."""
    return EmbedArgmax(vocab, dim, num_classes)


class CompareWhere(nn.Module):
    """Comparisons, logical ops and `torch.where` over two float inputs and an int64 one.

    forward(a, b, k) with a, b float and k int64 of one shape returns
    `(where(mask, a, 2b), mask, mask.sum(-1))`: float, bool and int64 outputs, where
    `mask = (a > b and not |a - b| < 0.5) or (k >= 5 and a != 0)`. It has no parameters.
    """

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        close = torch.abs(a - b) < 0.5
        clear_win = torch.logical_and(a > b, torch.logical_not(close))
        mask = torch.logical_or(clear_win, torch.logical_and(k >= 5, a != 0))
        return torch.where(mask, a, b * 2.0), mask, mask.sum(-1)


def compare_where() -> nn.Module:
    """A parameter-free model of comparisons and selections: see `CompareWhere`."""
    return CompareWhere()


# ---------------------------------------------------------------------------- tiny_llama


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight, over the last dimension."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding: the two halves of the last dim turned by each position's angle."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


class CachedAttention(nn.Module):
    """Causal multi-head attention over a static KV cache held in two mutable buffers.

    `k_cache`, `v_cache`: (1, heads, max_seq, head_dim), zero at first. A call with the
    queries' positions writes this call's keys and values at those positions
    (`index_copy_`), then attends over the whole cache with the positions after each query
    masked out, so the cache's unwritten tail never counts.
    """

    k_cache: torch.Tensor
    v_cache: torch.Tensor

    def __init__(self, dim: int, heads: int, max_seq: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv, self.out = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        shape = (1, heads, max_seq, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, x: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: (1, tokens, dim); pos: (tokens,) int64 positions; cos, sin: (tokens, head_dim / 2)."""
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        scores = torch.matmul(q, self.k_cache.transpose(-2, -1)) / math.sqrt(self.head_dim)
        keys = torch.arange(self.k_cache.shape[2])
        scores = scores.masked_fill(keys[None, :] > pos[:, None], float("-inf"))
        mixed = torch.matmul(torch.softmax(scores, dim=-1), self.v_cache)
        return self.out(mixed.transpose(1, 2).reshape(batch, tokens, dim))


class DecoderBlock(nn.Module):
    """Pre-norm Llama block: x + attention(norm(x)), then x + SwiGLU(norm(x))."""

    def __init__(self, dim: int, heads: int, hidden: int, max_seq: int) -> None:
        super().__init__()
        self.attention_norm, self.attention = RMSNorm(dim), CachedAttention(dim, heads, max_seq)
        self.ffn_norm = RMSNorm(dim)
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), pos, cos, sin)
        h = self.ffn_norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    """A decoder-only language model with a static KV cache and two methods sharing it.

    `prefill(tokens)`: a prompt (1, n) of int64 token ids, 1 ≤ n ≤ max_seq, written at positions
    0..n-1; returns the (1, vocab) logits after the last token. `decode(token, pos)`: one token
    (1, 1) at position `pos` (shape (1,)); returns its (1, vocab) logits. Greedy generation
    takes the argmax of each call's logits as the next token. Token embedding, RMSNorm, rotary
    positions (cos/sin tables as constant buffers), SwiGLU MLP, an untied output head (tied to
    random embeddings, greedy decoding would mostly repeat the last token).
    """

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, hidden: int, max_seq: int) -> None:
        super().__init__()
        if dim % heads or (dim // heads) % 2:
            raise ValueError(f"dim ({dim}) must split into {heads} heads of an even size")
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads, hidden, max_seq) for _ in range(layers))
        self.norm, self.head = RMSNorm(dim), nn.Linear(dim, vocab, bias=False)
        half = dim // heads // 2
        angles = torch.outer(torch.arange(max_seq).float(), 10000.0 ** (-torch.arange(half).float() / half))
        self.register_buffer("cos", torch.cos(angles), persistent=False)
        self.register_buffer("sin", torch.sin(angles), persistent=False)

    def logits(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The next-token logits (1, vocab) after the last of `tokens`, placed at `pos`."""
        x = self.embed(tokens)
        cos, sin = self.cos[pos], self.sin[pos]
        for block in self.blocks:
            x = block(x, pos, cos, sin)
        return self.head(self.norm(x[:, -1]))

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Start a sequence: the prompt at positions 0..n-1; the logits after its last token."""
        return self.logits(tokens, torch.arange(tokens.shape[1]))

    def decode(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One more token at position `pos`; the logits after it."""
        return self.logits(token, pos)


def tiny_llama(
    vocab: int = 256, dim: int = 64, layers: int = 2, heads: int = 4, hidden: int = 172, max_seq: int = 96
) -> nn.Module:
    """A small Llama-style language model with prefill and decode methods: see `TinyLlama`."""
    return TinyLlama(vocab, dim, layers, heads, hidden, max_seq)
