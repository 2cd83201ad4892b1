"""`llm.attention: custom`: a decoder whose attention calls `llama::update_cache` and `llama::custom_sdpa`.

The KV cache is one pair of buffers per layer, `[1, max_context, H_kv, D]` (ExecuTorch's layout,
sequence at dim 1), registered on the module so export makes them program state. Each forward
hands the model a `SequenceCache` over them: transformers' attention layers call its `update`
after RoPE, which writes the new keys and values in place with `update_cache` and returns the whole
caches; the attention function registered as `etbuild_custom` then calls `custom_sdpa`, which
attends over positions `0 … start + n - 1` only. A decode step so neither copies the cache nor
attends over unfilled positions. With no mask function registered for `etbuild_custom`,
transformers builds no mask (custom_sdpa is causal).
"""

from __future__ import annotations

from typing import Any

import torch

from etbuild.llm import custom_ops, imports

ATTENTION = "etbuild_custom"
"""The name the attention function is registered under in transformers' AttentionInterface."""


class SequenceCache:
    """The caches of every layer, written at `start` (an int, symbolic under export)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], start: Any) -> None:
        self.keys, self.values, self.start = keys, values, start

    def update(self, key: torch.Tensor, value: torch.Tensor, layer: int, *_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write `key`/`value` (`[1, H_kv, n, D]`) at positions `start …`; the layer's full caches."""
        torch.ops.llama.update_cache(key.transpose(1, 2), self.keys[layer], self.start)
        torch.ops.llama.update_cache(value.transpose(1, 2), self.values[layer], self.start)
        return self.keys[layer], self.values[layer]


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              mask: Any, scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention-function contract: `query` `[1, H, n, D]`, `key`/`value` the layer's caches;
    returns `[1, n, H, D]` and no weights."""
    start = kwargs["cache_start"]
    out = torch.ops.llama.custom_sdpa(query.transpose(1, 2), key, value, start, None, 0.0, True, scaling)
    return out, None


def register() -> None:
    """Define the `llama` operators and register the attention function with transformers."""
    custom_ops.define()
    transformers = imports.transformers()
    transformers.AttentionInterface.register(ATTENTION, attention)


class CustomRunner(torch.nn.Module):
    """`forward(tokens[1, n], input_pos[1])` → last-token logits, attention through the `llama` operators."""

    def __init__(self, model: torch.nn.Module, max_context: int) -> None:
        super().__init__()
        register()
        config = model.config
        self.model = model
        self.max_context = max_context
        self.layers = int(config.num_hidden_layers)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (1, max_context, int(config.num_key_value_heads), int(head_dim))
        for layer in range(self.layers):
            self.register_buffer(f"key_cache_{layer}", torch.zeros(shape), persistent=False)
            self.register_buffer(f"value_cache_{layer}", torch.zeros(shape), persistent=False)
        self.requires_grad_(False)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        start = input_pos[0].item()
        torch._check(start >= 0)
        torch._check(start + tokens.shape[1] <= self.max_context)
        cache = SequenceCache([getattr(self, f"key_cache_{i}") for i in range(self.layers)],
                              [getattr(self, f"value_cache_{i}") for i in range(self.layers)], start)
        positions = (input_pos + torch.arange(tokens.shape[1], dtype=torch.int64)).unsqueeze(0)
        config = self.model.config
        eager, config._attn_implementation = config._attn_implementation, ATTENTION
        try:
            out = self.model(input_ids=tokens, position_ids=positions, past_key_values=cache, use_cache=True,
                             cache_start=start, logits_to_keep=1)  # the head on the last position only
        finally:
            config._attn_implementation = eager  # `language_model()` generates as transformers does
        return out.logits[:, -1, :]

    def language_model(self) -> torch.nn.Module:
        """The transformers model inside (what `generate` runs on, with its own attention)."""
        return self.model
