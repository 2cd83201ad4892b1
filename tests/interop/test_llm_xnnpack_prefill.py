"""ExecuTorch's runtime runs our dynamic XNNPACK decoders (`max_prefill > 1`): the prompt in one call
(n > 1), then one token a call (n = 1), as its LLM runner drives them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.llm import custom_ops
from etbuild.llm.runner import decoder
from etbuild.runtime import Program
from etbuild.verify.oracle import executorch_methods
from tests.conftest import HAS_EXECUTORCH
from tests.etbuild.llm.test_llm_xnnpack_prefill import MAX_PREFILL, TOKENS, compile_dynamic
from tests.llm_support import PROMPT, TINY, greedy, hf_greedy, write_llm_recipe

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

SEQUENCE = [5, 9, 17, 33, 2, 8, 40, 41, 3, 7, 11, 13, 60, 61, 62, 63]


def _executorch_ops() -> None:
    custom_ops.release()  # executorch's llama:: library registers its own operators and kernels
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401


def test_float_prefill_in_one_call_gives_hugging_face_tokens(tmp_path):
    model = decoder(config=TINY, max_context=64, max_prefill=MAX_PREFILL, attention="custom")
    path = tmp_path / "prefill.pte"
    path.write_bytes(compile_dynamic(model).pte)
    reference = hf_greedy(decoder(config=TINY, max_context=64, max_prefill=MAX_PREFILL).language_model(),
                          PROMPT, TOKENS)
    _executorch_ops()
    (forward,) = executorch_methods(path, "forward")
    assert greedy(forward, PROMPT, TOKENS) == reference


def _chunked(forward, chunk: int) -> np.ndarray:
    """The logits after each chunk of SEQUENCE fed `chunk` tokens a call (the last chunk's last token)."""
    out = []
    for start in range(0, len(SEQUENCE), chunk):
        tokens = np.array([SEQUENCE[start:start + chunk]], dtype=np.int64)
        out.append(np.asarray(forward(tokens, np.array([start], dtype=np.int64))[0]))
    return np.stack(out)


@pytest.mark.slow
def test_8da4w_prefill_in_chunks_matches_token_by_token_in_both_runtimes(tmp_path: Path):
    from etbuild.build.driver import build

    recipe = write_llm_recipe(tmp_path, "q", {"config": TINY, "max_context": 64, "max_prefill": MAX_PREFILL},
                              llm={"attention": "custom"}, backends=[{"name": "xnnpack"}],
                              quantize={"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"},
                              verify={"agreement": 0.5})
    result = build([recipe], tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    pte = tmp_path / "build" / "q" / "q.pte"
    assert json.loads((tmp_path / "build" / "q" / "verify.json").read_text())["passed"]
    ours = [_chunked(Program.load(pte).load_method("forward"), chunk) for chunk in (MAX_PREFILL, 1)]
    _executorch_ops()
    theirs = [_chunked(executorch_methods(pte, "forward")[0], chunk) for chunk in (MAX_PREFILL, 1)]
    by_token = [t[MAX_PREFILL - 1::MAX_PREFILL] for t in (ours[1], theirs[1])]  # after each chunk's last token
    for chunked, single in zip((ours[0], theirs[0]), by_token):
        # dynamic int8 activations are quantized per token: a chunk rounds as its tokens one by one do
        np.testing.assert_allclose(chunked, single, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-3, atol=2e-3)
    assert torch.equal(torch.from_numpy(ours[0]).argmax(-1), torch.from_numpy(theirs[0]).argmax(-1))
