"""The reference the llama:: kernels are checked against: ExecuTorch's own kernels (`torch.ops.llama.*`, registered
by `executorch.extension.llm.custom_ops.custom_ops`), or, where executorch is absent, the same computation in
torch ops (the semantics ../shared/LLM.md states and the oracle's kernels were seen to follow)."""

from __future__ import annotations

import importlib.util
import math

import torch

HAS_ORACLE = importlib.util.find_spec("executorch") is not None


def llama_ops() -> object:
    """`torch.ops.llama`, with ExecuTorch's kernels registered. Imported on first use, not when this package is
    collected: the import also defines ExecuTorch's `executorch_prim` ops in torch, which would change what
    tests/kernels/test_signatures.py collects."""
    from etbuild.llm import custom_ops

    custom_ops.release()  # an earlier test's define() would make executorch's library abort on the duplicates
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers torch.ops.llama.*)

    return torch.ops.llama


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos: int, mask: torch.Tensor | None,
         causal: bool, scale: float | None) -> torch.Tensor:
    """Attention over the cache's filled part (or the whole cache under a mask), in torch ops."""
    s, h, d = q.shape[1:]
    n = k.shape[1] if mask is not None else start_pos + s
    group = h // k.shape[2]
    keys, values = (t[:, :n].repeat_interleave(group, dim=2) for t in (k, v))
    scores = torch.einsum("bshd,bthd->bhst", q, keys) * (1 / math.sqrt(d) if scale is None else scale)
    if mask is not None:
        scores = scores + mask
    if causal:
        hidden = torch.arange(n)[None, :] > (start_pos + torch.arange(s))[:, None]
        scores = scores.masked_fill(hidden, float("-inf"))
    return torch.einsum("bhst,bthd->bshd", scores.softmax(-1), values)
