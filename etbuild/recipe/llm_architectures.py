"""The decoder architectures a recipe may name (`model.llm.config.architecture`, or config.json's
`architectures`), each from its own transformers class."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

ARCHITECTURES: Mapping[str, str] = MappingProxyType({
    "LlamaForCausalLM": "LlamaConfig",  # Llama 2 and 3.x (rope_scaling llama3), SmolLM
    "Qwen2ForCausalLM": "Qwen2Config",
    "Qwen3ForCausalLM": "Qwen3Config",
    "MistralForCausalLM": "MistralConfig",
    "Phi3ForCausalLM": "Phi3Config",
    "GemmaForCausalLM": "GemmaConfig",
})
"""Model class name → its config class name, both in the `transformers` package."""


def unsupported(name: object) -> str | None:
    """Why `name` is not an architecture etbuild builds, or None when it is one."""
    if isinstance(name, str) and name in ARCHITECTURES:
        return None
    return f"expected one of {', '.join(ARCHITECTURES)}; got {name!r}"
