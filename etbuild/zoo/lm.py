"""tiny_llama: a small decoder-only language model with a KV cache as program state (prefill and decode)."""

from __future__ import annotations

import math

import torch
from torch import nn

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
