"""`llm.kv_cache: int8` in ExecuTorch's runtime: its per-token quantized kernels and `llama::` kernels run our
int8-cache programs as ours does (portable, and 8da4w with XNNPACK), and its `TextLLMRunner` generates from them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import HAS_EXECUTORCH
from tests.llm_support import TINY, save_checkpoint, train_tokenizer, write_llm_recipe

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

QUANTIZE = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"}


def _build(root: Path, **sections: Any) -> tuple[Path, dict[str, Any]]:
    from etbuild.build.driver import build

    size = train_tokenizer(root / "ckpt")
    save_checkpoint(root / "ckpt", {**TINY, "vocab_size": size})
    recipe = write_llm_recipe(root, "kv8", {"path": "ckpt", "max_context": 64, "max_prefill": 16},
                              llm={"attention": "custom", "kv_cache": "int8"}, verify={"agreement": 0.8}, **sections)
    result = build([recipe], root / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    return root / "build" / "kv8" / "kv8.pte", json.loads((root / "build" / "kv8" / "verify.json").read_text())["llm"]


def _both_runtimes_agree(report: dict[str, Any], min_snr: float) -> None:
    theirs = report["executorch"]
    assert report["passed"] and theirs["passed"]
    assert report["snr_db"] > min_snr and theirs["snr_db"] > min_snr
    assert abs(report["snr_db"] - theirs["snr_db"]) < 3 and report["agreement"] == theirs["agreement"]


@pytest.fixture(scope="module")
def portable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return _build(tmp_path_factory.mktemp("kv8-portable"))


def test_executorch_runtime_follows_the_float_model(portable):
    _both_runtimes_agree(portable[1], min_snr=40)


def test_both_runtimes_give_the_same_logits(portable):
    from etbuild.llm import custom_ops
    from etbuild.runtime import Program
    from etbuild.verify.oracle import executorch_methods

    custom_ops.release()
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401

    (theirs,) = executorch_methods(portable[0], "forward")
    ours = Program.load(portable[0]).load_method("forward")
    calls = [(np.array([[5, 9, 17, 33]], dtype=np.int64), np.array([0], dtype=np.int64))]
    calls += [(np.array([[7 * i % 80 + 3]], dtype=np.int64), np.array([i], dtype=np.int64)) for i in range(4, 64)]
    for call in calls:
        np.testing.assert_allclose(ours(*call)[0], theirs(*call)[0], rtol=1e-4, atol=1e-4)


def test_text_llm_runner_generates_from_the_int8_cache_program(portable):
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    tokenizer = portable[0].parent / "tokenizer.json"
    pieces: list[str] = []
    TextLLMRunner(str(portable[0]), str(tokenizer)).generate(
        "the quick brown fox", GenerationConfig(max_new_tokens=16, temperature=0.0, echo=False),
        token_callback=pieces.append)
    assert pieces


@pytest.mark.slow
def test_8da4w_xnnpack_program_with_int8_cache_runs_in_both_runtimes(tmp_path):
    pte, report = _build(tmp_path, quantize=QUANTIZE, backends=[{"name": "xnnpack"}])
    _both_runtimes_agree(report, min_snr=10)
