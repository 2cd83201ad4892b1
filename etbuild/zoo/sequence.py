"""Sequence models: transformer_encoder, gru_classifier, encoder_decoder (two methods)."""

from __future__ import annotations

import math

import torch
from torch import nn

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
