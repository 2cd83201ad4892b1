"""A decoder with a dynamic token count (`max_prefill > 1`) and XNNPACK: its linears, norms, MLPs and RoPE
are delegated with the dynamic size, and one call takes the whole prompt (n > 1) or one token (n = 1)."""

from __future__ import annotations

import numpy as np
import torch

from etbuild.llm.runner import decoder
from etbuild.pipeline import compile_module
from etbuild.recipe.config import BackendConfig
from etbuild.runtime import Program
from tests.llm_support import PROMPT, TINY, greedy, hf_greedy

MAX_PREFILL = 8
TOKENS = 16


def compile_dynamic(model: torch.nn.Module):
    """`model`'s runner-contract forward, n dynamic in [1, MAX_PREFILL], with XNNPACK."""
    dynamic = ({1: torch.export.Dim("n", min=1, max=MAX_PREFILL)}, None)
    return compile_module(model, (torch.tensor([PROMPT]), torch.tensor([0])), dynamic_shapes=dynamic,
                          backends=[BackendConfig("xnnpack")])


def test_prefill_in_one_call_gives_eager_logits_and_hugging_face_tokens(tmp_path):
    model = decoder(config=TINY, max_context=64, max_prefill=MAX_PREFILL, attention="custom")
    compiled = compile_dynamic(model)
    report = compiled.report.to_json()["methods"]["forward"]
    assert report["delegated_share"] > 0.85, report  # the linears, norms, MLPs and RoPE, with the dynamic size
    # rotate-half is delegated; the one slice outside takes the last position before the output head
    sliced = [o for o in report["outside"] if o["operator"] in ("aten::slice.Tensor", "aten::cat", "aten::neg")]
    assert [o["source"].split(" (")[0] for o in sliced] == ["model"], sliced
    assert report["delegates"] == TINY["num_hidden_layers"] + 2, report  # split by each attention and the slice
    path = tmp_path / "prefill.pte"
    path.write_bytes(compiled.pte)
    forward = Program.load(path).load_method("forward")
    with torch.no_grad():
        expected = model(torch.tensor([PROMPT]), torch.tensor([0])).numpy()
    actual = forward(np.array([PROMPT], dtype=np.int64), np.array([0], dtype=np.int64))[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)
    reference = hf_greedy(decoder(config=TINY, max_context=64, max_prefill=MAX_PREFILL).language_model(),
                          PROMPT, TOKENS)
    forward = Program.load(path).load_method("forward")  # a fresh cache
    assert greedy(forward, PROMPT, TOKENS) == reference  # the prompt (n = 6) in one call, then n = 1
