"""`llm.attention: custom`: a decoder whose attention calls `llama::update_cache` and `llama::custom_sdpa`.

The KV cache is one pair of buffers per layer, `[1, max_context, H_kv, D]` (ExecuTorch's layout,
sequence at dim 1), registered on the module so export makes them program state. The model runs
without a transformers cache: each forward hands the attention function registered as `etbuild_custom`
a `SequenceCache` over the buffers (a keyword argument transformers passes through to it), and that
function writes the layer's new keys and values (after RoPE) in place with `update_cache`, then calls
`custom_sdpa`, which attends over positions `0 … start + n - 1` only. A decode step so neither copies
the cache nor attends over unfilled positions. With no mask function registered for `etbuild_custom`,
transformers builds no mask (custom_sdpa is causal). What this takes from transformers is small and
public (`SUPPORTED` in `etbuild.recipe.llm_versions`): `AttentionInterface.register`, the attention-function
contract (`module.layer_idx`, query/key/value `[1, H, n, D]`, extra keyword arguments passed through),
`position_ids` and `logits_to_keep`; transformers' own cache classes, whose `update` signature changed
in 5.24, are not used. In the program, the lowering step `grouped-attention`
(`etbuild.lowering.grouped_attention`) gives one token's call over grouped-query heads the heads as rows.

`llm.kv_cache: int8` (`QuantizedSequenceCache`) keeps each cache as int8 values with a float32 scale
and an int8 zero point per token and head (`[1, max_context, H_kv, 1]`), a quarter of the float
cache's bytes plus 5 bytes a token and head, as ExecuTorch's quantized KV cache does: new keys and
values are quantized per token (`quantized_decomposed::choose_qparams_per_token_asymmetric` →
`quantize_per_token`) and written with `update_cache`; attention then reads the earlier positions
dequantized (`dequantize_per_token` of positions `0 … start - 1` only) followed by the new tokens' own
float keys and values, so a step's tokens attend to themselves exactly.
"""

from __future__ import annotations

from typing import Any

import torch

from etbuild.llm import custom_ops, imports

ATTENTION = "etbuild_custom"
"""The name the attention function is registered under in transformers' AttentionInterface."""
CACHE_KEYWORD = "etbuild_cache"
"""The keyword argument that carries the `SequenceCache` through the model to the attention function."""


class SequenceCache:
    """The caches of every layer, written at `start` (an int, symbolic under export)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], start: Any) -> None:
        self.keys, self.values, self.start = keys, values, start

    def update(self, key: torch.Tensor, value: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write `key`/`value` (`[1, H_kv, n, D]`) at positions `start …`; the layer's full caches."""
        torch.ops.llama.update_cache(key.transpose(1, 2), self.keys[layer], self.start)
        torch.ops.llama.update_cache(value.transpose(1, 2), self.values[layer], self.start)
        return self.keys[layer], self.values[layer]


INT8_MIN, INT8_MAX = -128, 127


class QuantizedSequenceCache(SequenceCache):
    """Int8 caches with per-token scales and zero points; `update` returns the float keys and values of
    positions `0 … start + n - 1`."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], params: list[list[torch.Tensor]],
                 start: Any, prefix: Any) -> None:
        super().__init__(keys, values, start)
        self.params = params  # per layer: key scales, key zero points, value scales, value zero points
        self.prefix = prefix  # `start` again, as a size of its own (see CustomRunner._cache)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        key_scales, key_zeros, value_scales, value_zeros = self.params[layer]
        return (self._write(key.transpose(1, 2), self.keys[layer], key_scales, key_zeros),
                self._write(value.transpose(1, 2), self.values[layer], value_scales, value_zeros))

    def _write(self, new: torch.Tensor, cache: torch.Tensor, scales: torch.Tensor,
               zeros: torch.Tensor) -> torch.Tensor:
        """Quantize `new` (`[1, n, H_kv, D]`) into the cache at `start`; earlier positions dequantized + `new`."""
        import torchao.quantization.pt2e  # noqa: F401  (defines the quantized_decomposed operators)

        qd = torch.ops.quantized_decomposed
        scale, zero = qd.choose_qparams_per_token_asymmetric(new, torch.int8)
        codes = qd.quantize_per_token(new, scale, zero, INT8_MIN, INT8_MAX, torch.int8)
        earlier = qd.dequantize_per_token(
            cache[:, :self.prefix], scales[:, :self.prefix].to(torch.float64),
            zeros[:, :self.prefix].to(torch.int64), INT8_MIN, INT8_MAX, torch.int8, torch.float32)
        torch.ops.llama.update_cache(codes, cache, self.start)
        torch.ops.llama.update_cache(scale.to(torch.float32), scales, self.start)
        torch.ops.llama.update_cache(zero.to(torch.int8), zeros, self.start)
        return torch.cat([earlier, new], dim=1)


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              mask: Any, scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention-function contract: `query` `[1, H, n, D]`, `key`/`value` the step's own
    `[1, H_kv, n, D]`, written into the `etbuild_cache` keyword's caches first; returns `[1, n, H, D]`, no weights."""
    cache: SequenceCache = kwargs[CACHE_KEYWORD]
    key, value = cache.update(key, value, module.layer_idx)
    out = torch.ops.llama.custom_sdpa(query.transpose(1, 2), key, value, cache.start, None, 0.0, True, scaling)
    return out, None


