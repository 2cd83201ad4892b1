"""ExecuTorch's LLM kernels (the `llama::` namespace of `extension/llm/custom_ops`): a KV cache updated in place,
and scaled dot-product attention over the filled part of it. Numpy, torch-free; importing this package registers
every kernel."""

from etbuild.kernels.llm import cache, quantized_sdpa, sdpa  # noqa: F401
