"""The language model in ExecuTorch's runtime: our `.pte` and ExecuTorch's own build of the recipe
(`share_mutable_buffers`, as its LLM export sets it) give eager torch's 32 greedy tokens in its
runtime and in ours."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.recipe import load_recipe
from etbuild.tools.generate import generate, greedy
from etbuild.verify.oracle import executorch_build, executorch_methods, shared_state_config
from tests.conftest import HAS_EXECUTORCH
from tests.lm_support import LM_RECIPE, PROMPT, TOKENS, build_lm, eager_tokens

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]


@pytest.fixture(scope="module")
def expected() -> list[int]:
    return eager_tokens()


def test_our_pte_in_executorch_runtime(tmp_path_factory: pytest.TempPathFactory, expected: list[int]) -> None:
    pte = build_lm(tmp_path_factory.mktemp("build"))
    assert greedy(*executorch_methods(pte, "prefill", "decode"), PROMPT, TOKENS) == expected
    assert generate(pte, PROMPT, TOKENS) == expected


def test_executorch_pte_in_both_runtimes(tmp_path: Path, expected: list[int]) -> None:
    pte = executorch_build(load_recipe(LM_RECIPE), tmp_path / "lm.pte", config=shared_state_config()).path
    assert greedy(*executorch_methods(pte, "prefill", "decode"), PROMPT, TOKENS) == expected
    assert generate(pte, PROMPT, TOKENS) == expected