def register() -> None:
    """Define the `llama` operators and register the attention function with transformers."""
    custom_ops.define()
    transformers = imports.transformers()
    transformers.AttentionInterface.register(ATTENTION, attention)


KV_CACHES = {"float32": torch.float32, "int8": torch.int8}
"""`llm.kv_cache` values and the cache tensors' dtype."""


class CustomRunner(torch.nn.Module):
    """`forward(tokens[1, n], input_pos[1])` → last-token logits, attention through the `llama` operators."""

    def __init__(self, model: torch.nn.Module, max_context: int, kv_cache: str = "float32") -> None:
        super().__init__()
        register()
        if kv_cache not in KV_CACHES:
            raise ValueError(f"kv_cache: expected one of {', '.join(KV_CACHES)}; got {kv_cache!r}")
        config = model.config
        self.model = model
        self.max_context = max_context
        self.int8_cache = kv_cache == "int8"
        self.layers = int(config.num_hidden_layers)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (1, max_context, int(config.num_key_value_heads), int(head_dim))
        for layer in range(self.layers):
            for kind in ("key", "value"):
                self.register_buffer(f"{kind}_cache_{layer}", torch.zeros(shape, dtype=KV_CACHES[kv_cache]),
                                     persistent=False)
                if self.int8_cache:
                    self.register_buffer(f"{kind}_scales_{layer}", torch.zeros(*shape[:3], 1), persistent=False)
                    self.register_buffer(f"{kind}_zero_points_{layer}", torch.zeros(*shape[:3], 1, dtype=torch.int8),
                                         persistent=False)
        self.requires_grad_(False)

    def with_float_cache(self) -> CustomRunner:
        """The same model over float32 caches (what an int8-cache program is judged against)."""
        return CustomRunner(self.model, self.max_context).eval()

    def _cache(self, start: Any, input_pos: torch.Tensor) -> SequenceCache:
        keys = [getattr(self, f"key_cache_{i}") for i in range(self.layers)]
        values = [getattr(self, f"value_cache_{i}") for i in range(self.layers)]
        if not self.int8_cache:
            return SequenceCache(keys, values, start)
        parts = [(kind, part) for kind in ("key", "value") for part in ("scales", "zero_points")]
        params = [[getattr(self, f"{kind}_{part}_{i}") for kind, part in parts] for i in range(self.layers)]
        # The dequantized prefix's length is read from the position again: a size of its own whose bound is the
        # cache's. `start`'s bound is tightened by checks such as start + n <= max_context, which export,
        # assuming n >= 2, would take to mean start <= max_context - 2 (one position short for n = 1).
        prefix = input_pos[0].item()
        torch._check(prefix >= 0)
        torch._check(prefix < self.max_context)
        return QuantizedSequenceCache(keys, values, params, start, prefix)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        start = input_pos[0].item()
        torch._check(start >= 0)
        torch._check(start + tokens.shape[1] <= self.max_context)
        cache = self._cache(start, input_pos)
        positions = (input_pos + torch.arange(tokens.shape[1], dtype=torch.int64)).unsqueeze(0)
        config = self.model.config
        eager, config._attn_implementation = config._attn_implementation, ATTENTION
        try:
            out = self.model(input_ids=tokens, position_ids=positions, use_cache=False, logits_to_keep=1,
                             **{CACHE_KEYWORD: cache})  # logits_to_keep: the head on the last position only
        finally:
            config._attn_implementation = eager  # `language_model()` generates as transformers does
        return out.logits[:, -1, :]

    def language_model(self) -> torch.nn.Module:
        """The transformers model inside (what `generate` runs on, with its own attention)."""
        return self.model
